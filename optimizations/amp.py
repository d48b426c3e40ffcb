"""``amp``: automatic mixed precision (``torch.autocast``) in fp16 or bf16.

Model
-----
* Compute-bound tasks (matmul/convolution CPU ops with FLOPs from their
  shapes, GEMM/convolution kernels) in the forward and backward phases run
  at the device's throughput for the new dtype.  On a CPU trace with
  recorded shapes each distinct op (same shapes and strides) is re-run on
  this machine in both dtypes (:mod:`daydream.opbench`); the task takes
  the re-run's time in the new dtype plus its in-training surplus over the
  fp32 re-run at half (the new dtype's share of the bytes): what the op
  costs in training beyond the re-run is its operands coming cold from
  memory (up to 3x a warm re-run of a weight-gradient matmul here), which
  is not arithmetic and does not grow with it (bf16 matmuls on a CPU
  without bf16 units take up to 60x fp32, and scaling the traced time by
  the re-runs' ratio over-predicted by up to 40 %), but shrinks with the
  bytes (adding the re-runs' difference to the traced time, as until
  session 18, over-predicted the bundled MLP's and transformer's bf16
  rows by 1-10 %).  A traced op faster than its re-run gains the
  re-runs' difference (:func:`_from_rerun`).  Otherwise each task is scaled by
  ``t(dtype)/t(fp32)`` from the device's throughput curves at its size.  A device without fast
  low-precision math (most CPUs without AMX/avx512-bf16) therefore predicts
  a slowdown.
* Memory-bound tasks of the layers that contain compute ops move half the
  bytes, at the device's measured elementwise bandwidth for the new dtype;
  copies (``copy_``, ``clone``, ``contiguous``) at its fp32 bandwidth, since
  they do no arithmetic in the dtype (a CPU without bf16 vector units runs
  bf16 elementwise arithmetic slower than fp32, not bf16 copies: the bundled
  CNN's ``contiguous`` copies in convolution backward took 0.61x in bf16 in
  training, where the bf16 curve gave 1.61x; session 31).
* Batch norm after a convolution (the first ``native_batch_norm`` in forward
  after a convolution on its thread, its channels the convolution's output
  channels) takes the convolution's low-precision output, which autocast does
  not cast back: on a CPU trace with shapes it is re-run here with that input
  in the new dtype (weight, bias and running statistics in fp32, as autocast
  leaves them) and gains the difference.  In session 17's CPU validation its
  bf16 kernel took 0.24x the fp32 one in training (2.50 -> 0.60 ms an iteration
  for the bundled CNN), not the 0.5x its bytes give.
* Casts: before each compute op in forward, autocast casts its inputs
  (inputs bytes read as fp32, written in the new dtype) -- one elementwise
  task each, at measured bandwidth plus one op's overhead (re-run here on a
  CPU trace with shapes); the gradients of the inputs after the first come
  back in fp32 in backward.  On a GPU trace a cast is a host call costing
  what the trace's own one-kernel ops cost on their thread, and a kernel
  (:mod:`optimizations._gpu_casts`), and only kernels are rescaled: a CPU op
  that launches them keeps its host time.
* Loss scaling (fp16 only): an unscale and inf-check pass over the gradients
  each step (foreach ops: 2 passes over the parameter bytes).

Assumptions: the trace ran in fp32; optimizer and data loading stay fp32;
ops outside layers with compute ops (losses, norms in fp32 lists) are
unchanged; casts are not fused with the ops that consume them.
"""
from __future__ import annotations

import json
import re

import numpy as np

from daydream.cost import compute_mask, dtype_time_ratio, elementwise_ns
from daydream.model import EventKind, LaneKind, Phase
from daydream.primitives import insert, select

from ._common import OPTIMIZER_STEP_RE, by_rank_iteration
from daydream.opbench import dtype_time_pairs

from ._gpu_casts import insert_gpu_casts
from ._layers import gpu_ranks, rerun_ratios, signatures_of, work_mask
from .base import NotApplicable, Optimization, Param

