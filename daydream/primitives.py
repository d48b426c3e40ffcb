"""Graph-transformation primitives: select, scale, insert, remove, schedule.

Every optimization is written with these and cost models only.  They are
small free functions over a :class:`~daydream.graph.DependencyGraph` (edited
in place; call ``graph.copy()`` first to keep the original).

Examples
--------
>>> from daydream.graph.graph import DependencyGraph
>>> from daydream.model import Lane, LaneKind, Phase
>>> from daydream.sim import simulate
>>> g = DependencyGraph()
>>> cpu = g.add_lane(Lane(0, LaneKind.CPU_THREAD, 1, 1))
>>> ids = g.add_tasks(lane=[cpu] * 3, dur_ns=[10, 20, 30], name=[g.names.intern("op")] * 3,
...                   phase=[Phase.FORWARD, Phase.BACKWARD, Phase.OPTIMIZER])
>>> g.lane_tasks[cpu] = ids.tolist()
>>> opt = select(g, phase="optimizer"); opt.tolist()
[2]
>>> scale(g, opt, 0.5); int(simulate(g).end_ns.max())
45
>>> remove(g, select(g, phase="backward")); int(simulate(g).end_ns.max())
25
>>> t = insert(g, cpu, dur_ns=5, name="cast", after=0); int(simulate(g).end_ns.max())
30
"""
from __future__ import annotations

import enum
import re
from collections import deque

import numpy as np

from .errors import CycleError, GraphError
from .graph.graph import TASK_COLUMNS, Anchor, DependencyGraph, EdgeKind
from .model import EventKind, LaneKind, Phase

__all__ = ["select", "scale", "set_duration", "insert", "remove", "add_dependency",
           "LanePolicy", "set_policy", "set_priority", "check_acyclic", "task_ids", "MAX_DURATION_NS"]


def _as_enum_values(value, enum_cls):
    if value is None:
        return None
    items = value if isinstance(value, (list, tuple, set, frozenset)) else [value]
    out = []
    for v in items:
        if isinstance(v, str):
            try:
                v = enum_cls[v.upper().replace("-", "_")]
            except KeyError:
                valid = ", ".join(e.name.lower() for e in enum_cls)
                raise GraphError(f"unknown {enum_cls.__name__} {v!r} (valid: {valid})") from None
        out.append(int(v))
    return out


def _name_mask(table, pattern, ids):
    if pattern is None:
        return np.ones(len(ids), bool)
    rx = re.compile(pattern)
    ok = np.array([rx.search(s) is not None for s in table.strings] + [False], bool)
    return ok[np.where(ids >= 0, ids, len(table.strings))]


def select(g: DependencyGraph, *, layer=None, phase=None, kind=None, name=None, lane=None,
           rank=None, iteration=None) -> np.ndarray:
    """Task ids matching every given criterion (in id order).

    Parameters
    ----------
    layer, name : str, optional
        Regular expressions searched in the task's layer / name.
    phase : Phase, str or list of them, optional
    kind : EventKind, str or list of them, optional
    lane : int, LaneKind, str or list of them, optional
        Lane ids, or lane kinds (``"gpu_stream"``, ``"cpu_thread"``).
    rank, iteration : int or list of int, optional
    """
    T = g.tasks
    m = np.ones(g.n_tasks, bool)
    if phase is not None:
        m &= np.isin(T["phase"], _as_enum_values(phase, Phase))
    if kind is not None:
        m &= np.isin(T["kind"], _as_enum_values(kind, EventKind))
    if lane is not None:
        items = lane if isinstance(lane, (list, tuple, set)) else [lane]
        if all(isinstance(x, (str, LaneKind)) for x in items):
            kinds = _as_enum_values(items, LaneKind)
            lane_ok = np.array([ln.kind in kinds for ln in g.lanes], bool)
            m &= lane_ok[T["lane"]]
        else:
            m &= np.isin(T["lane"], items)
    if rank is not None:
        m &= np.isin(T["rank"], np.atleast_1d(rank))
    if iteration is not None:
        m &= np.isin(T["iteration"], np.atleast_1d(iteration))
    m &= _name_mask(g.names, name, T["name"])
    if layer is not None:
        m &= _name_mask(g.layers, layer, T["layer"])
    return np.flatnonzero(m)


#: Longest task duration an edit may produce (about 104 days): sums of many
#: such durations still fit the simulator's int64 nanoseconds.
MAX_DURATION_NS = 2**53


def task_ids(g: DependencyGraph, tasks) -> np.ndarray:
    """``tasks`` as an int64 array of valid task ids.

    Raises
    ------
    GraphError
        Naming the first id that is not a task of ``g`` (negative ids are not
        counted from the end).
    """
    arr = np.atleast_1d(np.asarray(tasks))
    if arr.size == 0:
        return np.zeros(0, np.int64)
    if arr.dtype.kind not in "iu":
        raise GraphError(f"task ids must be integers, got {arr.dtype} values")
    ids = arr.astype(np.int64).reshape(-1)
    bad = (ids < 0) | (ids >= g.n_tasks)
    if bad.any():
        raise GraphError(f"no task #{int(ids[bad][0])} (the graph has {g.n_tasks} tasks)")
    return ids


