"""Processes of one job on one CPU host's cores: how fast their compute runs beside each other.

Data-parallel workers and pipeline stages on a CPU host share its last-level
cache and memory bandwidth.  :func:`corun_rate` gives the speed of the
traced work with a second process busy on another core, relative to alone,
from one of two measurements (``source``):

* ``"trace"``: one traced iteration's compute ops (at the batch the ranks
  will run) re-run beside a twin replaying them on another core
  (:func:`daydream.opcorun.sequence_corun`), once per process and sequence,
  so that predictions from one trace agree; where that cannot be measured
  (no shapes, one core, no torch), the profile's figure;
* ``"profile"``: the device profile's ``corun`` (a 1-thread matmul beside a
  matmul, measured by ``daydream calibrate``);
* ``"off"``: 1.

:func:`corun_rates` gives one rate per training phase instead, for a schedule whose tasks
are phases of the step (``hydra``'s forward, backward and optimizer shards; the pipelines'
forward and backward actions, at the micro-batch): ``"trace"``
there re-runs every compute- and memory-bound op of the traced iteration, each phase's
calls timed within the same passes (:func:`daydream.opcorun.sequence_corun` with
``labels``); ``"compute"`` takes :func:`corun_rate`'s one rate of the compute ops for every
phase.  On this project's Zen 4 host (2026-12-05, ``python benchmarks/corun_kinds.py``, two
rounds) whole training steps of the validation MLP beside a twin doing the same ran forward /
backward / optimizer at 1.00 / 0.92-0.98 / 0.78-1.00 of their speed alone, the iteration's
re-run ops per phase at 1.00 / 0.96-0.99 / 0.87-0.93, and its matmuls alone (what
``"trace"`` measures for :func:`corun_rate`) at 1.00 (docs/validation-log.md, "Session 68").
Those rounds timed the 'alone' side right after the idle gap between rounds, which slows the
first ops of a pass; each side now follows an untimed pass (:func:`daydream.opcorun.corun_ratios`'
``warm``), and the re-run per phase read forward / backward / optimizer 0.91-0.96 / 0.90-0.95 /
0.74-0.92 in six sittings (session 73), where a peer process really computing beside the Hydra
runtime's shard-parallel tasks cost them 0.945 / 0.921 / 0.935 (session 72).

On this VM the matmul probe read 0.99 while the pipeline validation's
micro-batch sequence ran at 0.93-0.96 beside its twin (0.81-0.93 in a noisier
hour), the size of the 2-process rows' under-prediction.  The VM also has
spells of a second or more in which two busy cores run at 0.55-0.7x each;
a measurement made back to back fell mostly in one about one time in five,
so both measurements spread their rounds over seconds
(:func:`daydream.opcorun.corun_rounds`).

How the rate applies: :func:`corun_stretch` slows a task to the rate only for
the part of its run during which another process of the host is busy, and
simulates the schedule to a fixed point (``hydra``, whose model-parallel
schedule keeps one core busy at a time and its shard-parallel one both).
``pipeline``, ``tessel``, ``tensor-parallel`` and ``data-parallel`` divide
a rank's work by its phase's rate (the parallels with :func:`slow_thread_work`,
the pipelines their forward and backward in their unit costs): their ranks
are busy together most of the time, and Tessel's search simulates thousands
of candidates.
"""
from __future__ import annotations

import numpy as np

from daydream.model import EventKind, LaneKind, Phase
from daydream.primitives import scale
from daydream.sim import simulate

from ._common import forget_cycle_now
from ._handover_now import forget_handover_now

__all__ = ["corun_rate", "corun_rates", "rate_of", "rates_text", "phase_sequence", "corun_stretch", "slow_thread_work",
           "forget_measured", "SOURCES", "PHASE_SOURCES", "CORUN_ROUNDS"]

#: Simulations of :func:`corun_stretch` (each stretches the tasks by the last one's schedule).
CORUN_ROUNDS = 6

#: Where :func:`corun_rate` takes the rate from.
SOURCES = ("trace", "profile", "off")
#: Where :func:`corun_rates` takes its rates from.
PHASE_SOURCES = ("trace", "compute", "profile", "off")
_MEASURED: dict = {}


def corun_rate(ctx, batch_factor: float = 1.0, source: str = "trace") -> float:
    """Speed of the traced work beside a second busy process on another core, relative to alone (<= 1).

    ``batch_factor``: the ranks run the traced ops at this multiple of the
    traced batch (a pipeline's micro-batch: ``1 / M``).  1.0 off CPU.
    """
    dev = ctx.device
    if dev.kind != "cpu" or source == "off":
        return 1.0
    if source == "trace":
        measured = _measured(ctx, batch_factor)
        if measured is not None:
            return measured
    return float(dev.corun)


