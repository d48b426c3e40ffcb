"""Deterministic discrete-event simulation of a :class:`DependencyGraph`.

A tiny event core in the style of SimPy: a heap keyed on (time, priority,
sequence number).  Lanes run one task at a time in their policy order.  A task
is dispatched when it heads its lane, its lane is free and all its start
edges are satisfied; it starts at ``max(lane predecessor end + gap, edge
anchors + lags)``.  At its start it resolves dynamic waits against the
simulated state (a stream synchronize waits for whatever task was last
enqueued on that stream by then) and joins its collective; it ends at
``start + dur`` or when what it waits for releases it, whichever is later.

Two implementations share these semantics: the compiled core
``daydream._simcore`` (C++, used when it was built) and the plain-Python
:func:`~daydream.sim.reference.simulate_reference`, the specification.
``DAYDREAM_SIM=reference`` forces the reference.
"""
from __future__ import annotations

import os
from itertools import chain

import numpy as np

from ..errors import SimulationError
from ..graph.graph import DependencyGraph
from ..model import LaneKind
from .reference import simulate_reference
from .timeline import Timeline

try:  # optional compiled core
    from .. import _simcore
except ImportError:  # pragma: no cover - depends on the build
    _simcore = None

__all__ = ["simulate_times", "simulate_fast", "Timeline", "fast_core_available", "flatten_lanes"]


def fast_core_available() -> bool:
    """Whether the compiled simulator core ``daydream._simcore`` is importable."""
    return _simcore is not None


def flatten_lanes(lane_tasks) -> tuple[np.ndarray, np.ndarray]:
    """``lane_tasks`` (sequences of task ids) as CSR: ``(indptr, flat)`` int64 arrays.

    >>> [a.tolist() for a in flatten_lanes([[2, 0], [], [1]])]
    [[0, 2, 2, 3], [2, 0, 1]]
    """
    lengths = np.fromiter((len(s) for s in lane_tasks), np.int64, count=len(lane_tasks))
    indptr = np.zeros(len(lane_tasks) + 1, np.int64)
    np.cumsum(lengths, out=indptr[1:])
    if lane_tasks and all(isinstance(s, np.ndarray) for s in lane_tasks):
        flat = np.concatenate([np.asarray(s, np.int64) for s in lane_tasks])
    else:
        flat = np.fromiter(chain.from_iterable(lane_tasks), np.int64, count=int(indptr[-1]))
    return indptr, flat


def simulate_fast(g: DependencyGraph) -> Timeline:
    """Simulate ``g`` with the compiled core (same results as the reference).

    Raises
    ------
    SimulationError
        If some tasks can never run.
    RuntimeError
        If the compiled core is not available.
    """
    if _simcore is None:
        raise RuntimeError("the compiled simulator core daydream._simcore is not built")
    T, E = g.tasks, g.edges
    n = g.n_tasks
    lane_ptr, lane_flat = flatten_lanes(g.lane_tasks)
    lane_is_gpu = np.fromiter((ln.kind == LaneKind.GPU_STREAM for ln in g.lanes), np.int8, count=len(g.lanes))
    lane_rank = np.fromiter((ln.rank for ln in g.lanes), np.int32, count=len(g.lanes))
    lane_prio = np.zeros(len(g.lanes), np.int8)
    for li, pol in g.lane_policy.items():
        if int(pol) == 1 and 0 <= li < len(g.lanes):   # LanePolicy.PRIORITY
            lane_prio[li] = 1
    tl = Timeline(n)
    finished, stuck = _simcore.simulate(
        T["lane"], T["dur_ns"], T["gap_ns"], T["wait_kind"], T["wait_lane"], T["wait_lag_ns"],
        T["group"], T["rank"], T["priority"].astype(np.int64), E["src"], E["dst"], E["kind"],
        E["anchor"], E["target"], E["lag_ns"], lane_ptr, lane_flat, lane_is_gpu, lane_rank, lane_prio,
        np.asarray(g.group_transfer_ns, np.int64), tl.start_ns, tl.end_ns, tl.start_by,
        tl.start_by_start, tl.end_by)
    if finished != n:
        names = ", ".join(f"#{t} {g.task_name(t)!r}" for t in stuck)
        raise SimulationError(f"{n - finished} tasks never ran (dependencies wait on each other), e.g. {names}")
    return tl


def simulate_times(g: DependencyGraph) -> Timeline:
    """Simulate ``g``; returns a :class:`Timeline` (times relative to ``g.origin_ns``).

    Uses the compiled core when available (unless ``DAYDREAM_SIM=reference``),
    else the reference; both give identical results.

    Raises
    ------
    SimulationError
        If some tasks can never run (their dependencies wait on each other).
    """
    if _simcore is None or os.environ.get("DAYDREAM_SIM") == "reference":
        return simulate_reference(g)
    return simulate_fast(g)