def _checked_durations(d) -> np.ndarray:
    d = np.asarray(d, float)
    if not np.isfinite(d).all() or (d < 0).any() or (d > MAX_DURATION_NS).any():
        raise GraphError(f"durations must be finite, non-negative and at most {MAX_DURATION_NS} ns")
    return np.rint(d).astype(np.int64)


def scale(g: DependencyGraph, tasks, factor) -> None:
    """Multiply the durations of ``tasks`` by ``factor`` (scalar or per task)."""
    tasks = task_ids(g, tasks)
    f = np.asarray(factor, float)
    if not np.isfinite(f).all() or (f < 0).any():
        raise GraphError("scale factors must be finite and non-negative")
    g.tasks["dur_ns"][tasks] = _checked_durations(g.tasks["dur_ns"][tasks] * f)


def set_duration(g: DependencyGraph, tasks, dur_ns) -> None:
    """Set the durations of ``tasks`` (scalar or per task, ns)."""
    tasks = task_ids(g, tasks)
    g.tasks["dur_ns"][tasks] = _checked_durations(dur_ns)


# ------------------------------------------------------------------ insert
def _reaches(g: DependencyGraph, src: int, dst: int) -> bool:
    """Whether ``dst`` is reachable from ``src`` over edges and lane order."""
    succ = {}
    for s, d in zip(g.edges["src"].tolist(), g.edges["dst"].tolist()):
        succ.setdefault(s, []).append(d)
    pos = {}
    for li, seq in enumerate(g.lane_tasks):
        for p, t in enumerate(seq):
            pos[t] = (li, p)
    seen, todo = {src}, deque([src])
    while todo:
        t = todo.popleft()
        if t == dst:
            return True
        nxt = list(succ.get(t, ()))
        if t in pos:
            li, p = pos[t]
            if p + 1 < len(g.lane_tasks[li]):
                nxt.append(g.lane_tasks[li][p + 1])
        for x in nxt:
            if x not in seen:
                seen.add(x)
                todo.append(x)
    return False


def add_dependency(g: DependencyGraph, src: int, dst: int, kind: EdgeKind = EdgeKind.DATA,
                   lag_ns: int = 0, anchor: Anchor = Anchor.END, target: Anchor = Anchor.START) -> None:
    """Add one edge ``src -> dst``, refusing it if it would close a cycle.

    Raises
    ------
    CycleError
        Naming both tasks, if ``src`` is already reachable from ``dst``.
    """
    src, dst = (int(t) for t in task_ids(g, [src, dst]))
    if src == dst or _reaches(g, dst, src):
        raise CycleError(f"edge #{src} {g.task_name(src)!r} -> #{dst} {g.task_name(dst)!r} "
                         f"would create a cycle", (src, dst))
    g.add_edges(src, dst, kind, lag_ns=lag_ns, anchor=anchor, target=target)


def insert(g: DependencyGraph, lane: int, *, dur_ns: int, name: str, kind: EventKind | None = None,
           after: int | None = None, before: int | None = None, gap_ns: int = 0, deps=(), succs=(),
           phase=Phase.OTHER, layer: str | None = None, iteration: int = -1, bytes_: int = 0) -> int:
    """Insert a task on ``lane``; returns its id.

    Parameters
    ----------
    after, before : int, optional
        Lane neighbour to place it after/before (default: end of the lane).
    deps, succs : iterable of int
        Tasks it waits for (end -> start) and tasks that wait for it.
    """
    ln = g.lanes[lane]
    if kind is None:
        kind = EventKind.CPU_OP if ln.kind == LaneKind.CPU_THREAD else EventKind.KERNEL
    seq = g.lane_tasks[lane]
    if after is not None and before is not None:
        raise GraphError("give at most one of after= and before=")
    try:
        pos = seq.index(after) + 1 if after is not None else seq.index(before) if before is not None else len(seq)
    except ValueError:
        raise GraphError(f"task {after if after is not None else before} is not on lane {lane}") from None
    (t,) = g.add_tasks(lane=[lane], kind=[kind], name=[g.names.intern(name)], dur_ns=[dur_ns],
                       gap_ns=[gap_ns], rank=[ln.rank], phase=[int(Phase[phase.upper()]) if isinstance(phase, str) else int(phase)],
                       layer=[g.layers.intern(layer) if layer else -1], iteration=[iteration], bytes=[bytes_])
    t = int(t)
    seq.insert(pos, t)
    try:
        for d in deps:
            add_dependency(g, int(d), t)
        for s in succs:
            add_dependency(g, t, int(s))
    except CycleError:
        remove(g, [t])
        raise
    return t


