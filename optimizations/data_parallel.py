"""``data-parallel``: N data-parallel workers with DDP-style bucketed, overlapped all-reduce.

Model
-----
Each worker runs the traced iteration (same per-worker batch).  Gradients
are grouped into buckets of ``bucket_mb`` (the first one 1 MiB) in the order
their gradients become ready, as DDP does; a bucket is ready when the backward of the last module that
contributes to it ends.  Its all-reduce is a task on a new ``all-reduce``
lane per rank, lasting the device's ring all-reduce time for the bucket
(``2 (N-1)/N * bytes / bandwidth + 2 (N-1) * latency`` with the calibrated or
published collective figures of ``backend``), and the optimizer step waits
for the last one.  DDP's copies of gradients into the flat bucket buffers
(divided by the world size on the way) and back into ``.grad`` once reduced
are CPU tasks on the thread that runs backward: copy-in when the bucket is
ready, copy-out at the end of backward (before the optimizer step), each a
read and a write of its bytes at the device's streaming bandwidth from memory
(:meth:`~daydream.device.DeviceProfile.stream_bw_bytes_per_s`): a bucket is
touched once an iteration, so it is never in cache, whatever its size.
``overlap=false`` starts all all-reduces after backward.

DDP's own CPU time, where the device profile measured it (``ddp_call_ns``,
``ddp_tensor_ns``: ``daydream calibrate`` wraps tiny models in DDP in a
one-rank gloo group and times them against the plain ones, under the
profiler): per iteration, a forward part before the first forward op (its
wrapper) and a backward part before the optimizer step (its finalize), and
per parameter tensor a forward part and a backward part, the latter with the
copy-in of the tensor's bucket (its autograd hook, the copy, the hand-over
of the bucket's all-reduce).  Without those figures each tensor's copy-in
and copy-out cost one op's overhead (DDP copies one tensor at a time).

Buffers (BatchNorm running statistics; ``buffer_bytes`` of the module
table) are broadcast from rank 0 at the start of every forward, as DDP does
by default (``broadcast_buffers``): blocking collectives on the training
thread, one per dtype of the buffers (``buffer_dtypes``; one where the trace
does not record them), each lasting half a ring all-reduce of its share of
the bytes (one pass around the ring).

On a CPU device, gloo's reduction needs a core: when the machine has no
spare core per worker (cores - workers x threads < workers, from the trace
metadata), the all-reduces run in turn with the training thread instead of
overlapping it.  gloo's threads then sleep while the training thread
computes, and the collectives the ranks reach from compute (the last
bucket's all-reduce, which the step waits for, and the first buffer
broadcast) also pay their wake-up: the device profile's ``collective_wake``
(``daydream calibrate``: a small all-reduce after 5 ms of compute against
back to back, ranks pinned a core each).  Buckets reduced while backward
goes on are charged without it.

On a CPU device the workers share one host: the traced thread work (ops
and the Python gaps between them) runs at the co-run rate
(:mod:`optimizations._corun`; ``corun=profile``, the default: the device
profile's matmul-beside-matmul figure; ``corun=trace``: one traced
iteration's compute- and memory-bound ops re-run beside a twin replaying
them on another core, each phase's work at its own rate, as ``pipeline``
does by default; ``corun=compute``: one rate of the compute ops alone; 1.0
where the cores do not slow each other).  The default is the profile's figure because the trace's
re-run has not yet been shown to help here: in its one validation run the
MLP's row went from 5-8 % low to 25.7 % high, its measurement having caught
the VM in a spell where two busy cores run at 0.55-0.6x each (about one
measurement in five).

Workers run at the same mean speed but not in lockstep: before the last
all-reduce of an iteration each waits for the slowest of the N, the expected
wait computed from the traced rank's own iteration-to-iteration spread and,
where the device profile measured it, the lasting speed difference of
processes started together (``process_spread``)
(``optimizations._stragglers``; ``stragglers=false`` leaves it out).

Assumptions: parameter sizes per module come from the trace's module table
(``daydream trace``); workers are identical but vary independently from one
iteration to the next as the traced one does; with a spare core, the
collective does not slow the computation it overlaps with.  Without one,
the all-reduce is charged in line, at the calibrated time of an all-reduce
between two ranks pinned to a core each (gloo's threads then share the
rank's core, as in ``--pin-cores`` runs), and the ops around it keep their
times: on a 2-core CPU host the validation MLP's real 2-rank job ran the
ops this leaves unchanged 1.2-1.35x their baseline time (`untouched_ratio`)
while gloo reduced on the same core, and both co-run probes read 1.0.  That
row read 11-18 % low with an all-reduce calibrated on free ranks (session
13), 5.1 % high and 7.3 % low with pinned ones (session 14).
"""
from __future__ import annotations

