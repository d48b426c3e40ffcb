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
"""
from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np

from ..errors import TraceError
from ..model import EventKind, LaneKind, Phase, Trace
from .graph import Anchor, DependencyGraph, EdgeKind, WaitKind

try:   # compiled _cpu_slices (daydream/loader/_kineto.cpp; identical results, tests/test_fast_loader.py)
    from .._kineto import cpu_slices as _compiled_cpu_slices
except ImportError:  # pragma: no cover - depends on the build
    _compiled_cpu_slices = None

__all__ = ["build_graph", "GraphBuilder", "STREAM_SYNC_CALLS", "DEVICE_SYNC_CALLS", "EVENT_SYNC_CALLS",
           "BLOCKING_COPY_CALLS"]

STREAM_SYNC_CALLS = frozenset({"cudaStreamSynchronize", "cuStreamSynchronize"})
DEVICE_SYNC_CALLS = frozenset({"cudaDeviceSynchronize", "cuCtxSynchronize"})
EVENT_SYNC_CALLS = frozenset({"cudaEventSynchronize", "cuEventSynchronize"})
BLOCKING_COPY_CALLS = frozenset({"cudaMemcpy", "cudaMemcpy2D", "cudaMemset"})
_ASYNC_COPY_CALLS = frozenset({"cudaMemcpyAsync", "cuMemcpyAsync", "cudaMemcpy2DAsync"})
_PAGEABLE = "Pageable"
_RECORD_CALLS = frozenset({"cudaEventRecord", "cuEventRecord", "cudaEventRecordWithFlags"})
_WAIT_CALLS = frozenset({"cudaStreamWaitEvent", "cuStreamWaitEvent"})
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


def _enqueue_times(g, launch_of, starts_now, sc):
    """When each GPU task reached its stream's queue (its launch's start).

    Builds, per GPU lane, a lookup for "last task enqueued by time t".
    """
    start = g.tasks["traced_start_ns"]
    sc.lookup = {}
    for gl, st in starts_now.items():
        if g.lanes[gl].kind != LaneKind.GPU_STREAM or not len(st):
            continue
        seq = sc.ids[gl]
        by = launch_of[seq - sc.base]
        enq = np.where(by >= 0, start[np.maximum(by, 0)], st)
        order = np.argsort(enq, kind="stable")
        sc.lookup[gl] = (enq[order], np.maximum.accumulate(order), seq)


def _last_enqueued(g, sc, gl, t_ns):
    """Last task of GPU lane ``gl`` enqueued at or before ``t_ns`` (or -1)."""
    if gl not in sc.lookup:
        return -1
    enq, prefmax, seq = sc.lookup[gl]
    k = int(np.searchsorted(enq, t_ns, side="right"))
    return int(seq[prefmax[k - 1]]) if k else -1


# name flags of the calls _thread_semantics acts on
_RECORD, _WAIT, _ASYNC, _STREAM_SYNC, _DEVICE_SYNC, _EVENT_SYNC, _BLOCKING = (1 << k for k in range(7))
_FLAG_SETS = ((_RECORD, _RECORD_CALLS), (_WAIT, _WAIT_CALLS), (_ASYNC, _ASYNC_COPY_CALLS),
              (_STREAM_SYNC, STREAM_SYNC_CALLS), (_DEVICE_SYNC, DEVICE_SYNC_CALLS),
              (_EVENT_SYNC, EVENT_SYNC_CALLS), (_BLOCKING, BLOCKING_COPY_CALLS))


def _name_flags(strings: list) -> np.ndarray:
    flags = np.zeros(len(strings), np.int64)
    for i, name in enumerate(strings):
        for bit, names in _FLAG_SETS:
            if name in names:
                flags[i] |= bit
    return flags


def _thread_semantics(g, r, lane_map, launch_of, sc):
    """Syncs, event records and cross-stream waits, scanning each CPU thread."""
    launched = np.flatnonzero(launch_of >= 0)
    # GPU tasks grouped by their launching call, in trace order within a call
    by_call = launched[np.lexsort((g.tasks["event"][launched + sc.base], launch_of[launched]))]
    call_keys = launch_of[by_call]
    by_call += sc.base
    lane_col, kind_col, name_col = g.tasks["lane"], g.tasks["kind"], g.tasks["name"]
    start = g.tasks["traced_start_ns"]
    strings = g.names.strings
    flags = _name_flags(strings)
    sync = int(EventKind.SYNC)
    gpu_lanes = [gl for gl in lane_map.values() if g.lanes[gl].kind == LaneKind.GPU_STREAM]
    es, ed, ek, et = [], [], [], []          # edges, added at the end in this order

    def edge(a, b, kind, target=Anchor.START):
        es.append(a)
        ed.append(b)
        ek.append(kind)
        et.append(target)

    for gl in lane_map.values():
        if g.lanes[gl].kind != LaneKind.CPU_THREAD:
            continue
        last_gpu, record, pending = -1, None, []
        seq = sc.ids[gl]
        calls = seq[np.isin(kind_col[seq], (EventKind.RUNTIME, EventKind.SYNC))]
        lo = np.searchsorted(call_keys, calls, side="left")
        hi = np.searchsorted(call_keys, calls, side="right")
        acts = (hi > lo) | (flags[name_col[calls]] != 0)     # the others change nothing
        calls, lo, hi = calls[acts], lo[acts], hi[acts]
        for t, k, name_id, a, b in zip(calls.tolist(), kind_col[calls].tolist(), name_col[calls].tolist(),
                                       lo.tolist(), hi.tolist()):
            f = int(flags[name_id])
            ts = int(start[t])
            xs = by_call[a:b].tolist()
            for x in xs:
                last_gpu = int(lane_col[x])
                for target in pending:
                    if lane_col[target] != lane_col[x]:
                        edge(target, x, EdgeKind.WAIT)
                pending = []
            if f & _RECORD and last_gpu >= 0:
                record = (last_gpu, ts)
            elif f & _WAIT and record is not None:
                target = _last_enqueued(g, sc, record[0], record[1])
                if target >= 0:
                    pending.append(target)
            if f & _ASYNC:      # pageable host memory: the call returns when the copy is done
                for x in xs:
                    if _PAGEABLE in strings[name_col[x]]:
                        edge(x, t, EdgeKind.SYNC, Anchor.END)
            if k != sync:
                continue
            if f & _STREAM_SYNC and last_gpu >= 0:
                g.tasks["wait_kind"][t] = WaitKind.STREAM
                g.tasks["wait_lane"][t] = last_gpu
                x = _last_enqueued(g, sc, last_gpu, ts)
                if x >= 0:
                    sc.waits.append((t, x))
            elif f & _DEVICE_SYNC:
                g.tasks["wait_kind"][t] = WaitKind.DEVICE
                for lane in gpu_lanes:
                    x = _last_enqueued(g, sc, lane, ts)
                    if x >= 0:
                        sc.waits.append((t, x))
            elif f & _EVENT_SYNC and record is not None:
                x = _last_enqueued(g, sc, record[0], record[1])
                if x >= 0:
                    edge(x, t, EdgeKind.SYNC, Anchor.END)
            elif f & _BLOCKING:
                for x in xs:
                    edge(x, t, EdgeKind.SYNC, Anchor.END)
    if es:
        g.add_edges(es, ed, np.asarray(ek, np.int8), target=np.asarray(et, np.int8))


def _handoffs(g, r, sc, lane_map, starts_now):
    """Main thread <-> worker threads (e.g. autograd) per iteration."""
    main = lane_map.get(r.main_lane)
    if main is None:
        return
    mseq = sc.ids[main]
    if not len(mseq):
        return
    ms = starts_now[main]
    me = ms + g.tasks["dur_ns"][mseq]
    it_col = g.tasks["iteration"]
    for gl in lane_map.values():
        seq = sc.ids[gl]
        if gl == main or g.lanes[gl].kind != LaneKind.CPU_THREAD or not len(seq):
            continue
        st = starts_now[gl]
        en = st + g.tasks["dur_ns"][seq]
        on = np.flatnonzero(it_col[seq] >= 0)
        its = it_col[seq][on]
        first = on[np.unique(its, return_index=True)[1]]               # per iteration: first task
        last = on[len(on) - 1 - np.unique(its[::-1], return_index=True)[1]]   # and last task
        ps = np.searchsorted(me, st[first], side="right") - 1
        qs = np.searchsorted(ms, en[last], side="left")
        es, ed, ek = [], [], []
        for f, l, p, q in zip(first.tolist(), last.tolist(), ps.tolist(), qs.tolist()):
            if p >= 0:
                es.append(mseq[p]), ed.append(seq[f]), ek.append(EdgeKind.FWD_BWD)
            if q < len(mseq):
                es.append(seq[l]), ed.append(mseq[q]), ek.append(EdgeKind.THREAD)
        if es:
            g.add_edges(es, ed, np.asarray(ek, np.int8))


def _coll_key(name: str) -> str:
    return name.split("(", 1)[0]


def _join_collectives(g, collectives, start, dur, repairs):
    """Group the k-th collective of each kind across ranks into one collective."""
    if len(collectives) < 2:
        return
    by_key = {}
    for rank, tasks in collectives.items():
        d = defaultdict(list)
        for t in sorted(tasks, key=lambda t: start[t]):
            d[_coll_key(g.task_name(t))].append(t)
        by_key[rank] = d
    keys = set().union(*(d.keys() for d in by_key.values()))
    transfer = []
    for key in sorted(keys):
        lists = [d.get(key, []) for d in by_key.values()]
        m = min(len(x) for x in lists)
        repairs_n = sum(len(x) - m for x in lists)
        if repairs_n:
            repairs["collectives without a partner on every rank (not joined)"] += repairs_n
        for k in range(m):
            parts = np.array([x[k] for x in lists])
            max_start = int(start[parts].max())
            ends = start[parts] + dur[parts]
            T = max(int(ends.min()) - max_start, 0)
            gid = len(transfer)
            transfer.append(T)
            g.tasks["group"][parts] = gid
            g.tasks["wait_lag_ns"][parts] = ends - (max_start + T)
            g.tasks["dur_ns"][parts] = np.minimum(dur[parts], T)
    g.group_transfer_ns = np.asarray(transfer, np.int64)


# --------------------------------------------------------------- calibration
def _lane_prev_end(g, sc, start, dur):
    prev_end = np.zeros(g.n_tasks, np.int64)
    for a in sc.ids.values():
        if len(a):
            e = start[a] + dur[a]
            prev_end[a[1:]] = e[:-1]
    return prev_end


def _natural(offsets, binding, groups, n_groups):
    """Median releasing offset per group (0 where a group never released)."""
    out = np.zeros(n_groups, np.int64)
    offsets, groups = offsets[binding], groups[binding]
    for k in np.flatnonzero(np.bincount(groups, minlength=n_groups)).tolist():
        out[k] = int(np.median(offsets[groups == k]))
    return out


def _calibrate_starts(g, sc, start, dur):
    t, e = g.tasks, g.edges
    lane_off = start - _lane_prev_end(g, sc, start, dur)
    lane_kind = np.array([int(ln.kind) for ln in g.lanes], np.int64)[t["lane"]] if g.n_tasks else np.zeros(0, np.int64)
    on_start = e["target"] == Anchor.START
    src, dst = e["src"], e["dst"]
    anchor_t = start[src] + np.where(e["anchor"] == Anchor.END, dur[src], 0)
    edge_off = start[dst] - anchor_t
    min_edge = np.full(g.n_tasks, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(min_edge, dst[on_start], edge_off[on_start])
    lane_bind = lane_off <= min_edge
    edge_bind = on_start & (edge_off == min_edge[dst]) & (edge_off < lane_off[dst])
    nat_lane = _natural(lane_off, lane_bind, lane_kind, len(LaneKind))
    t["gap_ns"] = np.where(lane_bind, lane_off, np.minimum(lane_off, nat_lane[lane_kind]))
    nat_edge = _natural(edge_off, edge_bind, e["kind"].astype(np.int64), len(EdgeKind))
    relaxed = np.minimum(edge_off, nat_edge[e["kind"]])
    e["lag_ns"] = np.where(on_start, np.where(edge_bind, edge_off, relaxed), e["lag_ns"])


def _calibrate_ends(g, start, dur, waits):
    """Synchronizing calls: which of (own duration, waited-for work) ended them."""
    t, e = g.tasks, g.edges
    end = start + dur
    on_end = np.flatnonzero(e["target"] == Anchor.END)
    # latest anchor among end constraints, per task
    anchor = {}
    for i in on_end.tolist():
        d = int(e["dst"][i])
        anchor[d] = max(anchor.get(d, -(1 << 62)), int(end[e["src"][i]]))
    dyn = {}
    for s_task, x in waits:
        dyn[s_task] = max(dyn.get(s_task, -(1 << 62)), int(end[x]))
        anchor[s_task] = max(anchor.get(s_task, -(1 << 62)), dyn[s_task])
    if not anchor:
        return
    tasks = np.fromiter(anchor.keys(), np.int64)
    a = np.fromiter(anchor.values(), np.int64)
    bind = (end[tasks] - a) < dur[tasks]          # released by the awaited work
    nat_dur = int(np.median(dur[tasks][~bind])) if (~bind).any() else 0
    nat_wake = int(np.median((end[tasks] - a)[bind])) if bind.any() else 0
    t["dur_ns"][tasks] = np.where(bind, np.minimum(dur[tasks], nat_dur), dur[tasks])
    bound = dict(zip(tasks.tolist(), bind.tolist()))
    for s_task, lat in dyn.items():
        off = int(end[s_task]) - lat
        t["wait_lag_ns"][s_task] = off if bound[s_task] and lat == anchor[s_task] else min(off, nat_wake)
    for i in on_end.tolist():
        d = int(e["dst"][i])
        off = int(end[d]) - int(end[e["src"][i]])
        exact = bound[d] and int(end[e["src"][i]]) == anchor[d]
        e["lag_ns"][i] = off if exact else min(off, nat_wake)
