"""Stalled ops: an op that ran several times longer than itself in every other iteration.

On a machine shared with other work, the operating system now and then takes
the CPU from the training thread for a scheduler slice or more (milliseconds)
in the middle of an op: one ``aten::addmm`` of the validation MLP took 33.6 ms
in one iteration against 0.37 ms in the other nineteen.  A what-if that
rescales the op would rescale the stall with it: N-fold for
``hfta:models=N``, which put one round's predictions 35-40 % high.  The stall
is the machine's, not the op's, so before the optimizations edit the graph,
:func:`settle_stalls` gives such a task the median duration of its peers (the
lower median, a time one of them took, so that settling twice changes
nothing) and moves the rest into the gap before its successor on the thread,
the time between ops that optimizations treat as the program's own (Python,
dispatch) and do not rescale.  An unedited replay is unchanged by it: the
successor starts where it did.

Only ops (not runtime calls) that wait for nothing during simulation and
release nothing but the next op on their thread are looked at.  Peers are the
tasks of the same rank, CPU thread, op name, layer, phase, input bytes and
FLOPs at the same occurrence in every iteration (the k-th such op of
iteration i and of iteration j); only the forward, backward and optimizer
phases are looked at (data loading has real periodic costs, such as an epoch's
first batch), and only groups of at least :data:`MIN_PEERS`.  A task stalled
when it took more than :data:`STALL_FACTOR` times its group's median and
:data:`STALL_MIN_NS` more than it.

Examples
--------
>>> from daydream.graph.graph import DependencyGraph
>>> from daydream.model import Lane, LaneKind
>>> g = DependencyGraph(); lane = g.add_lane(Lane(0, LaneKind.CPU_THREAD, 1, 1))
>>> ids = g.add_tasks(lane=[lane] * 4, dur_ns=[300_000, 310_000, 33_000_000, 290_000],
...                   name=[g.names.intern("aten::addmm")] * 4, iteration=range(4), phase=[0] * 4,
...                   event=range(4))
>>> g.lane_tasks[lane].extend(ids.tolist())
>>> report = settle_stalls(g)
>>> report.tasks, report.excess_ns, int(g.tasks["dur_ns"][2]), int(g.tasks["gap_ns"][3])
(1, 32700000, 300000, 32700000)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model import EventKind, LaneKind, Phase
from .graph import WaitKind

__all__ = ["StallReport", "settle_stalls", "STALL_FACTOR", "STALL_MIN_NS", "MIN_PEERS"]

#: A task is stalled above this multiple of its peers' median ...
STALL_FACTOR = 3.0
#: ... and this much above it (a scheduler slice is milliseconds; shorter
#: excesses are cache and frequency noise that the median of a few peers
#: cannot tell from the op's own variation).
STALL_MIN_NS = 500_000
#: Fewer peers than this give no median to trust.
MIN_PEERS = 3
_PHASES = (Phase.FORWARD, Phase.BACKWARD, Phase.OPTIMIZER)


@dataclass(frozen=True)
class StallReport:
    """What :func:`settle_stalls` changed.

    Attributes
    ----------
    tasks : int
        Tasks given their peers' median duration.
    excess_ns : int
        The time taken out, summed.
    worst : tuple
        ``(name, iteration, dur_ns, median_ns)`` of the longest stall, or ``()``.
    """

    tasks: int = 0
    excess_ns: int = 0
    worst: tuple = ()

    def note(self, iterations: int) -> str:
        """One line for a what-if's notes ('' when nothing stalled)."""
        if not self.tasks:
            return ""
        name, it, dur, med = self.worst
        per_it = self.excess_ns / max(iterations, 1) / 1e6
        return (f"{self.tasks} op(s) ran over {STALL_FACTOR:g}x their time in the other iterations "
                f"(the worst {name} in iteration {it}: {dur / 1e6:.2f} ms against {med / 1e6:.3f}), "
                f"taken as the machine's stalls: {per_it:.2f} ms an iteration kept as time between "
                f"ops, which the optimizations do not rescale")