# ------------------------------------------------------------------ remove
def remove(g: DependencyGraph, tasks, keep_gap: bool = False) -> None:
    """Remove ``tasks``; their dependencies are bridged.

    Each predecessor of a removed task becomes a predecessor of each of its
    successors (lags add up).  A removed task's gap (the CPU time before it)
    goes with it unless ``keep_gap``, in which case it moves to its lane
    successor.  Markers and parts of collectives cannot be removed.
    """
    dead = np.zeros(g.n_tasks, bool)
    dead[task_ids(g, tasks)] = True
    if not dead.any():
        return
    bad = dead & ((g.tasks["kind"] == EventKind.MARKER) | (g.tasks["group"] >= 0))
    if bad.any():
        t = int(np.flatnonzero(bad)[0])
        raise GraphError(f"cannot remove #{t} {g.task_name(t)!r}: iteration markers and collective parts stay")
    _bridge(g, dead)
    if keep_gap:
        for seq in g.lane_tasks:
            carry = 0
            for t in seq:
                if dead[t]:
                    carry += int(g.tasks["gap_ns"][t])
                elif carry:
                    g.tasks["gap_ns"][t] += carry
                    carry = 0
    _compact(g, ~dead)


def _bridge(g, dead):
    E = g.edges
    src, dst = E["src"], E["dst"]
    into, out = {}, {}
    for i in np.flatnonzero(dead[dst] | dead[src]).tolist():
        if dead[dst[i]]:
            into.setdefault(int(dst[i]), []).append(i)
        if dead[src[i]]:
            out.setdefault(int(src[i]), []).append(i)
    new = []
    for t, ins in into.items():
        for i in ins:
            for o in out.get(t, ()):
                s, d = int(src[i]), int(dst[o])
                if not dead[s] and not dead[d]:
                    new.append((s, d, int(E["kind"][o]), int(E["anchor"][i]), int(E["target"][o]),
                                int(E["lag_ns"][i]) + max(int(E["lag_ns"][o]), 0)))
    if new:
        s, d, k, a, tg, lag = map(np.asarray, zip(*new))
        g.add_edges(s, d, k, lag_ns=lag, anchor=a, target=tg)


def _compact(g, keep):
    """Drop tasks not in ``keep``; renumber everything that refers to task ids."""
    new_id = np.cumsum(keep) - 1
    for k in TASK_COLUMNS:
        g.tasks[k] = g.tasks[k][keep]
    E = g.edges
    ok = keep[E["src"]] & keep[E["dst"]]
    for k in E:
        E[k] = E[k][ok]
    E["src"] = new_id[E["src"]].astype(np.int32)
    E["dst"] = new_id[E["dst"]].astype(np.int32)
    g.lane_tasks = [[int(new_id[t]) for t in seq if keep[t]] for seq in g.lane_tasks]
    g.markers = {r: [int(new_id[t]) for t in m] for r, m in g.markers.items()}


# ---------------------------------------------------------------- schedule
class LanePolicy(enum.IntEnum):
    """How a lane picks its next task."""

    FIFO = 0      # traced (lane) order
    PRIORITY = 1  # among ready tasks, lowest ``priority`` first, then lane order


def set_policy(g: DependencyGraph, lane: int, policy: LanePolicy) -> None:
    """Set the scheduling policy of ``lane``."""
    g.lane_policy[lane] = LanePolicy(policy)


def set_priority(g: DependencyGraph, tasks, priority) -> None:
    """Set the priority key of ``tasks`` (lower runs first on PRIORITY lanes)."""
    g.tasks["priority"][task_ids(g, tasks)] = priority


def check_acyclic(g: DependencyGraph) -> None:
    """Raise :class:`CycleError` if the graph's constraints form a cycle.

    Each task is split into its start and end so that a blocking copy (a
    launch from the call's start, a sync to the call's end) is no cycle.
    """
    n = g.n_tasks
    succ = [[] for _ in range(2 * n)]
    indeg = [0] * (2 * n)

    def link(a, b):
        succ[a].append(b)
        indeg[b] += 1

    for t in range(n):
        link(2 * t, 2 * t + 1)
    for seq in g.lane_tasks:
        for a, b in zip(seq, seq[1:]):
            link(2 * a + 1, 2 * b)
    E = g.edges
    for s, d, a, tg in zip(E["src"].tolist(), E["dst"].tolist(), E["anchor"].tolist(), E["target"].tolist()):
        link(2 * s + a, 2 * d + tg)
    todo = deque(i for i in range(2 * n) if not indeg[i])
    seen = 0
    while todo:
        i = todo.popleft()
        seen += 1
        for j in succ[i]:
            indeg[j] -= 1
            if not indeg[j]:
                todo.append(j)
    if seen != 2 * n:
        stuck = sorted({i // 2 for i in range(2 * n) if indeg[i]})[:5]
        raise CycleError("dependency cycle among tasks " + ", ".join(f"#{t} {g.task_name(t)!r}" for t in stuck),
                         tuple(stuck))
