"""``tessel``: search a pipeline schedule for a placement of layers over devices (Tessel-style).

Model
-----
Costs, stages and the simulated stage graph are those of ``pipeline`` (see
:mod:`optimizations._pipegraph`): per-layer micro-batch times from the graph
given, a contiguous split into stages (``partition``), stage ``k`` on device
``placement[k]`` (default: stage ``k`` on device ``k``; ``0:1:1:0`` puts
four stages in a V over two devices).

Search: a *repetend* is, per device, an order of its blocks (the forward
``F`` and backward ``B`` of each of its stages) and per block a micro-batch
lag; unrolled over rounds ``i`` (block ``x`` works on micro-batch ``i -
lag[x]``, rounds without that micro-batch skipped) it gives the steady state
plus the warm-up and cool-down.  1F1B (device 0: ``B`` lag 2, ``F`` lag 0)
and GPipe-like orders are points of this space.  Every order and every lag
vector with ``0 <= lag <= max_lag`` that keeps data dependencies monotone
(``F`` lags non-decreasing along the stages, ``B`` lags non-increasing, the
last stage's ``B`` no earlier than its ``F``) is unrolled, refused if the
ranks would wait on each other forever, and costed by replaying it in the
simulator; the fastest wins (ties: fewer stashed activations), optionally
under ``memory_mb`` of stashed activations per device.  Progress goes to
stderr; Ctrl-C stops the search and keeps the best schedule so far.

The winner is reported against GPipe and 1F1B on the same stages (when each
device holds one stage) and, with ``csv=PATH``, written as the per-rank
action list that torch's ``_PipelineScheduleRuntime._load_csv`` executes.
``schedule_csv=PATH`` costs the schedule in such a file (one written by an
earlier search, or by hand) instead of searching: what a schedule found
from one trace takes with another.

Hand-overs are costed as torch's runtime makes them: each send and each
receive an action of its own (``action_overhead_us`` each, with the host cost
of posting it), each receive posted where the runtime's lowering of a
compute-only schedule puts it (:func:`optimizations._schedules.receives_before`),
often an action or more ahead of the action that takes its data.

Assumptions and limits: those of ``pipeline`` (identical devices, chain
models, one runtime cost per action, ``action_overhead_us``), full backward only (no
split into input/weight gradients, so zero-bubble schedules are outside the
space); the search is exhaustive within its bounds, which grow as
``(max_lag+1)^(2 stages)``: past ``budget`` candidates it stops and says so.
"""
from __future__ import annotations

import itertools
import sys
import time

from . import _schedules as sch
from ._corun import PHASE_SOURCES
from ._handover_now import HANDOVER_SOURCES, handover_now
from ._pipegraph import (build_graph, non_negative, recording_ns, parse_partition, partition, simulate_pipeline, stage_costs,
                         unit_costs)
from .base import Optimization, OptionError, Param
from .pipeline import ITERATIONS, bubble_fraction

__all__ = ["Tessel", "OPTIMIZATION", "parse_placement", "repetends", "search", "given_schedule", "PROGRESS_EVERY"]

#: Candidates enumerated between two progress lines on stderr.
PROGRESS_EVERY = 1000


def parse_placement(text: str, stages: int) -> list:
    """Device of each stage from ``"0:1:1:0"`` ('' : stage k on device k).

    >>> parse_placement("0:1:1:0", 2), parse_placement("", 3)
    ([0, 1, 1, 0], [0, 1, 2])
    """
    if not text:
        return list(range(stages))
    try:
        dev = [int(x) for x in text.split(":")]
    except ValueError:
        raise sch.ScheduleError(f"tessel: placement {text!r} is not a ':'-separated list of device numbers") from None
    if sorted(set(dev)) != list(range(stages)):
        raise sch.ScheduleError(f"tessel: placement {text!r} must use each of the {stages} devices 0..{stages - 1}")
    return dev


def _monotone(lag, n_stages) -> bool:
    F, B = sch.Kind.F, sch.Kind.B
    return (all(lag[(s, F)] >= lag[(s - 1, F)] for s in range(1, n_stages))
            and all(lag[(s, B)] >= lag[(s + 1, B)] for s in range(n_stages - 1))
            and lag[(n_stages - 1, B)] >= lag[(n_stages - 1, F)])


def repetends(placement, max_lag: int):
    """Yield ``(orders, lags)`` of the search space (see the module docstring)."""
    devices = max(placement) + 1
    blocks = [[(s, k) for s in range(len(placement)) if placement[s] == d for k in sch.Kind] for d in range(devices)]
    keys = [b for bl in blocks for b in bl if b != (0, sch.Kind.F)]
    for orders in itertools.product(*(itertools.permutations(b) for b in blocks)):
        for vals in itertools.product(range(max_lag + 1), repeat=len(keys)):
            lag = dict(zip(keys, vals))
            lag[(0, sch.Kind.F)] = 0
            if _monotone(lag, len(placement)):
                yield [list(o) for o in orders], lag


