"""Simulation results: per-task times, iteration times, critical path, utilisation."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..graph.graph import DependencyGraph
from ..model import EventKind
from .core import Timeline, simulate_times

__all__ = ["SimResult", "IterationTimes", "simulate", "mean_iteration_ns"]


@dataclass(frozen=True)
class IterationTimes:
    """Measured and simulated iteration durations of one rank (ns)."""

    rank: int
    measured_ns: np.ndarray
    simulated_ns: np.ndarray


def mean_iteration_ns(times: np.ndarray) -> float:
    """Mean iteration time over iterations after the first (all if only one).

    >>> mean_iteration_ns(np.array([10, 4, 6]))
    5.0
    """
    times = np.asarray(times)
    if len(times) == 0:
        return float("nan")
    return float(times[1:].mean() if len(times) > 1 else times[0])


class SimResult:
    """What a simulation produced, with the graph it ran on.

    Attributes
    ----------
    graph : DependencyGraph
    start_ns, end_ns : numpy.ndarray
        Per task, relative to ``graph.origin_ns``.
    """

    def __init__(self, graph: DependencyGraph, timeline: Timeline):
        self.graph = graph
        self.timeline = timeline
        self.start_ns = timeline.start_ns
        self.end_ns = timeline.end_ns

    # ------------------------------------------------------------ iterations
    def boundaries_ns(self, rank: int) -> np.ndarray:
        return self.start_ns[np.asarray(self.graph.markers[rank], np.int64)]

    def iterations(self) -> list:
        """Per rank: measured and simulated iteration times."""
        return [IterationTimes(r, np.diff(self.graph.measured_boundaries_ns[r]),
                               np.diff(self.boundaries_ns(r))) for r in self.graph.ranks]

    def mean_iteration_ns(self) -> tuple[float, float]:
        """(measured, simulated) mean iteration time, averaged over ranks."""
        its = self.iterations()
        return (float(np.mean([mean_iteration_ns(i.measured_ns) for i in its])),
                float(np.mean([mean_iteration_ns(i.simulated_ns) for i in its])))

    @property
    def makespan_ns(self) -> int:
        return int(self.end_ns.max() - self.start_ns.min()) if len(self.end_ns) else 0

    # --------------------------------------------------------- critical path
    def critical_path(self, last: int | None = None) -> list[int]:
        """Task ids on the critical path ending at ``last`` (default: the last task to end).

        Walks back through whatever determined each time: a waited-for task
        for ends, the releasing predecessor (lane or edge) for starts.
        """
        tl = self.timeline
        if last is None:
            last = int(np.argmax(self.end_ns))
        path, t, at_end = [], last, True
        seen = set()
        while t >= 0 and (t, at_end) not in seen:
            seen.add((t, at_end))
            if not path or path[-1] != t:
                path.append(t)
            if at_end and tl.end_by[t] >= 0:
                t = int(tl.end_by[t])
                continue
            at_end = not bool(tl.start_by_start[t])
            t = int(tl.start_by[t])
        return path[::-1]

    # ----------------------------------------------------------- utilisation
    def lane_utilisation(self) -> np.ndarray:
        """Per lane: busy time / (last end - first start) of that lane."""
        g = self.graph
        util = np.zeros(len(g.lanes))
        kind = g.tasks["kind"]
        for li, seq in enumerate(g.lane_tasks):
            a = np.asarray([t for t in seq if kind[t] != EventKind.MARKER], np.int64)
            if len(a):
                span = self.end_ns[a].max() - self.start_ns[a].min()
                util[li] = (self.end_ns[a] - self.start_ns[a]).sum() / span if span > 0 else 0.0
        return util


def simulate(graph: DependencyGraph) -> SimResult:
    """Simulate a dependency graph.

    Examples
    --------
    >>> from daydream.graph.graph import DependencyGraph
    >>> from daydream.model import Lane, LaneKind
    >>> g = DependencyGraph()
    >>> cpu = g.add_lane(Lane(0, LaneKind.CPU_THREAD, 1, 1))
    >>> ids = g.add_tasks(lane=[cpu, cpu], dur_ns=[10, 5], gap_ns=[0, 3], name=[0, 0])
    >>> g.lane_tasks[cpu] = ids.tolist(); _ = g.names.intern("op")
    >>> r = simulate(g); r.start_ns.tolist(), r.end_ns.tolist()
    ([0, 13], [10, 18])
    """
    return SimResult(graph, simulate_times(graph))