def _group_ids(cols: list, then=None) -> tuple:
    """Dense id of each row of the columns ``cols`` (rows equal -> same id), and the sort order.

    Rows are sorted by the columns, the first most significant, and within a group by ``then``
    (``np.lexsort``: ten times faster than ``np.unique(axis=0)`` on a million rows); ids follow
    that order.
    """
    order = np.lexsort(([then] if then is not None else []) + cols[::-1])
    change = np.zeros(len(order), bool)
    for c in cols:
        sc = c[order]
        change[1:] |= sc[1:] != sc[:-1]
    ids = np.empty(len(order), np.int64)
    ids[order] = np.cumsum(change)
    return ids, order


def _candidates(g) -> np.ndarray:
    """Traced CPU ops of the compute phases whose end only releases the next op on their thread.

    Runtime calls (a launch blocks on a full queue: the GPU's pace, not a stall), tasks that
    wait during simulation and tasks with edges out are left out, so that moving time from a
    task's end to its successor's gap cannot move any start.
    """
    T = g.tasks
    cpu = np.array([ln.kind == LaneKind.CPU_THREAD for ln in g.lanes], dtype=bool)
    if not len(cpu):
        return np.zeros(0, np.int64)
    ok = (cpu[T["lane"]] & (T["iteration"] >= 0) & np.isin(T["phase"], _PHASES) & (T["event"] >= 0)
          & (T["kind"] == EventKind.CPU_OP) & (T["wait_kind"] == WaitKind.NONE))
    ok[g.edges["src"]] = False
    return np.flatnonzero(ok)


def _successors(g, tasks: np.ndarray) -> np.ndarray:
    """Each task's successor on its lane, -1 for a lane's last task."""
    out = np.full(len(tasks), -1, np.int64)
    lanes = g.tasks["lane"][tasks]
    for lane in np.unique(lanes).tolist():
        order = np.asarray(g.lane_tasks[lane], np.int64)
        pos = {int(t): i for i, t in enumerate(order)}
        for j in np.flatnonzero(lanes == lane):
            i = pos.get(int(tasks[j]), -1)
            if 0 <= i < len(order) - 1:
                out[j] = order[i + 1]
    return out


def settle_stalls(g, factor: float = STALL_FACTOR, min_excess_ns: int = STALL_MIN_NS) -> StallReport:
    """Give every stalled task of ``g`` its peers' median duration, the rest to the next gap (in place).

    A stalled task that is the last of its thread has no gap after it and is left as it is.

    Parameters
    ----------
    g : DependencyGraph
    factor, min_excess_ns
        A task stalled when ``dur > factor * median`` and ``dur - median > min_excess_ns``.

    Returns
    -------
    StallReport
    """
    sel = _candidates(g)
    if len(sel) < MIN_PEERS:
        return StallReport()
    T = g.tasks
    key = [T[c][sel] for c in ("rank", "lane", "name", "layer", "phase", "bytes", "flops")]
    per_iter, order = _group_ids([*key, T["iteration"][sel]], then=sel)   # tasks in order within (op, iteration)
    occ = np.empty(len(sel), np.int64)
    starts = np.r_[0, np.flatnonzero(np.diff(per_iter[order])) + 1]
    occ[order] = np.arange(len(sel)) - np.repeat(starts, np.diff(np.r_[starts, len(sel)]))
    peers, _ = _group_ids([*key, occ])
    dur = T["dur_ns"][sel]
    size = np.bincount(peers)
    by = np.lexsort((dur, peers))
    first = np.r_[0, np.cumsum(size)[:-1]]
    median = dur[by][first + (size - 1) // 2][peers]    # the lower median: one of the peers' times
    stalled = (size[peers] >= MIN_PEERS) & (dur > factor * median) & (dur - median > min_excess_ns)
    succ = np.full(len(sel), -1, np.int64)
    succ[stalled] = _successors(g, sel[stalled])
    stalled &= succ >= 0
    if not stalled.any():
        return StallReport()
    tasks, after = sel[stalled], succ[stalled]
    new = median[stalled]
    excess = dur[stalled] - new
    w = int(np.argmax(excess))
    worst = (g.names[int(T["name"][tasks[w]])], int(T["iteration"][tasks[w]]), int(dur[stalled][w]), int(new[w]))
    T["dur_ns"][tasks] = new
    np.add.at(T["gap_ns"], after, excess)
    return StallReport(int(len(tasks)), int(excess.sum()), worst)