def _space_size(placement, max_lag):
    from math import factorial

    devices = max(placement) + 1
    n = 1
    for d in range(devices):
        n *= factorial(2 * placement.count(d))
    return n * (max_lag + 1) ** (2 * len(placement) - 1)


def search(sc, placement, microbatches, device, max_lag, budget=20000, memory_bytes=0, progress=None):
    """Best ``(time_ns, act_bytes, actions, (orders, lags))`` over the space, plus the number costed
    and whether the search was cut short (budget or Ctrl-C)."""
    n_stages = len(placement)
    seen, best, costed, cut = set(), None, 0, ""
    total = _space_size(placement, max_lag)
    t0 = time.time()
    try:
        for k, (orders, lags) in enumerate(repetends(placement, max_lag)):
            if k >= budget:
                cut = f"budget of {budget} candidates reached"
                break
            if progress and k and k % PROGRESS_EVERY == 0:
                progress(f"tessel: {k}/{total} candidates, {costed} distinct schedules costed, best "
                         f"{best[0] / 1e6 if best else float('nan'):.3f} ms ({time.time() - t0:.0f} s)")
            acts = sch.unroll(orders, lags, microbatches)
            key = tuple(tuple(a) for a in acts)
            if key in seen or sch.blocked(acts, n_stages):
                continue
            seen.add(key)
            act = _stashed_bytes(sc, placement, acts)
            if memory_bytes and act > memory_bytes:
                continue
            t = simulate_pipeline(runtime_graph(sc, acts, device, microbatches), device).mean_iteration_ns()[1]
            costed += 1
            if best is None or (t, act) < best[:2]:
                best = (t, act, acts, (orders, lags))
    except KeyboardInterrupt:
        cut = "interrupted (Ctrl-C)"
    return best, costed, cut


def _stashed_bytes(sc, placement, acts) -> int:
    """Largest stashed activation bytes of a device under ``acts``."""
    return max(sum(sch.in_flight(acts, s) * sc.stash_bytes[s] for s in range(len(placement)) if placement[s] == d)
               for d in range(max(placement) + 1))


def given_schedule(path, sc, placement, microbatches, device):
    """``(time_ns, act_bytes, actions, ((), {}))`` of the schedule in CSV file ``path``, as
    :func:`search` reports its best; refused (:class:`ScheduleError`, naming the file) unless every
    stage runs each micro-batch's forward and backward once on the device ``placement`` puts it
    on (:func:`~optimizations._schedules.validate`) without a cyclic wait."""
    from pathlib import Path

    try:
        acts = sch.from_csv(Path(path).read_text())
        sch.validate(acts, len(placement), microbatches)
        wrong = {s: r for s, r in sch.stage_rank(acts).items() if placement[s] != r}
        if wrong or len(acts) != max(placement) + 1:
            raise sch.ScheduleError(f"its stages are not placed {':'.join(map(str, placement))}")
        stuck = sch.blocked(acts, len(placement))
        if stuck:
            raise sch.ScheduleError(f"the ranks would wait on each other forever at {', '.join(stuck)}")
    except (OSError, ValueError, sch.ScheduleError) as exc:
        raise sch.ScheduleError(f"tessel: {path}: not a schedule to cost ({exc})") from None
    t = simulate_pipeline(runtime_graph(sc, acts, device, microbatches), device).mean_iteration_ns()[1]
    return t, _stashed_bytes(sc, placement, acts), acts, ((), {})


def runtime_graph(sc, acts, device, microbatches: int):
    """:func:`~optimizations._pipegraph.build_graph` of ``acts`` as torch's
    ``_PipelineScheduleRuntime`` runs a schedule from a CSV: each send and receive an action of
    its own (``sc``'s ``comm_action_ns``), each receive posted where its lowering puts it
    (``lowered_receives``).  Until session 87 every receive was posted right before the action
    that takes its data, where the runtime posts most of them an action or more ahead: the
    chain row's 1F1B order was predicted 10 % over ``pipeline``'s 1F1B from one trace
    (docs/validation-log.md, "Session 87")."""
    return build_graph(sc, acts, ITERATIONS, device, True, microbatches, lowered_receives=True)


def _describe(orders, lags) -> str:
    return " | ".join(" ".join(f"{s}{k.value}(lag {lags[(s, k)]})" for s, k in seq) for seq in orders)


