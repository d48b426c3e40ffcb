"""Building the dependency graph from a loaded trace.

Tasks: the self-time slices of the CPU ops and runtime calls of each CPU
thread (an op with children becomes the pieces of its own time between them,
each attributed to the op; time outside every op is the gap before the next
task), every kernel, copy and set on each GPU stream, and a zero-length marker
at each iteration boundary.

Offsets: every start constraint of a task (its lane predecessor plus each
incoming edge) has a measured offset, the time from the constraint's anchor
to the task's traced start.  The constraint with the smallest offset released
the task: it keeps its measured offset.  The others are relaxed to
``min(measured, natural)``, where *natural* is the median offset of that
constraint kind where it was the releasing one (from the same trace).  An
unedited replay therefore reproduces every traced start, while an edit that
makes a predecessor faster lets its successors move.  End constraints
(synchronizations, collectives) follow the same rule.

The synchronisation semantics of CUDA calls live in :mod:`daydream.graph.sync`,
the joining of collectives and the calibration in :mod:`daydream.graph.offsets`.
"""
from __future__ import annotations

from collections import Counter

import numpy as np

from ..errors import TraceError
from ..model import EventKind, LaneKind, Phase, Trace
from .graph import Anchor, DependencyGraph, EdgeKind
from .offsets import _calibrate_ends, _calibrate_starts, _join_collectives
from .sync import (BLOCKING_COPY_CALLS, DEVICE_SYNC_CALLS, EVENT_SYNC_CALLS, STREAM_SYNC_CALLS, _enqueue_times,
                   _handoffs, _thread_semantics)

try:   # compiled _cpu_slices (daydream/loader/_kineto.cpp; identical results, tests/test_fast_loader.py)
    from .._kineto import cpu_slices as _compiled_cpu_slices
except ImportError:  # pragma: no cover - depends on the build
    _compiled_cpu_slices = None

__all__ = ["build_graph", "GraphBuilder", "STREAM_SYNC_CALLS", "DEVICE_SYNC_CALLS", "EVENT_SYNC_CALLS",
           "BLOCKING_COPY_CALLS"]

_CPU_TASK_KINDS = (EventKind.CPU_OP, EventKind.RUNTIME, EventKind.SYNC)
_GPU_TASK_KINDS = (EventKind.KERNEL, EventKind.MEMCPY, EventKind.MEMSET, EventKind.COLLECTIVE)


class _Scratch:
    """Traced times and pending constraints gathered while building."""

    def __init__(self):
        self.waits: list[tuple[int, int]] = []   # (sync task, target task) dynamic waits
        self.lookup: dict = {}                   # GPU lane -> "last task enqueued by t" index
        self.ids: dict[int, np.ndarray] = {}      # lane -> its tasks (as in ``lane_tasks``)
        self.base = 0                            # first task of the rank being built


def build_graph(trace: Trace) -> DependencyGraph:
    """Build the :class:`DependencyGraph` of a loaded :class:`~daydream.model.Trace`.

    Examples
    --------
    >>> from daydream import load_trace, build_graph   # doctest: +SKIP
    >>> g = build_graph(load_trace("trace.json.gz"))     # doctest: +SKIP
    """
    b = GraphBuilder()
    for r in trace:
        b.add_rank(r)
    return b.finish()


class GraphBuilder:
    """:func:`build_graph` rank by rank, e.g. while a loader still parses the other ranks.

    Task ids follow the order in which ranks are added.  Until :meth:`finish`
    times are absolute (origin 0); ``finish`` moves the origin to the first
    traced time and calibrates the offsets across all ranks.

    Examples
    --------
    >>> from daydream.loader import load_trace           # doctest: +SKIP
    >>> b = GraphBuilder()                               # doctest: +SKIP
    >>> trace = load_trace("traces/", on_rank=b.add_rank)   # doctest: +SKIP
    >>> g = b.finish()                                   # doctest: +SKIP
    """

    def __init__(self):
        self.graph = DependencyGraph()
        self._sc = _Scratch()
        self._collectives = {}
        self._repairs = Counter()
        self._origin_ns = None

    def add_rank(self, r) -> None:
        """Add the tasks and edges of one :class:`~daydream.model.RankTrace`."""
        g = self.graph
        if r.rank in g.sources:
            raise TraceError(r.source, f"rank {r.rank} given twice (also {g.sources[r.rank]})")
        self._collectives[r.rank] = _build_rank(g, r, self._sc, self._repairs)
        g.sources[r.rank] = r.source
        self._repairs.update(r.repairs)
        first = int(min(r.cols["start_ns"].min(), r.boundaries_ns.min()))
        self._origin_ns = first if self._origin_ns is None else min(self._origin_ns, first)

    def finish(self) -> DependencyGraph:
        """Join collectives across ranks, calibrate offsets; the finished graph."""
        g, sc = self.graph, self._sc
        g.origin_ns = self._origin_ns or 0
        g.tasks["traced_start_ns"] -= g.origin_ns
        for rank in g.measured_boundaries_ns:
            g.measured_boundaries_ns[rank] = g.measured_boundaries_ns[rank] - g.origin_ns
        start, dur = g.tasks["traced_start_ns"].copy(), g.tasks["dur_ns"].copy()   # as traced
        _join_collectives(g, self._collectives, start, dur, self._repairs)
        _calibrate_starts(g, sc, start, dur)
        _calibrate_ends(g, start, dur, sc.waits)
        g.repairs = dict(self._repairs)
        return g


