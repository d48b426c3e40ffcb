"""``pipeline``: pipeline parallelism over ``stages`` devices with ``microbatches`` micro-batches.

Model
-----
The traced single-device iteration is cut into per-layer costs (see
:mod:`optimizations._pipegraph`): the wall time of each iteration after the
first is attributed to the module running (gaps to the op before them), at
the micro-batch size ``B/M`` as the ``batch-size`` what-if scales ops (fixed
per-op part plus a part proportional to the batch, compute ops along the
device's throughput curve).  Durations come from the graph given, so the
what-if composes with earlier ones (``tensor-parallel`` then ``pipeline``).

Layers are split into contiguous stages: ``partition`` given (layer counts
``5:6`` or the first layer of each later stage, ``MLP.blocks.2``), or found
by a PipeDream-style dynamic programme minimising the slowest stage (compute,
or the transfer on the link after it).  A new graph is built and simulated:
per rank a compute lane running the schedule's actions (``F``/``B`` of a
stage on a micro-batch) in order, per directed link a transfer lane
(activation forward, gradient backward; ``bytes / bw + latency`` with the
device's point-to-point figures, else its collective ones: calibrated gloo on
CPU, published link on GPUs; on a CPU profile with ``p2p_handover`` the
latency is that, the mean hand-over of a GPipe-like exchange between two
computing ranks, stalls included:
:meth:`~daydream.device.DeviceProfile.p2p_handover_ns`),
the backward of every micro-batch but an iteration's first also adds its
gradients into ``.grad`` (a streaming add of the stage's gradient bytes at the
device's measured bandwidth; the traced single batch only stored them),
per iteration an input task (the traced input pipeline and other untagged
work, on every rank) and the optimizer step of the rank's parameters (the
traced step's updates split by parameter bytes, and the whole call around them,
which every rank's own step runs: :mod:`optimizations._optstep`).  Where the device profile has the
host cost of posting sends and receives (gloo on CPU), each post runs on its
rank's compute lane, and two posts the ranks make to each other at about the
same moment both pay the profile's calibrated collision cost
(:func:`optimizations._handover.add_post_collisions`); an action that
starts after its rank sat idle takes the profile's calibrated factor for
work resumed after that gap (``resume``, :mod:`optimizations._resume`).
Schedules:

* ``gpipe``: all forwards, then all backwards, flush, step;
* ``1f1b``: PipeDream-Flush / torch ``Schedule1F1B`` (needs ``M >= S``); that
  runtime waits for a send with its rank's next receive before computing
  again, so such sends hand over in the profile's ``p2p_preposted`` latency
  (the sender blocked: :func:`optimizations._pipegraph.waited_send`), the
  others in ``p2p_handover``;
* ``interleaved``: Megatron's interleaved 1F1B with ``virtual`` stages per
  rank (``S * virtual`` model chunks; ``M`` a multiple of ``S``);
* ``2bw``: PipeDream-2BW, 1F1B with no flush (weights double-buffered): the
  steady-state iteration of a run of 5 simulated iterations.

Metrics: ``bubble_fraction`` (mean idle time of a rank in an iteration,
besides its input and optimizer work, over its mean F+B time: ``(S-1)/M`` for
GPipe and 1F1B with equal stages and free communication, ``(S-1)/(M v)``
interleaved), per stage the micro-batch forward/backward ms, per rank the
memory: weights (x2 for 2BW), gradients, optimizer state (momentum SGD 1x,
Adam 2x parameters) and stashed activations (the most micro-batches in flight
at the stage under the schedule, times the outputs of its modules per
micro-batch, from the module table).

Assumptions and limits: stages run on identical devices; a stage's time per
micro-batch is the sum of its layers' (plus ``action_overhead_us`` per action
where given, and splitting the batch changes no kernel choice); with
``scale_grads`` (the default) each stage also divides its gradients by ``M``
after its last backward, as torch's schedules do (one op per parameter tensor
and a read and a write of its bytes from memory), where a runtime that folds
``1/M`` into the loss has no such pass; transfers do not slow computation (a CPU rank needs a spare core for
gloo); the model is a chain (skip connections across stage boundaries are not
costed); activation memory counts module outputs only (not temporaries of
the autograd graph).  Not valid when the traced iteration is dominated by
work outside forward/backward that does not shard across ranks.
"""
from __future__ import annotations

