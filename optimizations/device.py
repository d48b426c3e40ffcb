"""``device``: what if this ran on device X (another GPU, another CPU profile).

Model
-----
Every work task of the trace (GPU kernels of GPU ranks, CPU ops of CPU-only
ranks) is classified, then rescaled by the ratio of the source device's
figures to the target's:

* **compute-bound** -- GEMM/convolution kernels (cuBLAS/cuDNN/CUTLASS names),
  and any task whose arithmetic intensity ``flops / bytes`` (when both are
  known) lies above the source device's ridge point ``peak FLOP/s / peak
  bytes/s``: time x ``rate_src(dtype, f) / rate_dst(dtype, f)`` with the
  matmul (convolution) throughput curves at the task's FLOPs ``f`` (a GPU
  kernel without FLOPs is assumed to run at the source's rate:
  ``f = t * rate_src``).  The dtype is read from the kernel name (``bf16``,
  ``f16``/``h884``-style tensor-core names) and is float32 otherwise.
* **memory-bound** -- other kernels and memsets, CPU ops with bytes: time x
  ``bw_src(b) / bw_dst(b)`` with the streaming-bandwidth curves at the
  task's bytes ``b``.
* **communication** -- NCCL kernels: time x the ratio of the collective bus
  bandwidths.
* **unchanged** -- host-side work of GPU traces (Python, dispatch, launches),
  host<->device copies (PCIe, not in the profiles), CPU ops without FLOPs or
  bytes (dispatch), and every gap.

Source figures are those of the device the trace ran on (the published specs
of the GPU it names, or this machine's calibrated CPU profile); the target is
a name of the published table or a profile JSON (``daydream calibrate -o``).

When the target is a CPU profile measured on this machine (its ``source``
names this host) at another intra-op thread count, and the trace was
recorded with shapes (``remeasure=1``, the default), each distinct op whose
call signature the loader kept -- ops with FLOPs or input bytes (matrix
products, convolutions, element-wise ops and their backward;
``keeps_signature`` in :mod:`daydream.loader.shapes`) -- is instead re-run
here at both thread counts, in turns
(:func:`daydream.opbench.thread_time_ratios`), and the measured ratio scales
it: how an op's time divides over threads depends on its shape and kind far
more than the calibration's matmul and streaming curves can say (the MLP's
optimizer ``add_`` at 2 threads: x0.69 by the profiles' bandwidth, x0.80-0.89
re-run in sequence).  With ``in_sequence`` (the default) the ops are re-run in
the order of one traced iteration, at one thread count and then at the other
(:func:`daydream.opseq.sequence_ratios`), so each finds the caches as its
iteration leaves them: an op timed alone in a loop finds its operands in
cache and divides over threads better than it does in training.  With
``chained`` (the default) each op of the sequence reads what it read in
training: on two threads part of what an op reads was written by the other
core, and how much that costs follows where the host puts the two vCPUs (the
transformer's ``gelu_backward`` after its 2-thread ``mm``: x0.56-0.57 on
operands of its own, x0.70 and x1.27 chained, minutes apart).  Where the trace
recorded its data flow (``daydream trace``'s shape iteration,
:mod:`daydream.collect.flow`; ``flow``, the default) each argument is the
tensor the trace names (:func:`daydream.opseq.flow_calls`); otherwise it is
the output of a recent op of its layout (:func:`daydream.opseq.chain_calls`),
a guess that went wrong for the backward's reads of saved activations and
weights (session 66).  Along the flow, with ``recycle`` (the default), the
outputs that training placed at one address are written into one buffer
(through each op's ``out=`` kernel), so that an output finds its memory as its
previous occupant left it: on two threads a recycled chunk the other core
wrote last costs the writer its lines (session 44), and a fresh allocation in
the re-run did not reproduce that.  The optimizer's in-place ops
then update each parameter's state and last the parameter itself, which two
threads have read, reading its gradient as a backward op of its layer wrote
it (:func:`optimizations._sequence.optimizer_keys`; the MLP's update ``add_``
re-ran x1.04 where it had read x0.69, real x2.81 with the cores 330 ns
apart; the gradient is the weight-gradient op's output, not a view of the
weight after it: :func:`daydream.opseq.chain_calls`), and each signature's
ratio weighs its occurrences by their time:
with the cores 330 ns apart the first update of each weight took x5 at 2
threads and the others x0.9.  With ``warm`` (the default, since session 74)
each thread count's timed pass follows an untimed pass of its own, as a
training iteration follows the one before it: straight after the 1-thread
pass, the 2-thread pass ran the transformer's first layer at x0.97-1.34 of
its 1-thread time (its worker's caches cold) where training runs it at about
x0.63; in blocks in turns with training, the re-run's ops read x0.700
against training's x0.643, warmed x0.660 (``benchmarks/device_warm.py``).

Assumptions and limits: kernels stay the same kernels (no new algorithm
choice, no TF32 on a GPU that lacks it, same fusion); published peaks are
scaled by one achievable fraction for all GPUs, so ratios between GPUs are
ratios of datasheet peaks; launch-bound tiny kernels scale as if they were
bandwidth-bound; a GPU trace cannot be mapped onto a CPU or the reverse.
"""
from __future__ import annotations