# --------------------------------------------------------------------- tasks
def _cpu_slices(idx, start, end):
    """Split a thread's nested ops into self-time slices, in time order.

    An op with children becomes the slices of its own time between them, each
    attributed to the op; a leaf is one slice.  Returns (event, start, end).
    """
    ev, ss, ee = [], [], []
    stack = []          # open events: (end, event)
    cursor = None

    def emit(i, a, b, always=False):
        if b > a or always:
            ev.append(i)
            ss.append(a)
            ee.append(b)

    for i, a, b in zip(idx.tolist(), start[idx].tolist(), end[idx].tolist()):
        while stack and stack[-1][0] <= a:
            top_end, top = stack.pop()
            if top_end > cursor:
                emit(top, cursor, top_end)
                cursor = top_end
        if stack and a > cursor:
            emit(stack[-1][1], cursor, a)
        cursor = a if cursor is None else max(cursor, a)
        if b <= a:                      # zero-length event: a task of its own
            emit(i, a, a, always=True)
            continue
        stack.append((b, i))
    while stack:
        top_end, top = stack.pop()
        if top_end > cursor:
            emit(top, cursor, top_end)
            cursor = top_end
    return np.asarray(ev, np.int64), np.asarray(ss, np.int64), np.asarray(ee, np.int64)


def _work_columns(cols, idx, dur):
    """Bytes and FLOPs per task: on the longest slice of each op only (no double counting),
    and not on ops whose work happens in a nested op that has FLOPs of its own
    (``aten::linear`` delegating to ``aten::addmm``)."""
    real = np.maximum(idx, 0)
    flops = np.where(idx >= 0, cols["flops"][real], 0)
    nbytes = np.where(idx >= 0, cols["bytes"][real], 0)
    if (np.diff(idx) > 0).all():       # one slice per event (GPU lanes, leaf-only threads)
        longest = np.ones(len(idx), bool)
    else:
        order = np.lexsort((-dur, idx))
        first = np.ones(len(idx), bool)
        first[1:] = idx[order][1:] != idx[order][:-1]
        longest = np.zeros(len(idx), bool)
        longest[order[first]] = True
    delegates = _delegating(cols, idx[(idx >= 0) & (flops > 0)])
    flops[~longest | np.isin(idx, delegates)] = 0
    nbytes[~longest] = 0
    return {"flops": flops, "bytes": nbytes}


def _delegating(cols, ops):
    """Ops with FLOPs that enclose another op with FLOPs on the same thread."""
    if len(ops) < 2:
        return np.zeros(0, np.int64)
    ops = np.unique(ops)
    lane, start = cols["lane"][ops], cols["start_ns"][ops]
    end = start + cols["dur_ns"][ops]
    out = []
    order = np.lexsort((-end, start, lane))
    stack = []
    for j in order.tolist():
        while stack and (lane[stack[-1]] != lane[j] or end[stack[-1]] <= start[j]):
            stack.pop()
        if stack:
            out.append(ops[stack[-1]])
        stack.append(j)
    return np.unique(np.asarray(out, np.int64))


def _select(r):
    """Per lane: (event rows, start, end) of the tasks, in time order."""
    cols = r.cols
    kind, lane = cols["kind"], cols["lane"]
    start, end = cols["start_ns"], cols["start_ns"] + cols["dur_ns"]
    per_lane = {}
    for li, ln in enumerate(r.lanes):
        on = lane == li
        if ln.kind == LaneKind.CPU_THREAD:
            sel = (_compiled_cpu_slices or _cpu_slices)(np.flatnonzero(on & np.isin(kind, _CPU_TASK_KINDS)),
                                                        start, end)
        else:
            idx = np.flatnonzero(on & np.isin(kind, _GPU_TASK_KINDS))
            sel = (idx, start[idx], end[idx])
        if len(sel[0]) or li == r.main_lane:
            per_lane[li] = sel
    return per_lane


def _repair_overlaps(s, e, repairs):
    """Clip tasks that start before their lane predecessor ends."""
    if len(s) < 2:
        return s, e
    prev_end = np.maximum.accumulate(e)[:-1]
    bad = s[1:] < prev_end
    if bad.any():
        repairs["overlapping tasks on one lane (clipped)"] += int(bad.sum())
        s = s.copy()
        s[1:][bad] = prev_end[bad]
        e = np.maximum(e, s)
    return s, e