import numpy as np

from daydream.cost import cold_pass_ns
from daydream.model import Lane, LaneKind, Phase
from daydream.primitives import insert, select

from ._common import OPTIMIZER_STEP_RE, by_rank_iteration, module_table, param_tensors
from ._corun import PHASE_SOURCES, corun_rates, slow_thread_work
from ._stragglers import wait_for_stragglers
from .base import NotApplicable, Optimization, Param

__all__ = ["DataParallel", "OPTIMIZATION", "buckets", "param_copy_ns"]


#: Names of the inserted tasks for DDP's own CPU time (device profile ``ddp_call_ns`` / ``ddp_tensor_ns``).
DDP_FORWARD = "DDP: forward wrapper"
DDP_BACKWARD = "DDP: hooks and hand-overs"

#: DDP closes its first bucket at 1 MiB (torch.distributed._DEFAULT_FIRST_BUCKET_BYTES)
#: so that communication starts early.
FIRST_BUCKET_BYTES = 1 << 20


def buckets(sizes, bucket_bytes: int, first_bytes: int | None = None) -> list:
    """Group (name, bytes) in the given order into buckets of about ``bucket_bytes``.

    >>> buckets([("c", 6), ("b", 6), ("a", 6)], 10)
    [['c', 'b'], ['a']]
    >>> buckets([("c", 6), ("b", 6), ("a", 6)], 10, first_bytes=5)
    [['c'], ['b', 'a']]
    """
    out, cur, size = [], [], 0
    for name, b in sizes:
        cur.append(name)
        size += b
        if size >= (first_bytes if first_bytes and not out else bucket_bytes):
            out.append(cur)
            cur, size = [], 0
    if cur:
        out.append(cur)
    return out


def param_copy_ns(dev, row: dict, per_tensor_ns: float | None = None) -> float:
    """DDP's copy of one module's gradients into (or out of) its bucket: ``per_tensor_ns`` per
    parameter tensor (the device's op overhead by default: DDP copies one tensor at a time) plus a
    read and a write of the bytes from memory (:func:`daydream.cost.cold_pass_ns`).

    ``row`` is the module's entry in the trace's module table; without
    ``param_shapes`` its parameters count as one tensor.

    >>> from daydream.device import Curve, DeviceProfile
    >>> dev = DeviceProfile("x", "cpu", {}, {"float32": Curve(((1e3, 1e9), (1e8, 1e10)))}, 2000)
    >>> param_copy_ns(dev, {"param_bytes": 5000, "param_shapes": [[1000], [250]]})
    5000.0
    >>> param_copy_ns(dev, {"param_bytes": 5000})
    3000.0
    >>> param_copy_ns(dev, {"param_bytes": 5000, "param_shapes": [[1000], [250]]}, per_tensor_ns=0)
    1000.0
    """
    nbytes = float(row.get("param_bytes") or 0)
    if nbytes <= 0:
        return 0.0
    per = dev.op_overhead_ns if per_tensor_ns is None else per_tensor_ns
    return per * max(1, param_tensors(row)) + cold_pass_ns(dev, nbytes, 0)