import functools
import os
import re

import numpy as np

from daydream.corelink import span_text
from daydream.cost import GPU_COMPUTE_KERNEL_RE
from daydream.device import load_profile
from daydream.errors import DaydreamError
from daydream.model import EventKind
from daydream.opbench import thread_time_ratios
from daydream.published import published

from ._layers import op_figures, rerun_ratios, work_mask
from ._sequence import iteration_sequence
from .base import NotApplicable, Optimization, OptionError, Param

__all__ = ["Device", "OPTIMIZATION", "target_profile", "kernel_dtype", "Boundness", "placements_note"]

_BF16 = re.compile(r"(?i)bf16|bfloat16")
_FP16 = re.compile(r"(?i)fp16|f16|half|hmma|h884|h1688|h16816|s884|s1688|s16816|tensorop_h")
_CONV = re.compile(r"(?i)conv|cudnn|implicit|wgrad|dgrad")


class Boundness:
    """Task categories (values of the ``class`` array :meth:`Device.classify` returns)."""

    UNCHANGED, COMPUTE, MEMORY, COMM = 0, 1, 2, 3


def kernel_dtype(name: str) -> str:
    """Arithmetic dtype suggested by a kernel's name.

    >>> kernel_dtype("volta_h884gemm_64x64_nn"), kernel_dtype("ampere_sgemm_128x64_tn")
    ('float16', 'float32')
    """
    return "bfloat16" if _BF16.search(name) else "float16" if _FP16.search(name) else "float32"


def target_profile(spec: str):
    """The target device: a profile JSON path, or a name of the published table."""
    if not spec:
        raise OptionError("device: give target=NAME (V100, A100, H100, H200, RTX2080TI) or target=PROFILE.json")
    if spec.endswith(".json") or os.path.sep in spec:
        prof = load_profile(os.path.expanduser(spec))
        if prof is None:
            raise OptionError(f"device: no profile file {spec!r}")
        return prof
    try:
        return published(spec)
    except DaydreamError as exc:
        raise OptionError(f"device: {exc}") from None


def _peak(curves: dict) -> float:
    return max(y for c in curves.values() for _, y in c.points)


def placements_note(src, dst) -> str:
    """Where the cores were when each CPU profile was measured (their ``core_to_core_ns``), for the
    what-if's note: on a VM whose host moves its cores, profiles from two placements describe two
    machines (docs/validation-log.md, "Session 23").  ``''`` when neither was probed.

    >>> from types import SimpleNamespace as P
    >>> placements_note(P(core_to_core_ns=(91.0, 95.0)), P(core_to_core_ns=(330.0, 341.0)))
    '; cores 91-95 ns apart while the source profile was measured, 330-341 ns apart while the target was'
    """
    if not (src.core_to_core_ns or dst.core_to_core_ns):
        return ""
    a, b = (f"{span_text(p.core_to_core_ns)} apart" if p.core_to_core_ns else "not probed" for p in (src, dst))
    return f"; cores {a} while the source profile was measured, {b} while the target was"