import numpy as np

from daydream.model import EventKind, Phase

from . import _schedules as sch
from ._common import optimizer_state_factor
from ._corun import PHASE_SOURCES
from ._handover_now import HANDOVER_SOURCES, handover_now
from ._pipegraph import (build_graph, non_negative, recording_ns, parse_partition, partition, simulate_pipeline, stage_costs,
                         unit_costs)
from .base import Optimization, OptionError, Param

__all__ = ["Pipeline", "OPTIMIZATION", "bubble_fraction", "ITERATIONS", "ITERATIONS_2BW"]

#: Iterations simulated for a flushing schedule (every one after the first is identical).
ITERATIONS = 3
#: Iterations simulated for 2BW; the steady state is measured between the first and the last.
ITERATIONS_2BW = 5


def bubble_fraction(result) -> float:
    """Mean idle time per rank and iteration (besides input and optimizer tasks) over mean F+B time.

    Counts iterations after the first, between each rank's markers.
    """
    g = result.graph
    T = g.tasks
    dur = result.end_ns - result.start_ns
    idle = busy = 0.0
    for r, marks in g.markers.items():
        b = result.start_ns[np.asarray(marks, np.int64)]
        rank = T["rank"] == r
        for i in range(1 if len(b) > 2 else 0, len(b) - 1):
            it = rank & (T["iteration"] == i) & (T["kind"] != EventKind.MARKER) & (T["kind"] != EventKind.COLLECTIVE)
            fb = it & np.isin(T["phase"], (Phase.FORWARD, Phase.BACKWARD))
            work = float(dur[fb].sum())
            busy += work
            idle += float(b[i + 1] - b[i]) - float(dur[it].sum())
    return idle / busy if busy else 0.0


