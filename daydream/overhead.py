"""What recording cost a traced process, from the trace's own metadata.

The tracer times every recorded iteration and the warm-up iterations that ran
before any profiler session (:mod:`daydream.collect.tracer`); this compares
them.  No heavy imports: the traced process itself uses it for the message it
prints when the trace is written.
"""
from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass

__all__ = ["TracingOverhead", "tracing_overhead", "describe", "UNTRACED_LEFT_OUT", "recording_us_per_op",
           "recording_us_here"]

#: untraced warm-up iterations left out of the tracing-overhead reference (allocator and
#: caches warming up: the first steps of a run are its slowest)
UNTRACED_LEFT_OUT = 2


@dataclass(frozen=True)
class TracingOverhead:
    """What recording cost one process: its recorded iterations against its untraced ones.

    From the ``"daydream"`` metadata of a trace taken by ``daydream trace``: wall
    time and minor page faults of every recorded iteration, and of the warm-up
    iterations that ran before any profiler session started.
    """

    recorded_ms: float        # median wall time of a recorded iteration
    untraced_ms: float        # ... of an untraced warm-up iteration (the first ones left out)
    untraced_iterations: int  # how many untraced iterations the reference has
    recorded_faults: float    # median minor page faults of a recorded iteration
    untraced_faults: float    # ... of an untraced one

    @property
    def pct(self) -> float:
        """Recorded over untraced, in percent (positive: recording slowed the iterations).

        >>> round(TracingOverhead(10.5, 10.0, 5, 0, 0).pct, 6)
        5.0
        """
        return 100.0 * (self.recorded_ms / self.untraced_ms - 1.0)


def tracing_overhead(meta: dict, min_untraced: int = 3) -> TracingOverhead | None:
    """The overhead a daydream trace measured on itself, or None where it cannot say.

    None for traces not taken by ``daydream trace`` (or by an older version),
    and where fewer than ``min_untraced`` untraced iterations remain after the
    first :data:`UNTRACED_LEFT_OUT` (``daydream trace --warmup 6`` or more).

    Examples
    --------
    >>> its = {"wall_ns": [11e6, 12e6, 11e6], "minor_faults": [5, 9, 7],
    ...        "untraced_steps": [0, 1, 2, 3, 4], "untraced_wall_ns": [30e6, 12e6, 10e6, 10e6, 11e6],
    ...        "untraced_minor_faults": [900, 40, 2, 0, 1]}
    >>> o = tracing_overhead({"daydream": {"iterations": its}})
    >>> o.recorded_ms, o.untraced_ms, o.untraced_iterations, o.recorded_faults, o.untraced_faults
    (11.0, 10.0, 3, 7.0, 1.0)
    >>> tracing_overhead({}) is None, tracing_overhead({"daydream": {"iterations": "?"}}) is None
    (True, True)
    """
    d = meta.get("daydream")
    its = d.get("iterations") if isinstance(d, dict) else None
    if not isinstance(its, dict):
        return None
    steps, walls, faults = (its.get(k) or [] for k in ("untraced_steps", "untraced_wall_ns",
                                                         "untraced_minor_faults"))
    try:
        keep = [i for i, step in enumerate(steps) if step >= UNTRACED_LEFT_OUT]
        if len(keep) < min_untraced or not its.get("wall_ns") or not len(walls) == len(faults) == len(steps):
            return None
        med = statistics.median
        return TracingOverhead(med(its["wall_ns"]) / 1e6, med([walls[i] for i in keep]) / 1e6, len(keep),
                               float(med(its.get("minor_faults") or [0])), float(med([faults[i] for i in keep])))
    except (TypeError, ValueError):     # not numbers: a file edited by hand, or by another tool
        return None


def describe(o: TracingOverhead) -> str:
    """One line for the user.

    >>> describe(TracingOverhead(10.5, 10.0, 5, 300, 20))
    'recording cost +5.0% an iteration (10.500 ms against 10.000 ms for 5 untraced warm-up iterations, medians; minor page faults 300 against 20)'
    """
    return (f"recording cost {o.pct:+.1f}% an iteration ({o.recorded_ms:.3f} ms against {o.untraced_ms:.3f} ms "
            f"for {o.untraced_iterations} untraced warm-up iterations, medians; minor page faults "
            f"{o.recorded_faults:.0f} against {o.untraced_faults:.0f})")


def recording_us_per_op(rounds: int = 15, steps: int = 10, blocks: int = 16) -> float:
    """What tracing adds to one recorded CPU op on this machine, in us, as ``daydream trace``
    records (CPU activity, shapes left to a session of their own, daydream's layer markers on).

    A chain of ``blocks`` small layers (``Linear`` then ``ReLU``) takes ``steps`` training steps
    (forward, backward: nested ops, the autograd engine's ranges, gradients accumulated), one
    thread, timed without and then inside a profiler session with the markers on, ``rounds``
    times; the median of the paired differences (a shared machine's drift falls on both sides of
    a pair), never below 0, over the CPU ops one step records (the markers' own ranges are not
    ops: their cost falls on the ops of their layers).  A what-if that repeats a traced op more
    often than the trace ran it (``pipeline`` and ``tessel``: once per micro-batch) would repeat
    this cost too; the real run pays none of it.  Imports torch: not for the traced process.

    Until session 61 the loop was one tiny ``torch.add`` with shapes recorded: 0.5-2.0 us on the
    project's 2-vCPU VMs, against 2-3 us an op in training, where the validation MLP's traced
    iteration ran 4 % over the same run untraced in turns and the prediction took out a fifth
    of it (docs/validation-log.md, "Session 61").
    """
    import time

    import torch
    from torch import nn
    from torch.profiler import ProfilerActivity, profile

    from .collect.hooks import FWD_PREFIX, BWD_PREFIX, LayerMarkers

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(16, 16), nn.ReLU()) for _ in range(blocks)])
    x = torch.randn(8, 16)

    def per_step_ns() -> float:
        t = time.perf_counter_ns()
        for _ in range(steps):
            model.zero_grad(set_to_none=True)
            model(x).sum().backward()
        return (time.perf_counter_ns() - t) / steps

    markers = LayerMarkers()
    try:
        per_step_ns()                                   # warm-up
        diffs, ops = [], 0.0
        for _ in range(rounds):
            plain = per_step_ns()
            markers.install()
            markers.enabled = True
            with profile(activities=[ProfilerActivity.CPU], record_shapes=False) as prof:
                diffs.append(per_step_ns() - plain)
            markers.remove()
            ops = ops or sum(not e.name.startswith((FWD_PREFIX, BWD_PREFIX)) for e in prof.events()) / steps
    finally:
        markers.remove()
        torch.set_num_threads(threads)
    return max(statistics.median(diffs), 0.0) / max(ops, 1.0) / 1e3


@functools.lru_cache(maxsize=None)
def recording_us_here() -> float:
    """:func:`recording_us_per_op` measured once per process (what ``recording_us=auto`` takes)."""
    return recording_us_per_op()