def _measured(ctx, batch_factor: float):
    from daydream.heapmode import steady_heap
    from daydream.opcorun import sequence_corun

    from .batch_size import sequence_at

    key = (tuple(sequence_at(ctx, batch_factor)), ctx.device.threads or None)
    if not key[0]:
        return None
    if key not in _MEASURED:
        try:
            with steady_heap():
                _MEASURED[key] = sequence_corun(list(key[0]), key[1])
        except ImportError:          # no torch here
            _MEASURED[key] = None
    return _MEASURED[key]


def corun_rates(ctx, source: str = "trace", batch_factor: float = 1.0) -> dict:
    """Per training phase, the speed of the traced work beside a second busy process on another
    core, relative to alone: ``{Phase: rate}`` and ``{None: rate}`` for the rest (each <= 1).

    ``source``: ``"trace"``, the iteration's compute- and memory-bound ops re-run beside a twin,
    timed per phase (:func:`daydream.opcorun.sequence_corun`), where that can be measured;
    ``"compute"``, :func:`corun_rate`'s one rate of its compute ops for every phase; else
    :func:`corun_rate` of ``source``.  ``batch_factor``: as :func:`corun_rate`'s.
    """
    if ctx.device.kind == "cpu" and source == "trace":
        measured = _measured_phases(ctx, batch_factor)
        if measured:
            return measured
    return {None: corun_rate(ctx, batch_factor, "trace" if source == "compute" else source)}


def rate_of(rates: dict, phase) -> float:
    """``phase``'s rate in ``{Phase: rate}`` (:func:`corun_rates`), else the rest's.  ``phase`` may be
    a task's ``phase`` value: :class:`~daydream.model.Phase` is an IntEnum, so the value finds its key.

    >>> rate_of({Phase.BACKWARD: 0.9, None: 0.95}, Phase.BACKWARD), rate_of({None: 0.95}, Phase.FORWARD)
    (0.9, 0.95)
    """
    return rates.get(phase, rates.get(None, 1.0))


def rates_text(rates: dict) -> str:
    """``{Phase: rate}`` (:func:`corun_rates`) in words.

    >>> rates_text({None: 0.95})
    '0.95x'
    >>> rates_text({Phase.FORWARD: 0.97, Phase.OPTIMIZER: 0.9, None: 0.95})
    'forward 0.97x / optimizer 0.90x / the rest 0.95x'
    """
    if list(rates) == [None]:
        return f"{rates[None]:.2f}x"
    return " / ".join(f"{'the rest' if p is None else p.label} {r:.2f}x" for p, r in rates.items())


def phase_sequence(ctx, batch_factor: float = 1.0) -> tuple:
    """``(signatures, phases)``: one traced iteration's compute- and memory-bound CPU ops (those
    with FLOPs or bytes), one per call a re-run makes, in traced order, at ``batch_factor`` x the
    traced batch where the trace names its batch, and each one's
    :class:`~daydream.model.Phase` value: what :func:`corun_rates` re-runs."""
    from ._layers import op_figures, work_mask
    from ._sequence import iteration_calls
    from .batch_size import scaled_sequence

    g = ctx.graph
    flops, nbytes = op_figures(ctx)[:2]
    kept, sig_of = iteration_calls(ctx, np.flatnonzero(work_mask(g) & (g.tasks["kind"] == EventKind.CPU_OP)
                                                      & ((flops > 0) | (nbytes > 0))))
    return scaled_sequence(ctx, [sig_of[t] for t in kept], batch_factor), [int(g.tasks["phase"][t]) for t in kept]


def _measured_phases(ctx, batch_factor: float):
    from daydream.heapmode import steady_heap
    from daydream.opcorun import sequence_corun

    seq, phases = phase_sequence(ctx, batch_factor)
    if not seq:
        return None
    key = (tuple(seq), tuple(phases), ctx.device.threads or None)
    if key not in _MEASURED:
        try:
            with steady_heap():
                got = sequence_corun(seq, key[2], labels=phases)
        except ImportError:          # no torch here
            got = None
        _MEASURED[key] = got and {(None if p is None else Phase(p)): r for p, r in got.items()}
    return _MEASURED[key]


def forget_measured() -> None:
    """Forget the rates ``source="trace"`` measured in this process, the cycle curves
    (:func:`optimizations._common.cycle_now`) and the hand-over sitting of ``handover=now``
    (:func:`optimizations._handover_now.forget_handover_now`): the next prediction measures them
    again, in the machine's state of then.

    The rate follows where the host has placed the two cores at the moment: on this
    project's 2-vCPU VM the pipeline validation's micro-batch sequence read 0.61-0.67 beside
    its twin with a cache-line round trip of 65-73 ns between the cores (two hyper-threads
    of one core, presumably), 0.88-0.97 at 77-97 ns and 0.98-1.00 at 386-434 ns, the host
    moving between them every few seconds (docs/validation-log.md, "Session 38").
    """
    _MEASURED.clear()
    forget_cycle_now()
    forget_handover_now()


