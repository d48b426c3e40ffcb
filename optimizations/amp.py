"""``amp``: automatic mixed precision (``torch.autocast``) in fp16 or bf16.

Model
-----
* Compute-bound tasks (matmul/convolution CPU ops with FLOPs from their
  shapes, GEMM/convolution kernels) in the forward and backward phases run
  at the device's throughput for the new dtype: each is scaled by
  ``t(dtype)/t(fp32)`` of the device's measured (or published) throughput
  curve *at that op's size*.  A device without fast low-precision math (most
  CPUs without AMX/avx512-bf16) therefore predicts a slowdown.
* Memory-bound tasks of the layers that contain compute ops move half the
  bytes, at the device's measured elementwise bandwidth for the new dtype.
* Casts: before each compute op in forward, autocast casts its inputs
  (inputs bytes read as fp32, written in the new dtype) -- one elementwise
  task each, at measured bandwidth plus one op's overhead; weight casts are
  cached for the backward.
* Loss scaling (fp16 only): an unscale and inf-check pass over the gradients
  each step (foreach ops: 2 passes over the parameter bytes).

Assumptions: the trace ran in fp32; optimizer and data loading stay fp32;
ops outside layers with compute ops (losses, norms in fp32 lists) are
unchanged; casts are not fused with the ops that consume them.
"""
from __future__ import annotations

import numpy as np

from daydream.cost import compute_mask, dtype_time_ratio, elementwise_ns
from daydream.model import EventKind, LaneKind, Phase
from daydream.primitives import insert, select

from ._common import OPTIMIZER_STEP_RE, by_rank_iteration
from .base import NotApplicable, Optimization, Param

__all__ = ["AMP", "OPTIMIZATION"]

_CONV_NAMES = ("conv", "cudnn", "implicit", "wgrad", "dgrad")


class AMP(Optimization):
    name = "amp"
    summary = "automatic mixed precision (torch.autocast) in bfloat16 or float16"
    params = (Param("dtype", "float16", "autocast dtype", str, ("float16", "bfloat16")),
              Param("cast_overhead", True, "insert the casts autocast performs", bool))
    assumptions = __doc__

    def apply(self, ctx):
        g, dev, dt = ctx.graph, ctx.device, self.dtype
        T = g.tasks
        in_model = np.isin(T["phase"], (Phase.FORWARD, Phase.BACKWARD))
        comp = compute_mask(g) & in_model
        if not comp.any():
            raise NotApplicable("the trace has no matmul/convolution work with known sizes; record op shapes "
                                "(daydream trace records them; torch.profiler(record_shapes=True))")
        self._scale_compute(g, dev, dt, np.flatnonzero(comp))
        self._scale_memory(g, dev, dt, comp, in_model)
        if self.cast_overhead:
            n = self._insert_casts(g, dev, np.flatnonzero(comp & (T["phase"] == Phase.FORWARD)))
            ctx.note(f"amp: {n} input casts inserted before forward compute ops")
        if dt == "float16":
            self._loss_scaling(ctx)

    @staticmethod
    def _is_conv(g, tasks):
        return np.array([any(k in g.task_name(t).lower() for k in _CONV_NAMES) for t in tasks], bool)

    def _scale_compute(self, g, dev, dt, tasks):
        T = g.tasks
        flops = T["flops"][tasks].astype(float)
        unknown = flops <= 0
        if unknown.any():     # GPU kernels: infer FLOPs from time at the fp32 rate (fixed point of t = f / rate(f))
            flops[unknown] = self._flops_from_time(dev, T["dur_ns"][tasks][unknown])
        ratio = dtype_time_ratio(dev, flops, "float32", dt, self._is_conv(g, tasks))
        T["dur_ns"][tasks] = np.rint(T["dur_ns"][tasks] * ratio).astype(np.int64)

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
            ratio = elementwise_ns(dev, nbytes / 2, dt) / elementwise_ns(dev, nbytes, "float32")
            T["dur_ns"][t] = int(round(T["dur_ns"][t] * ratio))

    @staticmethod
    def _insert_casts(g, dev, fwd_compute):
        T = g.tasks
        n, seen = 0, set()
        for t in fwd_compute.tolist():
            ev = (int(T["rank"][t]), int(T["event"][t]))
            if ev in seen or g.lanes[int(T["lane"][t])].kind != LaneKind.CPU_THREAD:
                continue
            seen.add(ev)
            nbytes = 1.5 * float(T["bytes"][t])          # read fp32, write half precision
            layer = int(T["layer"][t])
            insert(g, int(T["lane"][t]), dur_ns=int(elementwise_ns(dev, nbytes)), name="aten::_to_copy (autocast)",
                   before=t, phase=Phase.FORWARD, layer=g.layers[layer] if layer >= 0 else None,
                   iteration=int(T["iteration"][t]))
            n += 1
        return n

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


OPTIMIZATION = AMP
