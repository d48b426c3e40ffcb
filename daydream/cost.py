"""Cost models shared by the optimizations: durations of new or changed tasks.

Preferred sources, in order: the trace itself (a task's own measured time,
scaled), a calibrated :class:`~daydream.device.DeviceProfile` of the user's
machine, published specs.  Every function states which it uses.
"""
from __future__ import annotations

import re

import numpy as np

from .model import EventKind

__all__ = ["compute_mask", "gpu_mask", "dtype_time_ratio", "elementwise_ns", "matmul_ns", "cold_pass_ns",
           "DTYPE_BYTES", "GPU_COMPUTE_KERNEL_RE"]

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}

#: GPU kernels that run matrix/convolution arithmetic (cuBLAS, cuDNN, CUTLASS names).
GPU_COMPUTE_KERNEL_RE = re.compile(
    r"gemm|cutlass|xmma|scudnn|cudnn::.*conv|implicit_convolve|conv2d|wgrad|dgrad|"
    r"sm\d+_.*(h|s)\d+|flash|fmha|ampere_.*(h|s)|volta_.*(h|s)|turing_.*(h|s)", re.IGNORECASE)


def gpu_mask(g) -> np.ndarray:
    return np.isin(g.tasks["kind"], (EventKind.KERNEL, EventKind.MEMCPY, EventKind.MEMSET, EventKind.COLLECTIVE))


def compute_mask(g) -> np.ndarray:
    """Tasks whose time is dominated by arithmetic: CPU ops with FLOPs, GEMM/conv kernels."""
    T = g.tasks
    m = T["flops"] > 0
    kern = np.flatnonzero(T["kind"] == EventKind.KERNEL)
    ok = np.array([GPU_COMPUTE_KERNEL_RE.search(s) is not None for s in g.names.strings] + [False], bool)
    m[kern] |= ok[T["name"][kern]]
    return m


def matmul_ns(device, flops: float, dtype: str, conv: bool = False) -> float:
    """Time of one matmul/convolution of ``flops`` on ``device`` (calibrated curve)."""
    rate = device.conv_flops_per_s(dtype, flops) if conv else device.matmul_flops_per_s(dtype, flops)
    return flops / rate * 1e9


def elementwise_ns(device, nbytes: float, dtype: str = "float32") -> float:
    """Time to stream ``nbytes`` through a simple elementwise kernel, plus one op's overhead."""
    if nbytes <= 0:
        return float(device.op_overhead_ns)
    return nbytes / device.mem_bw_bytes_per_s(nbytes, dtype) * 1e9 + device.op_overhead_ns


def cold_pass_ns(device, nbytes: float, tensors: int) -> float:
    """One elementwise op per tensor over ``nbytes`` in all that are not in cache (a copy or an
    in-place update of data touched once an iteration: DDP's gradient buckets, a pipeline stage's
    gradients): per tensor the device's op overhead, plus a read and a write of the bytes at its
    streaming bandwidth from memory (:meth:`~daydream.device.DeviceProfile.stream_bw_bytes_per_s`).

    >>> from daydream.device import Curve, DeviceProfile
    >>> dev = DeviceProfile("x", "cpu", {}, {"float32": Curve(((1e3, 1e9), (1e8, 1e10)))}, 2000)
    >>> cold_pass_ns(dev, 5000, 2)
    5000.0
    >>> cold_pass_ns(dev, 0, 3)
    0.0
    """
    if nbytes <= 0:
        return 0.0
    return tensors * device.op_overhead_ns + 2 * nbytes / device.stream_bw_bytes_per_s() * 1e9


def dtype_time_ratio(device, flops: np.ndarray, src: str, dst: str, conv: np.ndarray | None = None) -> np.ndarray:
    """Per-task time ratio ``t(dst) / t(src)`` of compute-bound tasks of the given FLOPs.

    Uses the device's measured (or published) throughput curves at each task's
    own size, so a CPU without fast bf16 predicts a slowdown, not a speedup.
    """
    flops = np.maximum(np.asarray(flops, float), 1.0)
    conv = np.zeros(len(flops), bool) if conv is None else conv
    out = np.empty(len(flops))
    for i, (f, c) in enumerate(zip(flops, conv)):
        rate = device.conv_flops_per_s if c else device.matmul_flops_per_s
        out[i] = rate(src, f) / rate(dst, f)
    return out
