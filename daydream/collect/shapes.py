"""Op input shapes recorded once, in a warm-up iteration, and copied to the recorded ops.

Recording shapes (``record_shapes``) costs Kineto about as much again per op
as recording the op at all: on the bundled workloads it made recorded
iterations 4-5 points slower (``benchmarks/trace_overhead_runs.py
--variant=--shapes-every-iteration``).  A training step runs the same ops on
the same shapes every iteration, so the tracer records shapes in one
iteration only -- warm-up iteration ``warmup - 2``, in a profiler session of
its own, which ends a whole iteration before the recording session starts
(see ``Tracer._start_shape_session``) -- and the recorded iterations without
them.  When the trace is written, each recorded op takes the shape arguments
of the op at the same place in the shape iteration (per thread, matched by
op name in order; ops without a counterpart get none).

An iteration whose model inputs had other shapes than the shape iteration's
(variable sequence lengths, a last partial batch; seen by the layer markers
at the root modules' calls) takes no shapes: copying would be wrong there.
``daydream trace --shapes-every-iteration`` records them in every iteration,
as does a trace with fewer than 2 warm-up iterations.
"""
from __future__ import annotations

import bisect
import difflib
import enum
from collections import defaultdict
from dataclasses import dataclass

from .flow import FLOW_ARGS

__all__ = ["SHAPE_ARGS", "ShapeSource", "ShapeCopy", "copy_shapes", "iteration_windows"]

#: the arguments ``record_shapes`` adds to a CPU op
SHAPE_ARGS = ("Input Dims", "Input type", "Input Strides", "Concrete Inputs")
_STEP_PREFIX = "ProfilerStep#"


class ShapeSource(enum.Enum):
    """Where a trace's op shapes come from."""

    WARMUP = "warm-up iteration"      # one warm-up iteration, copied (this module)
    EVERY = "every iteration"         # recorded with the ops themselves
    NONE = "none"                     # not recorded


@dataclass(frozen=True)
class ShapeCopy:
    """What :func:`copy_shapes` did (the trace metadata's ``shapes`` object)."""

    source: ShapeSource
    iteration: int | None = None               # the shape iteration (WARMUP)
    ops_with_shapes: int = 0
    ops_without_shapes: int = 0
    iterations_without: tuple[int, ...] = ()   # inputs' shapes differed from the shape iteration's

    def as_metadata(self) -> dict:
        """``{"source": "warm-up iteration N", "ops_with_shapes": ...}``, or just the source."""
        if self.source is not ShapeSource.WARMUP:
            return {"source": self.source.value}
        return {"source": f"{self.source.value} {self.iteration}", "ops_with_shapes": self.ops_with_shapes,
                "ops_without_shapes": self.ops_without_shapes,
                "iterations_without": list(self.iterations_without)}


def _is_op(e: dict) -> bool:
    return e.get("ph") == "X" and e.get("cat") == "cpu_op" and not str(e.get("name", "")).startswith("daydream")


def _by_thread(events) -> dict:
    """CPU ops per (pid, tid), in start order."""
    out = defaultdict(list)
    for e in events:
        if _is_op(e):
            out[(e.get("pid"), e.get("tid"))].append(e)
    for ops in out.values():
        ops.sort(key=lambda e: float(e.get("ts", 0)))
    return out


def iteration_windows(events) -> dict[int, tuple[float, float]]:
    """``{N: (start_us, end_us)}`` of the ``ProfilerStep#N`` ranges in ``events``.

    >>> iteration_windows([{"ph": "X", "name": "ProfilerStep#3", "ts": 10.0, "dur": 5.0}])
    {3: (10.0, 15.0)}
    """
    out = {}
    for e in events:
        name = e.get("name")
        if e.get("ph") == "X" and isinstance(name, str) and name.startswith(_STEP_PREFIX):
            try:
                step = int(name[len(_STEP_PREFIX):])
            except ValueError:
                continue
            ts = float(e.get("ts", 0))
            out[step] = (ts, ts + float(e.get("dur", 0)))
    return out


def _pairs(src: list, dst: list):
    """(source op, recorded op) pairs: the same names in the same order."""
    a = [e.get("name") for e in src]
    b = [e.get("name") for e in dst]
    if a == b:
        return zip(src, dst)
    blocks = difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks()
    return ((src[m.a + k], dst[m.b + k]) for m in blocks for k in range(m.size))


def copy_shapes(events: list, shape_events: list, shape_iteration: int,
                skip_iterations=()) -> ShapeCopy:
    """Give the recorded ops in ``events`` the shape arguments of ``shape_events``' ops.

    Parameters
    ----------
    events : list of dict
        The recorded trace's Chrome events (changed in place), with
        ``ProfilerStep#N`` ranges delimiting the iterations.
    shape_events : list of dict
        The Chrome events of one iteration recorded with shapes.
    shape_iteration : int
        The iteration ``shape_events`` recorded, for the metadata.
    skip_iterations : iterable of int
        Iterations that must not take shapes (their inputs differed).

    Returns
    -------
    ShapeCopy

    Examples
    --------
    >>> op = lambda name, ts, **args: {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": 1,
    ...                                "pid": 1, "tid": 1, "args": args}
    >>> shapes = [op("aten::mm", 0, **{"Input Dims": [[2, 3], [3, 4]]}), op("aten::relu", 2, **{"Input Dims": [[2, 4]]})]
    >>> trace = [{"ph": "X", "name": "ProfilerStep#5", "ts": 100, "dur": 10, "pid": 1, "tid": 1},
    ...          op("aten::mm", 101), op("aten::add", 103), op("aten::relu", 105)]
    >>> copy_shapes(trace, shapes, 4).as_metadata()
    {'source': 'warm-up iteration 4', 'ops_with_shapes': 2, 'ops_without_shapes': 1, 'iterations_without': []}
    >>> trace[3]["args"]
    {'Input Dims': [[2, 4]]}
    """
    skip = set(skip_iterations)
    src = _by_thread(shape_events)
    windows = sorted(iteration_windows(events).items(), key=lambda kv: kv[1])
    per_iter = defaultdict(lambda: defaultdict(list))
    starts = [w[0] for _, w in windows]
    for key, ops in _by_thread(events).items():
        for e in ops:
            i = bisect.bisect_right(starts, float(e.get("ts", 0))) - 1
            if i >= 0 and float(e.get("ts", 0)) <= windows[i][1][1]:
                per_iter[windows[i][0]][key].append(e)
    with_, without = 0, 0
    for step, threads in per_iter.items():
        for key, ops in threads.items():
            done = 0
            if step not in skip:
                for s, d in _pairs(src.get(key, []), ops):
                    args = s.get("args") or {}
                    d.setdefault("args", {}).update((k, args[k]) for k in SHAPE_ARGS + FLOW_ARGS if k in args)
                    done += 1
            with_ += done
            without += len(ops) - done
    return ShapeCopy(ShapeSource.WARMUP, shape_iteration, with_, without, tuple(sorted(skip & set(per_iter))))
