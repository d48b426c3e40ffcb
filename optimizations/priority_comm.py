"""``priority-comm``: sliced, priority-scheduled gradient all-reduce (P3, ByteScheduler).

Model
-----
Every gradient all-reduce (NCCL AllReduce kernels, or the all-reduce tasks
that ``data-parallel`` inserts on its communication lane) is replaced by
``ceil(bytes / slice_mb)`` slices on the same lane.  A slice lasts the
all-reduce's fixed latency plus its share of the bandwidth part of the
all-reduce's own (measured or modelled) duration::

    slice_i = latency + (dur - latency) * bytes_i / bytes

with ``latency = device.allreduce_ns(0, workers)`` (the ring's 2(n-1) step
latencies of the device profile) when the job has several workers, else the
device's per-op overhead.  For a duration that came from the same linear
model this equals ``device.allreduce_ns(bytes_i, workers)`` exactly.  The
lane then runs ready slices by priority (``schedule=priority``): the
gradients the next forward needs first go first.  Priority is the forward
order of the all-reduce's layer when its layer runs in the forward,
otherwise the reverse of the backward's production order (the bucket
produced last holds the first layers).  ``schedule=fifo`` keeps the order.

Every edge into an all-reduce goes to each of its slices; every edge out of
it leaves each slice.  A stream wait or synchronization hanging off an
all-reduce (``cudaStreamWaitEvent``, stream/device synchronize) waits for the
slices of every all-reduce enqueued before it, since reordering must not let
it pass work that CUDA stream order would make it wait for.

Assumptions: the gain needs consumers that wait for single all-reduces (a
per-layer dependency into the next forward, as P3's layer-wise update has);
where the trace synchronises on all gradients before the optimizer step
(PyTorch DDP) slicing only adds per-slice latency and priorities change the
order, not the iteration time.  Slices of one collective keep one group
across ranks (multi-rank traces).  Contention between the compute and
communication kernels is as traced.
"""
from __future__ import annotations

import math

import numpy as np

from daydream.graph.graph import TASK_COLUMNS, EdgeKind, WaitKind
from daydream.model import Phase
from daydream.primitives import LanePolicy, set_duration, set_policy, set_priority

from ._layers import lane_position, require_allreduce, world_size
from .base import Optimization, Param

__all__ = ["PriorityComm", "OPTIMIZATION", "slice_durations"]

_STREAM_ORDER_EDGES = (EdgeKind.WAIT, EdgeKind.SYNC)


def slice_durations(dur_ns: int, nbytes: int, slice_bytes: int, latency_ns: float) -> tuple:
    """(durations, bytes) of the slices of one all-reduce of ``dur_ns`` over ``nbytes``."""
    k = max(1, math.ceil(nbytes / slice_bytes)) if nbytes > 0 else 1
    sizes = [slice_bytes] * (k - 1) + [nbytes - slice_bytes * (k - 1)] if k > 1 else [nbytes]
    lat = min(latency_ns, dur_ns)
    share = [b / nbytes if nbytes else 1.0 for b in sizes]
    return [int(round(lat + (dur_ns - lat) * s)) for s in share], sizes