#: Same-dtype copies (``copy_``, ``clone``, ``contiguous``): data movement only.
_COPY_RE = re.compile(r"aten::(copy_|clone|contiguous)$")

__all__ = ["AMP", "OPTIMIZATION"]

_CONV_NAMES = ("conv", "cudnn", "implicit", "wgrad", "dgrad")


class AMP(Optimization):
    name = "amp"
    summary = "automatic mixed precision (torch.autocast) in bfloat16 or float16"
    params = (Param("dtype", "float16", "autocast dtype", str, ("float16", "bfloat16")),
              Param("cast_overhead", True, "insert the casts autocast performs", bool),
              Param("remeasure", True, "on CPU traces, re-run the traced compute ops and casts on this machine "
                    "(else use the device profile's curves)", bool))
    assumptions = __doc__

    def apply(self, ctx):
        g, dev, dt = ctx.graph, ctx.device, self.dtype
        T = g.tasks
        in_model = np.isin(T["phase"], (Phase.FORWARD, Phase.BACKWARD))
        comp = compute_mask(g) & in_model
        if not comp.any():
            raise NotApplicable("the trace has no matmul/convolution work with known sizes; record op shapes "
                                "(daydream trace records them; torch.profiler(record_shapes=True))")
        fwd_ops = np.flatnonzero(comp & (T["phase"] == Phase.FORWARD))
        work = work_mask(g)      # a GPU rank's CPU ops only launch: their time is the host's
        comp &= work
        measured = self._rerun_times(ctx, np.flatnonzero(comp))
        self._scale_compute(g, dev, dt, np.flatnonzero(comp), measured)
        self._scale_memory(g, dev, dt, comp, in_model & work)
        self._rerun_norms(ctx, np.flatnonzero(comp & (T["phase"] == Phase.FORWARD)))
        if self.cast_overhead:
            n = insert_gpu_casts(ctx, fwd_ops, _ITEMSIZE[dt])
            n += self._insert_casts(ctx, fwd_ops[~np.isin(T["rank"][fwd_ops], gpu_ranks(g))])
            ctx.note(f"amp: casts inserted for {n} forward compute ops (inputs in, weight gradients back)")
        if dt == "float16":
            self._loss_scaling(ctx)

    def _rerun_norms(self, ctx, fwd_compute) -> None:
        """Re-time the batch norms that take a convolution's low-precision output (module docstring)."""
        norms = _norms_after_convs(ctx, fwd_compute) if self.remeasure else []
        if not norms:
            return
        got = rerun_ratios(ctx, np.asarray(norms), lambda sigs: dtype_time_pairs(sigs, self.dtype,
                                                                                  ctx.device.threads or None),
                           "amp: {n} distinct batch norms after convolutions re-measured with " f"{self.dtype} input")
        T = ctx.graph.tasks
        for t, (old, new) in got.items():     # the op's slices (around nested calls) share the change
            part = np.flatnonzero((T["rank"] == T["rank"][t]) & (T["event"] == T["event"][t]))
            dur = T["dur_ns"][part].astype(float)
            new_dur = dur + (new - old) * dur / max(dur.sum(), 1.0)
            T["dur_ns"][part] = np.maximum(np.rint(new_dur), 1).astype(np.int64)

    @staticmethod
    def _is_conv(g, tasks):
        return np.array([any(k in g.task_name(t).lower() for k in _CONV_NAMES) for t in tasks], bool)

    def _rerun_times(self, ctx, tasks) -> dict:
        """task -> (t(fp32), t(dtype)) of its op re-run on this machine (CPU traces with shapes)."""
        if not self.remeasure:
            return {}
        return rerun_ratios(ctx, tasks, lambda sigs: dtype_time_pairs(sigs, self.dtype, ctx.device.threads or None),
                            "amp: {n} distinct compute ops re-measured in " f"{self.dtype} on this machine")

    def _scale_compute(self, g, dev, dt, tasks, measured):
        T = g.tasks
        flops = T["flops"][tasks].astype(float)
        unknown = flops <= 0
        if unknown.any():     # GPU kernels: infer FLOPs from time at the fp32 rate (fixed point of t = f / rate(f))
            flops[unknown] = self._flops_from_time(dev, T["dur_ns"][tasks][unknown])
        ratio = dtype_time_ratio(dev, flops, "float32", dt, self._is_conv(g, tasks))
        dur = T["dur_ns"][tasks].astype(float)
        new = np.array([_from_rerun(d, *measured[t], dt) if t in measured else d * r
                        for t, d, r in zip(tasks.tolist(), dur, ratio)])
        T["dur_ns"][tasks] = np.rint(np.maximum(new, 1.0)).astype(np.int64)

    @staticmethod
    def _flops_from_time(dev, dur_ns):
        f = np.maximum(dur_ns.astype(float), 1.0) * 1e-9 * dev.matmul_flops_per_s("float32", 1e9)
        for _ in range(4):
            f = dur_ns * 1e-9 * np.array([dev.matmul_flops_per_s("float32", x) for x in f])
        return np.maximum(f, 1.0)

    @staticmethod
    def _scale_memory(g, dev, dt, comp, in_model):
        T = g.tasks
        layers = np.unique(T["layer"][comp])
        mem = in_model & ~comp & np.isin(T["layer"], layers[layers >= 0]) & (T["kind"] != EventKind.MARKER)
        mem &= (T["bytes"] > 0) | np.isin(T["kind"], (EventKind.KERNEL,))
        for t in np.flatnonzero(mem):
            nbytes = float(T["bytes"][t]) or 1e6
            # a copy moves bytes and does no arithmetic in the dtype: the fp32 curve at half the bytes
            low = "float32" if _COPY_RE.match(g.task_name(t)) else dt
            ratio = elementwise_ns(dev, nbytes / 2, low) / elementwise_ns(dev, nbytes, "float32")
            T["dur_ns"][t] = int(round(T["dur_ns"][t] * ratio))

    def _insert_casts(self, ctx, fwd_compute):
        """Autocast casts each forward compute op's float inputs to the new dtype; the
        gradients of its weights (inputs after the first) come back in fp32 in backward.

        On CPU traces with shapes the casts are timed on this machine; otherwise
        they cost their bytes (read fp32, write half) at measured bandwidth."""
        g, dev = ctx.graph, ctx.device
        T = g.tasks
        sigs = self._signatures(ctx, fwd_compute)
        first_bwd = self._first_backward_by_layer(g)
        n, seen = 0, set()
        for t in fwd_compute.tolist():
            ev = (int(T["rank"][t]), int(T["event"][t]))
            if ev in seen or g.lanes[int(T["lane"][t])].kind != LaneKind.CPU_THREAD:
                continue
            seen.add(ev)
            fwd_ns, bwd_ns = self._cast_costs(dev, sigs.get(t), float(T["bytes"][t]))
            layer = int(T["layer"][t])
            name = g.layers[layer] if layer >= 0 else None
            it = int(T["iteration"][t])
            insert(g, int(T["lane"][t]), dur_ns=int(fwd_ns), name="aten::_to_copy (autocast)", before=t,
                   phase=Phase.FORWARD, layer=name, iteration=it)
            b = first_bwd.get((layer, it))
            if b is not None and bwd_ns:
                insert(g, int(T["lane"][b]), dur_ns=int(bwd_ns), name="aten::_to_copy (grad to fp32)", before=b,
                       phase=Phase.BACKWARD, layer=name, iteration=it)
            n += 1
        return n

    def _cast_costs(self, dev, sig, nbytes):
        if sig is not None:
            try:
                from daydream.heapmode import steady_heap
                from daydream.opbench import cast_ns, float_inputs

                dims = float_inputs(sig)
                with steady_heap():
                    fwd = sum(cast_ns(d, "float32", self.dtype) for d in dims)
                    bwd = sum(cast_ns(d, self.dtype, "float32") for d in dims[1:])
                return fwd, bwd
            except ImportError:
                pass
        return elementwise_ns(dev, 1.5 * nbytes), 0.0

    def _signatures(self, ctx, tasks) -> dict:
        if ctx.device.kind != "cpu" or not self.remeasure:
            return {}
        return signatures_of(ctx, tasks)

    @staticmethod
    def _first_backward_by_layer(g) -> dict:
        T = g.tasks
        out = {}
        for seq in g.lane_tasks:
            for t in seq:
                if T["phase"][t] == Phase.BACKWARD:
                    out.setdefault((int(T["layer"][t]), int(T["iteration"][t])), t)
        return out

    @staticmethod
    def _loss_scaling(ctx):
        g, dev = ctx.graph, ctx.device
        pbytes = (ctx.meta().get("optimizer") or {}).get("param_bytes")
        steps = select(g, layer=OPTIMIZER_STEP_RE)
        if not pbytes or not len(steps):
            ctx.note("amp: loss-scaling cost not modelled (no optimizer step or parameter sizes in the trace)")
            return
        for (rank, it), tasks in by_rank_iteration(g, steps).items():
            first = tasks[0]
            insert(g, int(g.tasks["lane"][first]), dur_ns=int(2 * elementwise_ns(dev, pbytes)),
                   name="GradScaler unscale_ + inf check", before=first, phase=Phase.OPTIMIZER, iteration=it)