def slow_thread_work(ctx, rate, who: str, source: str) -> None:
    """The traced thread work of ``ctx.graph`` (CPU ops and the Python gaps between them, in the
    iterations) at ``rate`` of its speed: ``who`` processes on one host busy at once; noted on ``ctx``.

    ``rate``: one for all, or ``{Phase: rate}`` (:func:`corun_rates`), each task at its phase's."""
    rates = rate if isinstance(rate, dict) else {None: rate}
    if all(r >= 1.0 for r in rates.values()):
        return
    g = ctx.graph
    T = g.tasks
    cpu = np.isin(T["lane"], [i for i, ln in enumerate(g.lanes) if ln.kind == LaneKind.CPU_THREAD])
    work = np.flatnonzero(cpu & (T["iteration"] >= 0))
    per = np.array([rate_of(rates, p) for p in T["phase"][work].tolist()], float)
    scale(g, work, 1.0 / per)
    T["gap_ns"][work] = np.round(T["gap_ns"][work] / per).astype(np.int64)
    ctx.note(f"{who} on one host: their work runs at {rates_text(rates)} the speed of one alone "
             f"(corun={source}; `corun=off` leaves it out)")


def _union(start, end) -> tuple:
    """Disjoint, sorted intervals covering ``[start, end)`` (empty ones dropped)."""
    keep = end > start
    start, end = start[keep], end[keep]
    order = np.argsort(start, kind="stable")
    s_out, e_out = [], []
    for a, b in zip(start[order].tolist(), end[order].tolist()):
        if s_out and a <= e_out[-1]:
            e_out[-1] = max(e_out[-1], b)
        else:
            s_out.append(a)
            e_out.append(b)
    return np.asarray(s_out, np.int64), np.asarray(e_out, np.int64)


def corun_stretch(g, lanes, rate, rounds: int = CORUN_ROUNDS):
    """Simulate ``g`` with the work on ``lanes`` (processes on one host's cores) slowed to
    ``rate`` while another of them is busy; returns the last :class:`SimResult`.

    ``rate``: one for every task, or ``{Phase: rate}`` with ``{None: rate}`` for the other
    phases (:func:`corun_rates`), each task at its phase's.  Each task's work (its duration
    in ``g``) runs at full speed while the
    other lanes are idle and at its rate while one of them is busy, from the
    task's start on (:func:`_stretched_ns`); who is busy when depends on the
    stretched schedule, so the graph is simulated ``rounds`` times, each
    round's durations from the last round's schedule.  Durations in ``g``
    are changed in place.  Two processes busy all the time run at ``rate``;
    one whose peer waits runs at full speed.
    """
    res = simulate(g)
    rates = rate if isinstance(rate, dict) else {None: rate}
    if all(r >= 1.0 for r in rates.values()) or len(lanes) < 2:
        return res
    mine = {ln: np.asarray(g.lane_tasks[ln], np.int64) for ln in lanes}
    work = {ln: g.tasks["dur_ns"][mine[ln]].astype(float) for ln in lanes}
    lane_rates = {ln: [rate_of(rates, p) for p in g.tasks["phase"][mine[ln]].tolist()] for ln in lanes}
    for _ in range(rounds):
        busy = {ln: _union(res.start_ns[mine[ln]], res.end_ns[mine[ln]]) for ln in lanes}
        for ln in lanes:
            starts, ends = _union(np.concatenate([busy[o][0] for o in lanes if o != ln]),
                                  np.concatenate([busy[o][1] for o in lanes if o != ln]))
            g.tasks["dur_ns"][mine[ln]] = [round(_stretched_ns(float(t0), w, starts, ends, r))
                                           for t0, w, r in zip(res.start_ns[mine[ln]].tolist(), work[ln].tolist(),
                                                               lane_rates[ln])]
        res = simulate(g)
    return res


def _stretched_ns(t0: float, work: float, starts, ends, rate: float) -> float:
    """How long ``work`` ns of work started at ``t0`` takes when it runs at ``rate`` inside the
    disjoint sorted intervals ``[starts, ends)`` and at full speed outside them."""
    t, left = t0, work
    i = int(np.searchsorted(ends, t, side="right"))
    while left > 0:
        if i < len(starts) and starts[i] <= t:                 # inside a busy interval
            room = (ends[i] - t) * rate
            if room >= left:
                return t + left / rate - t0
            t, left, i = float(ends[i]), left - room, i + 1
        else:
            gap = (starts[i] if i < len(starts) else float("inf")) - t
            if gap >= left:
                return t + left - t0
            t, left = float(starts[i]), left - gap
    return t - t0
