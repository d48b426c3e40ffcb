"""Synchronisation semantics of a rank's CUDA calls, for :mod:`daydream.graph.build`.

Holds the names of the runtime calls that synchronise (stream, device and
event syncs, blocking copies, event records, cross-stream waits, async copies
of pageable memory), when each GPU task reached its stream's queue, the scan
of each CPU thread that turns those calls into wait and sync constraints
(:func:`_thread_semantics`), and the main thread <-> worker thread handoffs
per iteration (:func:`_handoffs`).  The public names are re-exported by
:mod:`daydream.graph.build`.
"""
from __future__ import annotations

import numpy as np

from ..model import EventKind, LaneKind
from .graph import Anchor, EdgeKind, WaitKind

__all__ = ["STREAM_SYNC_CALLS", "DEVICE_SYNC_CALLS", "EVENT_SYNC_CALLS", "BLOCKING_COPY_CALLS"]

STREAM_SYNC_CALLS = frozenset({"cudaStreamSynchronize", "cuStreamSynchronize"})
DEVICE_SYNC_CALLS = frozenset({"cudaDeviceSynchronize", "cuCtxSynchronize"})
EVENT_SYNC_CALLS = frozenset({"cudaEventSynchronize", "cuEventSynchronize"})
BLOCKING_COPY_CALLS = frozenset({"cudaMemcpy", "cudaMemcpy2D", "cudaMemset"})
_ASYNC_COPY_CALLS = frozenset({"cudaMemcpyAsync", "cuMemcpyAsync", "cudaMemcpy2DAsync"})
_PAGEABLE = "Pageable"
_RECORD_CALLS = frozenset({"cudaEventRecord", "cuEventRecord", "cudaEventRecordWithFlags"})
_WAIT_CALLS = frozenset({"cudaStreamWaitEvent", "cuStreamWaitEvent"})


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