class Pipeline(Optimization):
    name = "pipeline"
    summary = "pipeline parallelism: S stages, M micro-batches, gpipe/1f1b/interleaved/2bw schedules"
    params = (Param("stages", 2, "pipeline stages (devices)", int),
              Param("microbatches", 4, "micro-batches per iteration", int),
              Param("schedule", "1f1b", "gpipe, 1f1b, interleaved or 2bw", str, tuple(sch.SCHEDULES)),
              Param("virtual", 1, "model chunks per rank (interleaved)", int),
              Param("partition", "auto", "auto, layers per stage (5:6) or first layer of each later stage", str),
              Param("corun", "trace", "CPU: ranks on one host's cores compute at the co-run rate of the trace's "
                    "own ops re-run beside a twin at the micro-batch, per phase (trace) or one rate of the "
                    "compute ops (compute), of the device profile (profile), or alone (off)", str,
                    PHASE_SOURCES),
              Param("handover", "profile", "CPU, 2+ ranks: the hand-over figures (p2p_handover, p2p_post) of the "
                    "device profile (profile) or of a sitting of its exchange measured when predicting (now, a few "
                    "seconds; once per process)", str, HANDOVER_SOURCES),
              Param("action_overhead_us", 0.0, "pipeline runtime's own cost per F/B action, us (0: not modelled)"),
              Param("recording_us", "auto", "CPU trace: the tracer's cost per recorded op, us, taken out of every "
                    "micro-batch pass, since the run predicted is not traced (auto: measured here; 0: kept)", str),
              Param("scale_grads", True, "each stage divides its gradients by M after its last backward, as torch's "
                    "pipelining schedules do by default (scale_grads=True): one pass over them", bool))
    assumptions = __doc__

    def _check(self):
        S, M, V = self.stages, self.microbatches, self.virtual
        if S < 1 or M < 1 or V < 1:
            raise OptionError(f"pipeline: stages ({S}), microbatches ({M}) and virtual ({V}) must be at least 1")
        if V > 1 and self.schedule != "interleaved":
            raise OptionError(f"pipeline: virtual={V} needs schedule=interleaved")

    def actions(self):
        """Per-rank actions: one iteration (flushing schedules) or :data:`ITERATIONS_2BW` (2bw)."""
        S, M = self.stages, self.microbatches
        if self.schedule == "2bw":
            return sch.two_bw(S, M, ITERATIONS_2BW)
        return sch.make_schedule(self.schedule, S, M, self.virtual)

    def apply(self, ctx):
        self._check()
        acts = self.actions()          # refuses impossible schedules before any costing
        n_stages = self.stages * (self.virtual if self.schedule == "interleaved" else 1)
        non_negative(self, "action_overhead_us")
        handover_now(ctx, self.handover, self.stages)
        units = unit_costs(ctx, self.microbatches, self.stages, self.corun, recording_ns(self, ctx.graph))
        if n_stages > len(units.names):
            raise sch.ScheduleError(f"pipeline: {n_stages} stages but the model has only {len(units.names)} layers")
        if self.partition == "auto":
            comm = [ctx.device.p2p_handover_ns(b) for b in units.out_bytes]
            bounds = partition(units.fwd_ns + units.bwd_ns, comm, n_stages)
        else:
            bounds = parse_partition(self.partition, units.names, n_stages)
        sc = stage_costs(units, bounds, ctx.device, self.action_overhead_us * 1e3,
                         scale_grads=self.scale_grads and self.microbatches > 1)
        flush = sch.SCHEDULES[self.schedule]
        if flush:
            sch.validate(acts, n_stages, self.microbatches)
        pg = build_graph(sc, acts, ITERATIONS if flush else ITERATIONS_2BW, ctx.device, flush, self.microbatches,
                         waited_sends=self.schedule == "1f1b")
        res = simulate_pipeline(pg, ctx.device, ctx)
        ctx.graph = pg.graph
        self._report(ctx, units, sc, acts, res)

    def _report(self, ctx, units, sc, acts, result):
        from ._layers import meta

        m = ctx.metrics
        m["bubble_fraction"] = bubble_fraction(result)
        names = units.names
        parts = []
        for s, (a, b) in enumerate(zip(sc.bounds[:-1], sc.bounds[1:])):
            parts.append(f"{names[a]}..{names[b - 1]}" if b - a > 1 else names[a])
            m[f"stage{s}_forward_ms"] = sc.fwd_ns[s] / 1e6
            m[f"stage{s}_backward_ms"] = sc.bwd_ns[s] / 1e6
        m["partition"] = " | ".join(parts)
        versions = 1 if sch.SCHEDULES[self.schedule] else 2
        state = optimizer_state_factor(meta(ctx))
        where = sch.stage_rank(acts)
        for r in range(len(acts)):
            mine = [s for s, rr in where.items() if rr == r]
            params = sum(sc.param_bytes[s] for s in mine)
            act = sum(sch.in_flight(acts, s) * sc.stash_bytes[s] for s in mine)
            m[f"rank{r}_weights_bytes"] = params * versions
            m[f"rank{r}_activations_bytes"] = act
            m[f"rank{r}_memory_bytes"] = params * (versions + 1 + state) + act
        ctx.note(f"pipeline: {self.schedule}, {self.stages} ranks x {self.microbatches} micro-batches, "
                 f"stages {m['partition']}; per-micro-batch costs scaled to batch/{self.microbatches}")
        if not any(units.out_bytes):
            ctx.note("pipeline: no module output sizes in the trace: transfers and activation memory are 0")


OPTIMIZATION = Pipeline