class PriorityComm(Optimization):
    name = "priority-comm"
    summary = "P3 / ByteScheduler: all-reduces sliced and scheduled by next-forward priority"
    params = (Param("slice_mb", 4.0, "slice size in MB (1e6 bytes); P3 uses ~50k params, ByteScheduler tunes ~1-8 MB"),
              Param("schedule", "priority", "priority: next forward's layers first; fifo: traced order", str,
                    ("priority", "fifo")),
              Param("workers", 0, "workers for the per-slice latency (0: the trace's world size)", int),
              Param("latency_us", -1.0, "per-slice latency in us (-1: the device profile's all-reduce latency)"))
    assumptions = __doc__

    def apply(self, ctx):
        g = ctx.graph
        ar = require_allreduce(g)
        lat = self._latency_ns(ctx)
        slices, n_new = self._slice_all(g, ar, int(self.slice_mb * 1e6), lat)
        self._stream_order(g, ar, slices)
        lanes = sorted({int(g.tasks["lane"][t]) for t in ar})
        if self.schedule == "priority":
            for lane in lanes:
                set_policy(g, lane, LanePolicy.PRIORITY)
                self._priorities(g, lane, slices)
        ctx.note(f"priority-comm: {len(ar)} all-reduces -> {len(ar) + n_new} slices of <= {self.slice_mb} MB, "
                 f"{lat / 1e3:.1f} us latency each, {self.schedule} order on {len(lanes)} lane(s)")

    def _latency_ns(self, ctx) -> float:
        if self.latency_us >= 0:
            return self.latency_us * 1e3
        n = self.workers or world_size(ctx)
        if n > 1 and ctx.device.collective:
            return ctx.device.allreduce_ns(0, n)
        return float(ctx.device.op_overhead_ns)

    @staticmethod
    def _slice_all(g, ar, slice_bytes, lat):
        """Slice every all-reduce; returns (original -> its slices, number of new tasks)."""
        T = g.tasks
        groups = {}
        for t in ar.tolist():
            gid = int(T["group"][t])
            groups.setdefault(gid if gid >= 0 else -1 - t, []).append(t)
        slices, n_new = {}, 0
        for gid, members in groups.items():
            nbytes = int(T["bytes"][members].max())
            new_groups = None
            for t in members:
                durs, sizes = slice_durations(int(T["dur_ns"][t]), nbytes, slice_bytes, lat)
                if gid >= 0 and new_groups is None:
                    tr_durs, _ = slice_durations(int(g.group_transfer_ns[gid]), nbytes, slice_bytes, lat)
                    new_groups = _new_groups(g, gid, tr_durs)
                slices[t] = _split(g, t, durs, sizes, new_groups)
                n_new += len(durs) - 1
        return slices, n_new

    @staticmethod
    def _stream_order(g, ar, slices):
        """Waits and syncs after an all-reduce also wait for the slices of earlier all-reduces."""
        T, E = g.tasks, g.edges
        pos = lane_position(g)
        is_ar = np.zeros(g.n_tasks, bool)
        is_ar[list(slices)] = True
        m = is_ar[E["src"]] & np.isin(E["kind"], _STREAM_ORDER_EDGES)
        src, dst, anchors, targets, kinds = [], [], [], [], []
        by_lane, by_it = {}, {}
        for t in slices:
            by_lane.setdefault(int(T["lane"][t]), []).append(t)
            by_it.setdefault((int(T["lane"][t]), int(T["iteration"][t])), []).append(t)
        for i in np.flatnonzero(m).tolist():
            s, d = int(E["src"][i]), int(E["dst"][i])
            earlier = [o for o in by_it[(int(T["lane"][s]), int(T["iteration"][s]))] if pos[o] < pos[s]]
            for o in earlier:
                for x in slices[o]:
                    src.append(x), dst.append(d), kinds.append(int(E["kind"][i]))
                    anchors.append(int(E["anchor"][i])), targets.append(int(E["target"][i]))
        waits = np.flatnonzero(T["wait_kind"] != WaitKind.NONE)
        for w in waits.tolist():
            lanes = {int(T["wait_lane"][w])} if T["wait_kind"][w] == WaitKind.STREAM else set(by_lane)
            for lane in lanes & set(by_lane):
                for o in by_lane[lane]:
                    if (T["rank"][o] == T["rank"][w] and T["iteration"][o] == T["iteration"][w]
                            and 0 <= T["traced_start_ns"][o] < T["traced_start_ns"][w]):
                        for x in slices[o]:
                            src.append(x), dst.append(w), kinds.append(int(EdgeKind.SYNC))
                            anchors.append(1), targets.append(1)
        if src:
            g.add_edges(src, dst, kinds, anchor=anchors, target=targets)

    @staticmethod
    def _priorities(g, lane, slices):
        """Lower runs first: per iteration, the all-reduce whose gradients the next forward uses first."""
        T = g.tasks
        seq = g.lane_tasks[lane]
        originals = [t for t in seq if t in slices]
        fwd_rank = _forward_layer_order(g)
        per_it = {}
        for t in originals:
            per_it.setdefault(int(T["iteration"][t]), []).append(t)
        width = max(len(v) for v in per_it.values()) + 2
        set_priority(g, seq, [(int(T["iteration"][t]) + 1) * width for t in seq])   # others: first when ready
        for it, ts in per_it.items():
            layers = [int(T["layer"][t]) for t in ts]
            if all(x in fwd_rank for x in layers) and len(set(layers)) == len(layers):
                order = np.argsort([fwd_rank[x] for x in layers], kind="stable")
            else:
                order = np.arange(len(ts))[::-1]
            for prio, j in enumerate(order.tolist()):
                set_priority(g, slices[ts[j]], (it + 1) * width + 1 + prio)


def _forward_layer_order(g) -> dict:
    T = g.tasks
    fwd = np.flatnonzero((T["phase"] == Phase.FORWARD) & (T["layer"] >= 0))
    first = {}
    for t in fwd[np.argsort(T["traced_start_ns"][fwd], kind="stable")].tolist():
        first.setdefault(int(T["layer"][t]), len(first))
    return first


def _new_groups(g, gid, transfer_ns) -> list:
    """Collective group ids of the slices: the original for the first, new ones after."""
    g.group_transfer_ns[gid] = transfer_ns[0]
    first = len(g.group_transfer_ns)
    g.group_transfer_ns = np.concatenate([g.group_transfer_ns, np.asarray(transfer_ns[1:], np.int64)])
    return [gid] + list(range(first, first + len(transfer_ns) - 1))


def _split(g, t, durs, sizes, groups) -> list:
    """Task ``t`` becomes the first slice; the others follow it on its lane with copies of its edges."""
    T = g.tasks
    set_duration(g, [t], durs[0])
    T["bytes"][t] = sizes[0]
    k = len(durs) - 1
    if not k:
        return [t]
    cols = {c: np.repeat(T[c][t], k) for c in TASK_COLUMNS}
    cols.update(dur_ns=durs[1:], bytes=sizes[1:], gap_ns=np.zeros(k), event=np.full(k, -1),
                traced_start_ns=np.full(k, -1))
    if groups is not None:
        cols["group"] = groups[1:]
    new = g.add_tasks(**cols).tolist()
    seq = g.lane_tasks[int(T["lane"][t])]
    p = seq.index(t) + 1
    seq[p:p] = new
    E = g.edges
    for col_self, col_other in (("dst", "src"), ("src", "dst")):
        idx = np.flatnonzero(E[col_self] == t)
        if len(idx):
            rows = {c: np.tile(E[c][idx], k) for c in E}
            rows[col_self] = np.repeat(new, len(idx))
            g.add_edges(rows["src"], rows["dst"], rows["kind"], lag_ns=rows["lag_ns"], anchor=rows["anchor"],
                        target=rows["target"])
    return [t] + new


OPTIMIZATION = PriorityComm