class Tessel(Optimization):
    name = "tessel"
    summary = "search a pipeline schedule (repetend + warm-up/cool-down) for a placement, simulator as cost model"
    params = (Param("stages", 2, "devices (with the default placement: stages)", int),
              Param("microbatches", 4, "micro-batches per iteration", int),
              Param("partition", "auto", "auto, layers per stage (5:6) or first layer of each later stage", str),
              Param("action_overhead_us", 0.0, "pipeline runtime's own cost per action (F, B, and each send or "
                    "receive), us (0: not modelled)"),
              Param("recording_us", "auto", "CPU trace: the tracer's cost per recorded op, us, taken out of every "
                    "micro-batch pass, since the run predicted is not traced (auto: measured here; 0: kept)", str),
              Param("corun", "trace", "CPU: ranks on one host's cores compute at the co-run rate of the trace's "
                    "own ops re-run beside a twin at the micro-batch, per phase (trace) or one rate of the "
                    "compute ops (compute), of the device profile (profile), or alone (off)", str,
                    PHASE_SOURCES),
              Param("handover", "profile", "CPU, 2+ ranks: the hand-over figures (p2p_handover, p2p_post) of the "
                    "device profile (profile) or of a sitting of its exchange measured when predicting (now, a few "
                    "seconds; once per process)", str, HANDOVER_SOURCES),
              Param("placement", "", "device of each stage, ':'-separated (default: stage k on device k)", str),
              Param("max_lag", 0, "largest micro-batch lag of a block (0: 2 x stages)", int),
              Param("memory_mb", 0.0, "limit on stashed activations per device, MB (0: none)"),
              Param("budget", 20000, "most candidates to enumerate", int),
              Param("csv", "", "write the best schedule here (torch _load_csv format)", str),
              Param("schedule_csv", "", "cost the schedule in this file (torch _load_csv format, as csv= writes) "
                    "instead of searching", str),
              Param("scale_grads", True, "each stage divides its gradients by M after its last backward, as torch's "
                    "pipelining runtime does by default (scale_grads=True): one pass over them", bool))
    assumptions = __doc__

    def apply(self, ctx):
        if self.stages < 1 or self.microbatches < 1:
            raise OptionError("tessel: stages and microbatches must be at least 1")
        place = parse_placement(self.placement, self.stages)
        n = len(place)
        non_negative(self, "action_overhead_us")
        handover_now(ctx, self.handover, max(place) + 1)
        units = unit_costs(ctx, self.microbatches, max(place) + 1, self.corun, recording_ns(self, ctx.graph))
        if n > len(units.names):
            raise sch.ScheduleError(f"tessel: {n} stages but the model has only {len(units.names)} layers")
        if self.partition == "auto":
            bounds = partition(units.fwd_ns + units.bwd_ns, [ctx.device.p2p_handover_ns(b) for b in units.out_bytes], n)
        else:
            bounds = parse_partition(self.partition, units.names, n)
        sc = stage_costs(units, bounds, ctx.device, self.action_overhead_us * 1e3, comm_actions=True,
                         scale_grads=self.scale_grads and self.microbatches > 1)
        max_lag = self.max_lag or 2 * n
        if self.schedule_csv:
            best, costed, cut = given_schedule(self.schedule_csv, sc, place, self.microbatches, ctx.device), 1, ""
        else:
            best, costed, cut = search(sc, place, self.microbatches, ctx.device, max_lag, self.budget,
                                       int(self.memory_mb * 1e6), lambda m: print(m, file=sys.stderr, flush=True))
        if best is None:
            raise sch.ScheduleError("tessel: no schedule in the search space runs"
                                    + (" within memory_mb" if self.memory_mb else "") + (f" ({cut})" if cut else ""))
        t, act, acts, (orders, lags) = best
        pg = runtime_graph(sc, acts, ctx.device, self.microbatches)
        res = simulate_pipeline(pg, ctx.device, ctx)
        ctx.graph = pg.graph
        m = ctx.metrics
        m["tessel_ms"] = t / 1e6
        if place == list(range(n)):
            for name in ("gpipe", "1f1b"):
                if name == "1f1b" and self.microbatches < n:
                    continue
                ref = runtime_graph(sc, sch.make_schedule(name, n, self.microbatches), ctx.device, self.microbatches)
                m[f"{name}_ms"] = simulate_pipeline(ref, ctx.device).mean_iteration_ns()[1] / 1e6
        m["bubble_fraction"] = bubble_fraction(res)
        m["max_activations_bytes"] = act
        m["schedule"] = " / ".join(" ".join(map(str, seq)) for seq in acts)
        m["repetend"] = _describe(orders, lags) if orders else f"given ({self.schedule_csv})"
        m["candidates_costed"] = costed
        if self.csv:
            from daydream.fileio import atomic_write_bytes

            atomic_write_bytes(self.csv, sch.to_csv(acts).encode())
            ctx.note(f"tessel: wrote the schedule to {self.csv} (torch _PipelineScheduleRuntime._load_csv)")
        if not self.schedule_csv:
            ctx.note(f"tessel: {costed} distinct schedules costed, lags 0..{max_lag}"
                     + (f"; search stopped early: {cut}" if cut else ""))


OPTIMIZATION = Tessel