def _norms_after_convs(ctx, fwd_compute) -> list:
    """Forward ``native_batch_norm`` tasks that take a convolution's output: on each CPU thread the
    first one after a convolution with no other compute op between, its input's channels (dim 1)
    the convolution's output channels (its weight's dim 0).  Needs op shapes; ``[]`` without."""
    g = ctx.graph
    T = g.tasks
    convs = fwd_compute[AMP._is_conv(g, fwd_compute)]
    if not len(convs):
        return []
    comp = np.zeros(g.n_tasks, bool)
    comp[fwd_compute] = True
    sig = signatures_of(ctx, np.flatnonzero(T["phase"] == Phase.FORWARD))
    out, is_conv = [], set(convs.tolist())
    for lane in {int(T["lane"][t]) for t in convs}:
        channels = None     # output channels of the last convolution, until another compute op
        for t in g.lane_tasks[lane]:
            if comp[t]:
                channels = _dim(sig.get(t), 1, 0) if t in is_conv else None
            elif channels is not None and g.task_name(t) == "aten::native_batch_norm":
                if _dim(sig.get(t), 0, 1) == channels:
                    out.append(t)
                channels = None
    return out


#: Bytes per element of the dtypes amp moves between.
_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4}


def _from_rerun(traced_ns: float, old_ns: float, new_ns: float, dtype: str) -> float:
    """A compute op's time in ``dtype`` from its traced time and its re-runs here in fp32 and ``dtype``.

    The re-run's time in the new dtype, plus the op's in-training surplus over its fp32 re-run
    (operands fetched cold from memory, which the re-run finds in cache) at the share of the bytes
    the new dtype moves.  Where the traced op took less than its re-run (the re-run covers work
    the trace times as separate ops: a backend convolution re-run as its portable op, with its
    layout conversions), the difference is kept whole.

    >>> _from_rerun(1000.0, 600.0, 300.0, "bfloat16"), _from_rerun(500.0, 600.0, 300.0, "bfloat16")
    (500.0, 200.0)
    """
    surplus = traced_ns - old_ns
    return new_ns + max(surplus, 0.0) * _ITEMSIZE[dtype] / _ITEMSIZE["float32"] + min(surplus, 0.0)


def _dim(signature, arg: int, axis: int):
    """Size of ``axis`` of input ``arg`` in an op signature (None where unknown)."""
    if signature is None:
        return None
    dims = json.loads(signature)[1]
    return dims[arg][axis] if arg < len(dims) and len(dims[arg]) > axis else None


OPTIMIZATION = AMP
