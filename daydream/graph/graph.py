"""The dependency graph: tasks on lanes, typed edges, columnar storage.

A task's start is ``max(lane predecessor's end + gap_ns, max over start
edges of (anchor time of src + lag_ns))``; its end is ``start + dur_ns``,
later if it waits (a synchronization or a collective).  See design.md.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np

from ..model import _NUMPY_DEFAULT_UFUNC, EventKind, Lane, LaneKind, Phase, StringTable

__all__ = ["EdgeKind", "Anchor", "WaitKind", "TASK_COLUMNS", "EDGE_COLUMNS", "DependencyGraph"]


class EdgeKind(enum.IntEnum):
    """Why one task depends on another."""

    __array_ufunc__ = _NUMPY_DEFAULT_UFUNC  # see _NUMPY_DEFAULT_UFUNC

    LANE = 0        # implicit: consecutive tasks of one lane
    LAUNCH = 1      # runtime call -> the kernel/copy it launched (correlation id)
    SYNC = 2        # GPU task -> synchronizing CPU call (constrains the call's end)
    WAIT = 3        # cross-stream wait (cudaEventRecord -> cudaStreamWaitEvent)
    FWD_BWD = 4     # forward thread -> backward (autograd) thread
    THREAD = 5      # worker thread done -> main thread resumes
    COLLECTIVE = 6  # parts of one collective across ranks (implicit, via groups)
    DATA = 7        # inserted by optimizations

    @property
    def label(self) -> str:
        return self.name.lower()


class Anchor(enum.IntEnum):
    """Which time of a task an edge hangs off (source) or constrains (target)."""

    __array_ufunc__ = _NUMPY_DEFAULT_UFUNC  # see _NUMPY_DEFAULT_UFUNC

    START = 0
    END = 1


class WaitKind(enum.IntEnum):
    """Dynamic waits resolved during simulation."""

    __array_ufunc__ = _NUMPY_DEFAULT_UFUNC  # see _NUMPY_DEFAULT_UFUNC

    NONE = 0
    STREAM = 1   # until the last task enqueued on ``wait_lane`` (at the call's start) ends
    DEVICE = 2   # until every stream of the rank's device is drained


#: Task columns and dtypes.
TASK_COLUMNS: dict[str, type] = {
    "lane": np.int32,
    "kind": np.int8,
    "name": np.int32,
    "layer": np.int32,
    "phase": np.int8,
    "iteration": np.int32,
    "rank": np.int32,
    "event": np.int64,          # row in the rank's event table, -1 if inserted
    "dur_ns": np.int64,
    "gap_ns": np.int64,         # minimum time after the lane predecessor's end
    "traced_start_ns": np.int64,  # relative to graph origin, -1 if not traced
    "bytes": np.int64,
    "flops": np.int64,          # arithmetic of matmul/conv tasks, 0 otherwise
    "wait_kind": np.int8,       # WaitKind
    "wait_lane": np.int32,      # lane for WaitKind.STREAM
    "wait_lag_ns": np.int64,    # delay after a wait/collective releases
    "group": np.int32,          # collective group, -1 if none
    "priority": np.int32,       # lane policy key (lower runs first), see Scheduling
}

#: Edge columns and dtypes.
EDGE_COLUMNS: dict[str, type] = {
    "src": np.int32,
    "dst": np.int32,
    "kind": np.int8,
    "anchor": np.int8,   # Anchor of src
    "target": np.int8,   # Anchor of dst
    "lag_ns": np.int64,
}


def _empty(columns):
    return {k: np.zeros(0, dt) for k, dt in columns.items()}


def _append(spare: dict, key: str, cur: np.ndarray, new: np.ndarray) -> np.ndarray:
    """``cur`` followed by ``new``, amortised: columns grow inside a buffer with spare room.

    Appending lane by lane (or edge by edge) would otherwise copy every column
    each time (quadratic).  The result is a view of the buffer's first rows; a
    column replaced from outside (not a view of its buffer) starts a new one.
    """
    n0, n1 = len(cur), len(cur) + len(new)
    buf = spare.get(key)
    fits = (buf is not None and cur.base is buf and len(buf) >= n1 and buf.dtype == cur.dtype
            and (n0 == 0 or cur.ctypes.data == buf.ctypes.data))
    if not fits:
        buf = np.empty(max(n1, 2 * n0, 256), cur.dtype)
        buf[:n0] = cur
        spare[key] = buf
    buf[n0:n1] = new
    return buf[:n1]


@dataclass
class DependencyGraph:
    """Tasks, lanes and edges of one (possibly multi-rank) job.

    Attributes
    ----------
    tasks : dict of str to numpy.ndarray
        Task table, see :data:`TASK_COLUMNS`.
    edges : dict of str to numpy.ndarray
        Edge table (lane order is implicit in ``lane_tasks``).
    lanes : list of Lane
    lane_tasks : list of list of int
        Task ids of each lane in its policy order.
    names, layers : StringTable
    group_transfer_ns : numpy.ndarray
        Per collective group: time from the last rank's arrival to completion.
    markers : dict of int to list of int
        Per rank: the marker tasks at iteration boundaries.
    measured_boundaries_ns : dict of int to numpy.ndarray
        Per rank: traced iteration boundaries (relative to ``origin_ns``).
    origin_ns : int
        Absolute trace time of graph time 0.
    """

    tasks: dict = field(default_factory=lambda: _empty(TASK_COLUMNS))
    edges: dict = field(default_factory=lambda: _empty(EDGE_COLUMNS))
    lanes: list = field(default_factory=list)
    lane_tasks: list = field(default_factory=list)
    names: StringTable = field(default_factory=StringTable)
    layers: StringTable = field(default_factory=StringTable)
    group_transfer_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    markers: dict = field(default_factory=dict)
    measured_boundaries_ns: dict = field(default_factory=dict)
    origin_ns: int = 0
    sources: dict = field(default_factory=dict)
    repairs: dict = field(default_factory=dict)
    lane_policy: dict = field(default_factory=dict)   # lane -> LanePolicy (FIFO if absent)
    _spare: dict = field(default_factory=dict, repr=False, compare=False)   # growth buffers of add_*

    # ------------------------------------------------------------------ sizes
    @property
    def n_tasks(self) -> int:
        return len(self.tasks["lane"])

    @property
    def n_edges(self) -> int:
        return len(self.edges["src"])

    @property
    def ranks(self) -> list:
        return sorted(self.markers)

    def copy(self) -> "DependencyGraph":
        """Deep copy (what optimizations edit)."""
        return DependencyGraph(
            tasks={k: v.copy() for k, v in self.tasks.items()},
            edges={k: v.copy() for k, v in self.edges.items()},
            lanes=list(self.lanes),
            lane_tasks=[list(x) for x in self.lane_tasks],
            names=StringTable(self.names.strings),
            layers=StringTable(self.layers.strings),
            group_transfer_ns=self.group_transfer_ns.copy(),
            markers={r: list(m) for r, m in self.markers.items()},
            measured_boundaries_ns=dict(self.measured_boundaries_ns),
            origin_ns=self.origin_ns,
            sources=dict(self.sources),
            repairs=dict(self.repairs),
            lane_policy=dict(self.lane_policy),
        )

    # ------------------------------------------------------------ building
    def add_lane(self, lane: Lane) -> int:
        self.lanes.append(lane)
        self.lane_tasks.append([])
        return len(self.lanes) - 1

    def add_tasks(self, **cols) -> np.ndarray:
        """Append tasks (columns as arrays of equal length); returns their ids.

        Missing columns take defaults (-1 for ids, 0 for times, no wait).
        The caller places the new tasks in ``lane_tasks``.
        """
        n = len(next(iter(cols.values())))
        defaults = {"layer": -1, "iteration": -1, "event": -1, "traced_start_ns": -1,
                    "wait_lane": -1, "group": -1, "phase": int(Phase.OTHER)}
        first = self.n_tasks
        for k, dt in TASK_COLUMNS.items():
            v = cols.get(k)
            v = np.full(n, defaults.get(k, 0), dt) if v is None else np.asarray(v, dt)
            self.tasks[k] = _append(self._spare, "task." + k, self.tasks[k], v)
        return np.arange(first, first + n)

    def add_edges(self, src, dst, kind, lag_ns=0, anchor=Anchor.END, target=Anchor.START) -> None:
        """Append edges; scalars broadcast."""
        src = np.atleast_1d(np.asarray(src, np.int32))
        n = len(src)
        new = {"src": src, "dst": dst, "kind": kind, "anchor": anchor, "target": target, "lag_ns": lag_ns}
        for k, dt in EDGE_COLUMNS.items():
            v = np.broadcast_to(np.asarray(new[k], dt), (n,))
            self.edges[k] = _append(self._spare, "edge." + k, self.edges[k], v)

    # ----------------------------------------------------------------- views
    def lane_of_rank(self, rank: int, kind: LaneKind | None = None) -> list:
        return [i for i, ln in enumerate(self.lanes)
                if ln.rank == rank and (kind is None or ln.kind == kind)]

    def task_name(self, t: int) -> str:
        return self.names[int(self.tasks["name"][t])]

    def to_networkx(self):
        """The graph as a :class:`networkx.DiGraph` (lane order edges included).

        Nodes are task ids with attributes ``name, kind, lane, rank, dur_ns,
        gap_ns, layer, phase, iteration``; edges carry ``kind`` (EdgeKind
        label), ``anchor``, ``target`` and ``lag_ns``.  A blocking copy shows
        as a 2-cycle (call -> copy is a launch from the call's start, copy ->
        call constrains the call's end); every other edge points forward.

        Examples
        --------
        >>> from daydream.graph.graph import DependencyGraph
        >>> from daydream.model import Lane, LaneKind
        >>> g = DependencyGraph(); lane = g.add_lane(Lane(0, LaneKind.CPU_THREAD, 1, 1))
        >>> ids = g.add_tasks(lane=[lane, lane], dur_ns=[5, 7], name=[g.names.intern("a")] * 2)
        >>> g.lane_tasks[lane].extend(ids.tolist())
        >>> sorted(g.to_networkx().edges(data="kind"))
        [(0, 1, 'lane')]
        """
        import networkx as nx

        t = self.tasks
        G = nx.DiGraph()
        for i in range(self.n_tasks):
            G.add_node(i, name=self.task_name(i), kind=EventKind(int(t["kind"][i])).label,
                       lane=int(t["lane"][i]), rank=int(t["rank"][i]), dur_ns=int(t["dur_ns"][i]),
                       gap_ns=int(t["gap_ns"][i]),
                       layer=self.layers[int(t["layer"][i])] if t["layer"][i] >= 0 else None,
                       phase=Phase(int(t["phase"][i])).label, iteration=int(t["iteration"][i]))
        for seq in self.lane_tasks:
            for a, b in zip(seq, seq[1:]):
                G.add_edge(a, b, kind="lane", anchor="end", target="start", lag_ns=0)
        e = self.edges
        for s, d, k, a, tg, lag in zip(e["src"].tolist(), e["dst"].tolist(), e["kind"].tolist(),
                                       e["anchor"].tolist(), e["target"].tolist(), e["lag_ns"].tolist()):
            G.add_edge(s, d, kind=EdgeKind(k).label, anchor=Anchor(a).name.lower(),
                       target=Anchor(tg).name.lower(), lag_ns=lag)
        return G