def _build_rank(g: DependencyGraph, r, sc: _Scratch, repairs: Counter):
    """Tasks and edges of one rank, times absolute; returns its collective tasks."""
    cols = r.cols
    lane_map, starts_now = {}, {}   # GPU/CPU lane -> traced starts of its tasks
    task_of_event = np.full(len(r), -1, np.int64)
    sc.base = g.n_tasks
    name_lut = np.full(len(r.names), -1, np.int64)
    layer_lut = np.full(len(r.layers), -1, np.int64)
    for li, (idx, s, e) in _select(r).items():
        gl = g.add_lane(r.lanes[li])
        lane_map[li] = gl
        s, e = _repair_overlaps(s, e, repairs)
        kinds = cols["kind"][idx]
        names = _intern_ids(g.names, r.names, cols["name"][idx], name_lut)
        layers = _intern_ids(g.layers, r.layers, cols["layer"][idx], layer_lut)
        if li == r.main_lane:
            idx, s, e, kinds, names, layers = _with_markers(g, r, idx, s, e, kinds, names, layers, repairs)
        ids = g.add_tasks(
            lane=np.full(len(idx), gl), kind=kinds, name=names, layer=layers,
            phase=np.where(idx >= 0, cols["phase"][np.maximum(idx, 0)], Phase.OTHER),
            iteration=_marker_iterations(cols["iteration"], idx),
            rank=np.full(len(idx), r.rank), event=idx, dur_ns=e - s, traced_start_ns=s,
            **_work_columns(cols, idx, e - s))
        real = np.flatnonzero(idx >= 0)[::-1]           # reversed: an op maps to its first slice
        task_of_event[idx[real]] = ids[real]
        g.lane_tasks[gl] = ids.tolist()
        sc.ids[gl] = ids
        starts_now[gl] = s
        if li == r.main_lane:
            g.markers[r.rank] = ids[idx < 0].tolist()
    g.measured_boundaries_ns[r.rank] = r.boundaries_ns
    launch_of = _launch_edges(g, r, sc, task_of_event, lane_map, starts_now, repairs)
    _enqueue_times(g, launch_of, starts_now, sc)
    _thread_semantics(g, r, lane_map, launch_of, sc)
    _handoffs(g, r, sc, lane_map, starts_now)
    kind, out = g.tasks["kind"], []
    for gl in lane_map.values():
        a = sc.ids[gl]
        out.extend(a[kind[a] == EventKind.COLLECTIVE].tolist())
    return out


def _intern_ids(dst, src, ids, lut):
    """Ids in table ``dst`` of the strings with ids ``ids`` in ``src`` (-1 stays -1).

    ``lut`` maps ``src`` ids to ``dst`` ids (-1: not interned yet) and is
    updated; reused across the lanes of a rank.  Strings are interned in order
    of first appearance, as one-by-one interning would.
    """
    ids = np.asarray(ids, np.int64)
    out = np.full(len(ids), -1, np.int64)
    ok = np.flatnonzero(ids >= 0)
    if not len(ok):
        return out
    new = ids[ok][lut[ids[ok]] < 0]
    if len(new):
        uniq, first = np.unique(new, return_index=True)
        for j in np.argsort(first, kind="stable").tolist():
            lut[uniq[j]] = dst.intern(src[int(uniq[j])])
    out[ok] = lut[ids[ok]]
    return out


def _marker_iterations(iteration, idx):
    it = np.where(idx >= 0, iteration[np.maximum(idx, 0)], -1)
    # marker k opens iteration k (the last closes the trace)
    mk = np.flatnonzero(idx < 0)
    it[mk] = np.arange(len(mk))
    return it


def _with_markers(g, r, idx, s, e, kinds, names, layers, repairs):
    """Merge zero-length marker tasks at the iteration boundaries into the main lane."""
    b = r.boundaries_ns
    pos = np.searchsorted(s, b, side="left")
    prev_end = np.array([e[p - 1] if p > 0 else b[i] for i, p in enumerate(pos)], np.int64)
    mark_s = np.maximum(b, prev_end)
    if (mark_s != b).any():
        repairs["iteration boundaries inside a task (moved to its end)"] += int((mark_s != b).sum())
    marker_name = g.names.intern("iteration boundary")
    n = len(b)
    idx = np.insert(idx, pos, np.full(n, -1))
    s = np.insert(s, pos, mark_s)
    e = np.insert(e, pos, mark_s)
    kinds = np.insert(kinds, pos, np.full(n, EventKind.MARKER))
    names = np.insert(np.asarray(names, np.int64), pos, np.full(n, marker_name))
    layers = np.insert(np.asarray(layers, np.int64), pos, np.full(n, -1))
    return idx, s, e, kinds, names, layers