class Device(Optimization):
    name = "device"
    summary = "run on another device: compute-bound work scaled by matmul throughput, memory-bound by bandwidth"
    params = (Param("target", "", "published device name (V100, A100, H100, H200, RTX2080TI) or a profile JSON", str),
              Param("remeasure", True, "target a CPU profile of this machine at another thread count: re-run each "
                    "op of a trace with shapes at both thread counts", bool),
              Param("in_sequence", True, "re-run the ops as one traced iteration's sequence (each finds the caches "
                    "as the rest of the iteration leaves them), not each alone in a loop", bool),
              Param("chained", True, "in sequence, each op reads the output of a recent op of its layout (the "
                    "data flow: on two threads part of it was written by the other core)", bool),
              Param("flow", True, "chained, each op reads the tensor it read in training where the trace "
                    "recorded its data flow (`daydream trace`); false: the latest output of its layout", bool),
              Param("recycle", True, "along the flow, outputs that training placed at one address share one "
                    "buffer (each finds its memory as its previous writer left it); false: each its own", bool),
              Param("warm", True, "in sequence, each thread count's timed pass follows an untimed pass of its own, "
                    "as a training iteration follows the one before (false: the other thread count's pass)", bool))
    assumptions = __doc__

    def apply(self, ctx):
        src, dst = ctx.device, target_profile(self.target)
        g = ctx.graph
        T = g.tasks
        gpu_trace = bool(np.isin(T["kind"], (EventKind.KERNEL,)).any())
        if gpu_trace != (dst.kind == "gpu"):
            have = "a GPU" if gpu_trace else "a CPU"
            raise NotApplicable(f"device: {have} trace cannot be mapped onto {dst.kind.upper()} device {dst.name!r}")
        cls, flops, nbytes = self.classify(ctx)
        before = T["dur_ns"].astype(float).copy()
        ratio = np.ones(g.n_tasks)
        for t in np.flatnonzero(cls != Boundness.UNCHANGED).tolist():
            ratio[t] = self._ratio(src, dst, int(cls[t]), g.task_name(t), float(flops[t]), float(nbytes[t]),
                                   float(before[t]))
        for t, r in self._rerun(ctx, dst, cls).items():
            ratio[t] = r
        T["dur_ns"][:] = np.rint(before * ratio).astype(np.int64)
        for c, label in ((Boundness.COMPUTE, "compute"), (Boundness.MEMORY, "memory"), (Boundness.COMM, "comm")):
            m = cls == c
            ctx.metrics[f"{label}_bound_tasks"] = int(m.sum())
            if before[m].sum():
                ctx.metrics[f"{label}_time_ratio"] = float(T["dur_ns"][m].sum() / before[m].sum())
        ctx.note(f"device: {src.name} -> {dst.name} ({dst.source}); "
                 f"{int((cls == Boundness.COMPUTE).sum())} compute-bound, {int((cls == Boundness.MEMORY).sum())} "
                 f"memory-bound, {int((cls == Boundness.COMM).sum())} communication tasks rescaled"
                 f"{placements_note(src, dst)}")

    def _rerun(self, ctx, dst, cls) -> dict:
        """task -> t(target threads) / t(traced threads) of its op re-run here (see the module doc)."""
        if not (self.remeasure and dst.kind == "cpu" and dst.threads and dst.measured_here):
            return {}
        cpu = (ctx.meta().get("device") or {}).get("cpu") or {}
        threads = int(cpu.get("torch_threads") or ctx.device.threads or 0)
        if not threads or threads == dst.threads:
            return {}
        tasks = np.flatnonzero(np.isin(cls, (Boundness.COMPUTE, Boundness.MEMORY)))
        seq = iteration_sequence(ctx, tasks, shared=True) if self.in_sequence else None
        if seq and not self.flow:
            seq = [(sig, keys, grads, None) for sig, keys, grads, _ in seq]
        ratios = functools.partial(thread_time_ratios, threads=threads, to_threads=dst.threads, sequence=seq,
                                   chained=self.chained, recycle=self.recycle, warm=self.warm)
        return rerun_ratios(ctx, tasks, ratios,
                            f"device: {{n}} distinct ops re-run here at {threads} and {dst.threads} threads")

    @staticmethod
    def classify(ctx):
        """Per task: a :class:`Boundness` value, FLOPs and bytes (0 where unknown)."""
        g, src = ctx.graph, ctx.device
        T = g.tasks
        flops, nbytes, _ = op_figures(ctx)
        work = work_mask(g)
        kind = T["kind"]
        names = np.array([GPU_COMPUTE_KERNEL_RE.search(s) is not None for s in g.names.strings] + [False], bool)
        named_compute = (kind == EventKind.KERNEL) & names[np.where(T["name"] >= 0, T["name"], len(names) - 1)]
        ridge = _peak(src.matmul) / _peak(src.elementwise)
        both = (flops > 0) & (nbytes > 0)
        intense = both & (flops / np.maximum(nbytes, 1) > ridge)
        cls = np.full(g.n_tasks, Boundness.UNCHANGED, np.int8)
        if (kind == EventKind.KERNEL).any():
            gpu = work & np.isin(kind, (EventKind.KERNEL, EventKind.MEMSET))
            cls[gpu] = Boundness.MEMORY
            cls[gpu & (named_compute | intense | ((flops > 0) & ~both & (kind == EventKind.KERNEL)))] = Boundness.COMPUTE
            cls[work & (kind == EventKind.COLLECTIVE)] = Boundness.COMM
        else:
            cpu = work & (kind == EventKind.CPU_OP)
            cls[cpu & (nbytes > 0)] = Boundness.MEMORY
            cls[cpu & (flops > 0) & (intense | ~both)] = Boundness.COMPUTE
        return cls, flops, nbytes

    @staticmethod
    def _ratio(src, dst, cls, name, f, b, dur_ns) -> float:
        if cls == Boundness.COMPUTE:
            dt = kernel_dtype(name) if src.kind == "gpu" else "float32"
            conv = bool(_CONV.search(name))
            rate_src = src.conv_flops_per_s if conv else src.matmul_flops_per_s
            rate_dst = dst.conv_flops_per_s if conv else dst.matmul_flops_per_s
            if f <= 0:
                f = max(dur_ns, 1.0) * 1e-9 * rate_src(dt, 1e9)
            return rate_src(dt, f) / rate_dst(dt, f)
        if cls == Boundness.MEMORY:
            b = b if b > 0 else max(dur_ns, 1.0) * 1e-9 * src.mem_bw_bytes_per_s(1e9)
            return src.mem_bw_bytes_per_s(b) / dst.mem_bw_bytes_per_s(b)
        if not src.collective or not dst.collective:
            return 1.0
        return next(iter(src.collective.values()))[0] / next(iter(dst.collective.values()))[0]


OPTIMIZATION = Device