class DataParallel(Optimization):
    name = "data-parallel"
    summary = "N data-parallel workers, gradients all-reduced in buckets overlapped with backward (DDP)"
    params = (Param("workers", 8, "number of workers", int),
              Param("bucket_mb", 25.0, "DDP bucket size in MB"),
              Param("backend", "auto", "collective figures to use: auto, gloo, nccl", str, ("auto", "gloo", "nccl")),
              Param("overlap", True, "overlap all-reduce with backward", bool),
              Param("corun", "profile", "CPU: workers on one host's cores compute at the co-run rate of the "
                    "device profile (profile), of the trace's own ops re-run beside a twin, per phase (trace) or "
                    "one rate of the compute ops (compute), or alone (off)", str, PHASE_SOURCES),
              Param("broadcast_buffers", True, "broadcast module buffers from rank 0 every forward (DDP default)",
                    bool),
              Param("stragglers", True, "wait at each iteration's last all-reduce for the slowest worker, from "
                    "the trace's own iteration-to-iteration spread and the profile's process_spread", bool))
    assumptions = __doc__

    def apply(self, ctx):
        if self.workers < 1:
            raise NotApplicable("workers must be at least 1")
        g, dev = ctx.graph, ctx.device
        table = module_table(ctx, "data-parallel")
        params = [(p, m["param_bytes"]) for p, m in table.items() if m.get("param_bytes")]
        if not params:
            raise NotApplicable("the module table lists no parameters")
        backend = None if self.backend == "auto" else self.backend
        order = self._grad_order(g, [p for p, _ in params])
        sizes = dict(params)
        groups = buckets([(p, sizes[p]) for p in order], int(self.bucket_mb * (1 << 20)),
                         min(FIRST_BUCKET_BYTES, int(self.bucket_mb * (1 << 20))))
        ddp = self._ddp_costs(ctx, table)
        copy_ns_of = {p: param_copy_ns(dev, table[p], dev.ddp_tensor_ns[1] if ddp else None) for p in order}
        copy_out_of = {p: param_copy_ns(dev, table[p], 0 if ddp else None) for p in order}
        self._corun(ctx)
        steps = select(g, layer=OPTIMIZER_STEP_RE)
        step_first = {k: v[0] for k, v in by_rank_iteration(g, steps).items()}
        comm, barriers = {}, []
        shares_core = self._collectives_share_core(ctx)
        wake = int(dev.collective_wake_ns(backend or "gloo")) if shares_core else 0
        for (rank, it), first in step_first.items():
            lane = comm.get(rank)
            if lane is None:
                lane = comm[rank] = g.add_lane(Lane(rank, LaneKind.COMM, f"rank {rank}", "all-reduce", "all-reduce"))
            reduced = []
            for b in groups:
                nbytes = sum(sizes[p] for p in b)
                ready = self._ready_task(g, b, rank, it, first)
                copy_ns = int(sum(copy_ns_of[p] for p in b))
                bwd_lane = int(g.tasks["lane"][ready])
                cp = insert(g, bwd_lane, dur_ns=copy_ns, name="DDP bucket copy", after=ready,
                            phase=Phase.BACKWARD, iteration=it)
                dur = int(dev.allreduce_ns(nbytes, self.workers, backend))
                if b is groups[-1]:   # the one the step waits for: the ranks reach it from compute
                    dur += wake
                if shares_core:   # the reduction runs on the core the training thread needs
                    ar = insert(g, bwd_lane, dur_ns=dur, name="all-reduce", kind=6, phase=Phase.BACKWARD,
                                iteration=it, after=cp, bytes_=nbytes)
                else:
                    ar = insert(g, lane, dur_ns=dur, name="all-reduce", kind=6, phase=Phase.BACKWARD,
                                iteration=it, deps=[cp], bytes_=nbytes)
                reduced.append((ar, int(sum(copy_out_of[p] for p in b))))
            barriers.append((ready, ar))   # the last bucket's all-reduce: every worker has finished backward
            step_lane = int(g.tasks["lane"][first])
            for ar, copy_ns in reduced:   # DDP's finalize: reduced buckets copied back into .grad
                insert(g, step_lane, dur_ns=copy_ns, name="DDP bucket copy-out", before=first,
                       phase=Phase.BACKWARD, iteration=it, deps=[ar])
            if ddp:
                insert(g, step_lane, dur_ns=int(dev.ddp_call_ns[1]), name=DDP_BACKWARD, before=first,
                       phase=Phase.BACKWARD, iteration=it)
        if ddp:
            fwd_ns = dev.ddp_call_ns[0] + dev.ddp_tensor_ns[0] * self._tensors(table)
            self._before_forward(g, int(fwd_ns), DDP_FORWARD)
        if self.broadcast_buffers:
            self._broadcast_buffers(g, dev, table, backend, wake)
        if self.stragglers:
            wait_for_stragglers(ctx, barriers, self.workers, "data-parallel")
        ctx.workers = self.workers
        if not comm:
            raise NotApplicable("the trace has no optimizer step inside its iterations to synchronise on")
        ctx.note(f"data-parallel: {len(groups)} bucket(s) of <= {self.bucket_mb} MB, {self.workers} workers, "
                 f"{sum(sizes.values()) / 1e6:.2f} MB of gradients per step")

    def _broadcast_buffers(self, g, dev, table: dict, backend, wake_ns: int = 0) -> None:
        """DDP's buffer broadcast: blocking collectives before each iteration's forward, one per
        dtype of the buffers (``buffer_dtypes`` of the module table; one where the trace does not
        say), as ``_broadcast_coalesced`` flattens tensors of one dtype together; the first also
        pays ``wake_ns`` (the ranks reach it from compute)."""
        nbytes = sum(m.get("buffer_bytes") or 0 for m in table.values())
        if nbytes <= 0 or self.workers <= 1:
            return
        groups = max(1, len({d for m in table.values() for d in m.get("buffer_dtypes") or ()}))
        dur = int(dev.allreduce_ns(nbytes / groups, self.workers, backend) / 2)
        for i in range(groups):
            self._before_forward(g, dur + (wake_ns if i == 0 else 0), "DDP: broadcast buffers", kind=6,
                                 bytes_=int(nbytes / groups))

    @staticmethod
    def _before_forward(g, dur_ns: int, name: str, kind: int | None = None, bytes_: int = 0) -> None:
        """A task on the training thread just before each iteration's first forward op."""
        fwd = select(g, phase="forward", lane="cpu_thread")
        for (rank, it), tasks in by_rank_iteration(g, fwd[g.tasks["iteration"][fwd] >= 0]).items():
            first = tasks[int(np.argmin(g.tasks["traced_start_ns"][tasks]))]
            insert(g, int(g.tasks["lane"][first]), dur_ns=dur_ns, name=name, kind=kind, phase=Phase.FORWARD,
                   iteration=it, before=first, bytes_=bytes_)

    @staticmethod
    def _tensors(table) -> int:
        """Parameter tensors of the modules with parameters (one where a row lists no shapes)."""
        return sum(param_tensors(m) for m in table.values() if m.get("param_bytes"))

    @staticmethod
    def _ddp_costs(ctx, table) -> bool:
        """Whether the device profile measured DDP's own CPU time (``ddp_call_ns``, ``ddp_tensor_ns``)."""
        dev = ctx.device
        if not (any(dev.ddp_call_ns) or any(dev.ddp_tensor_ns)):
            ctx.note("data-parallel: the device profile has no DDP overhead figures (ddp_call_ns, ddp_tensor_ns); "
                     "DDP's copies cost one op each (`daydream calibrate` measures them)")
            return False
        tensors = DataParallel._tensors(table)
        per_it = sum(dev.ddp_call_ns) + tensors * sum(dev.ddp_tensor_ns)
        ctx.note(f"data-parallel: DDP's own CPU time {per_it / 1e6:.2f} ms per iteration ({tensors} parameter "
                 "tensors; the profile's 1-rank figures)")
        return True

    def _corun(self, ctx) -> None:
        """On a CPU the workers run on one host at once: their thread work runs at the co-run rate."""
        rates = corun_rates(ctx, self.corun) if self.workers > 1 else {None: 1.0}
        slow_thread_work(ctx, rates, f"data-parallel: {self.workers} workers", self.corun)

    def _collectives_share_core(self, ctx) -> bool:
        """On a CPU, gloo reduces with CPU cores: without a spare core per worker, the
        all-reduce cannot overlap the training thread (it time-shares its core)."""
        if ctx.device.kind != "cpu":
            return False
        cpu = (ctx.meta().get("device") or {}).get("cpu") or {}
        cores, threads = cpu.get("logical_cores"), cpu.get("torch_threads") or ctx.device.threads or 1
        if not cores:
            return False
        shares = cores - self.workers * threads < self.workers
        if shares:
            ctx.note(f"data-parallel: {cores} cores for {self.workers} workers x {threads} threads: "
                     f"all-reduces time-share the training threads' cores (no overlap)")
        return shares

    @staticmethod
    def _grad_order(g, paths):
        """Parameters in the order their gradients become ready: backward end time, latest last."""
        T = g.tasks
        bwd = T["phase"] == Phase.BACKWARD
        end = {}
        pos = np.zeros(g.n_tasks, np.int64)
        for seq in g.lane_tasks:
            pos[np.asarray(seq, np.int64)] = np.arange(len(seq))
        for p in paths:
            lid = g.layers.get(p)
            sel = np.flatnonzero(bwd & (T["layer"] == lid)) if lid >= 0 else []
            end[p] = -int(pos[sel].max()) if len(sel) else 0
        return sorted(paths, key=lambda p: end[p])

    def _ready_task(self, g, bucket, rank, it, step_first):
        """The backward task after which the bucket's gradients are all ready."""
        T = g.tasks
        if not self.overlap:
            return self._last_backward(g, rank, it, step_first)
        lids = [g.layers.get(p) for p in bucket]
        sel = np.flatnonzero((T["phase"] == Phase.BACKWARD) & (T["rank"] == rank) & (T["iteration"] == it)
                             & np.isin(T["layer"], [x for x in lids if x >= 0])
                             & np.array([g.lanes[l].kind == LaneKind.CPU_THREAD for l in T["lane"]]))
        if not len(sel):
            return self._last_backward(g, rank, it, step_first)
        lane = int(T["lane"][sel[0]])
        want = set(sel.tolist())
        return [t for t in g.lane_tasks[lane] if t in want][-1]

    @staticmethod
    def _last_backward(g, rank, it, step_first):
        T = g.tasks
        seq = g.lane_tasks[int(T["lane"][step_first])]
        i = seq.index(step_first)
        return seq[i - 1] if i > 0 else step_first


OPTIMIZATION = DataParallel