# --------------------------------------------------------------------- edges
def _launch_edges(g, r, sc, task_of_event, lane_map, starts_now, repairs):
    """Runtime call -> GPU task by correlation id.

    Returns ``launch_of``: per task of the rank (from ``sc.base``), the task
    that launched it (-1 if none).
    """
    cols = r.cols
    kind, corr, lane = cols["kind"], cols["corr"], cols["lane"]
    cpu_lanes = [li for li, ln in enumerate(r.lanes) if ln.kind == LaneKind.CPU_THREAD]
    calls = np.flatnonzero(np.isin(lane, cpu_lanes) & np.isin(kind, (EventKind.RUNTIME, EventKind.SYNC))
                           & (corr >= 0))
    keys, first = np.unique(corr[calls], return_index=True)
    call_of = calls[first]                      # the first call of each correlation id
    if len(calls) > len(keys):
        repairs["duplicated correlation ids (first call kept)"] += len(calls) - len(keys)
    gpu = np.flatnonzero((task_of_event >= 0) & np.isin(kind, _GPU_TASK_KINDS))
    pos = np.minimum(np.searchsorted(keys, corr[gpu]), max(len(keys) - 1, 0))
    found = keys[pos] == corr[gpu] if len(keys) else np.zeros(len(gpu), bool)
    if not found.all():
        repairs["GPU tasks without a launching call (no launch edge)"] += int((~found).sum())
    j = call_of[pos[found]]
    src, dst = task_of_event[j], task_of_event[gpu[found]]
    for k in np.flatnonzero(src < 0).tolist():  # call is not a leaf (e.g. a driver call nested inside it)
        src[k] = _leaf_within(g, lane_map[int(lane[j[k]])], int(cols["start_ns"][j[k]]), starts_now)
    src, dst = _fifo_launches(g, sc, src[src >= 0], dst[src >= 0], repairs)
    if len(src):
        g.add_edges(src, dst, EdgeKind.LAUNCH, anchor=Anchor.START)
    launch_of = np.full(g.n_tasks - sc.base, -1, np.int64)
    launch_of[dst - sc.base] = src
    return launch_of


def _fifo_launches(g, sc, src, dst, repairs):
    """Keep launch edges consistent with stream order (a stream runs its work in launch order).

    A GPU task placed on its stream before a task launched earlier contradicts
    FIFO streams (clocks out of step, edited timestamps) and can deadlock a
    stream synchronization.  The launch edges of the fewest tasks that make
    launch order agree with stream order (outside the longest non-decreasing
    run of launch times) are dropped and counted.
    """
    if not len(src):
        return src, dst
    when = np.zeros(g.n_tasks - sc.base, np.int64)       # launch start of each launched GPU task
    when[dst - sc.base] = g.tasks["traced_start_ns"][src]
    launched = np.zeros(g.n_tasks - sc.base, bool)
    launched[dst - sc.base] = True
    bad = []
    for gl in np.unique(g.tasks["lane"][dst]).tolist():
        seq = sc.ids[gl]
        seq = seq[launched[seq - sc.base]]
        enq = when[seq - sc.base]
        if len(enq) < 2 or (np.diff(enq) >= 0).all():
            continue
        keep = _longest_nondecreasing(enq.tolist())
        out = np.ones(len(seq), bool)
        out[keep] = False
        bad.extend(seq[out].tolist())
    if not bad:
        return src, dst
    repairs["GPU tasks out of launch order on their stream (launch edge dropped)"] += len(bad)
    keep = ~np.isin(dst, bad)
    return src[keep], dst[keep]


def _longest_nondecreasing(xs: list) -> list:
    """Indices of a longest non-decreasing subsequence of ``xs`` (patience sorting, n log n).

    >>> _longest_nondecreasing([1, 5, 2, 3, 0, 4])
    [0, 2, 3, 5]
    """
    import bisect

    tails, tail_idx, prev = [], [], [-1] * len(xs)
    for i, x in enumerate(xs):
        k = bisect.bisect_right(tails, x)
        if k == len(tails):
            tails.append(x)
            tail_idx.append(i)
        else:
            tails[k] = x
            tail_idx[k] = i
        prev[i] = tail_idx[k - 1] if k else -1
    out, i = [], tail_idx[-1] if tail_idx else -1
    while i >= 0:
        out.append(i)
        i = prev[i]
    return out[::-1]


def _leaf_within(g, gl, t_rel, starts_now):
    """First task of lane ``gl`` starting at or after ``t_rel`` (or -1)."""
    st = starts_now[gl]
    p = int(np.searchsorted(st, t_rel, side="left"))
    return g.lane_tasks[gl][p] if p < len(st) else -1
