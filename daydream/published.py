"""Published specs of common GPUs, as device profiles for devices the user does not have.

Figures are datasheet peaks scaled by :data:`ACHIEVABLE_FRACTION`; a calibrated
profile (``daydream calibrate``) is always better where the device is at hand.

Examples
--------
>>> p = published("A100")
>>> round(p.matmul_flops_per_s("bfloat16", 1e12) / p.matmul_flops_per_s("float32", 1e12), 1)
16.0
>>> p.mem_bw_bytes_per_s(1e9) > 1e12
True
"""
from __future__ import annotations

from .device import Curve, DeviceProfile
from .errors import DaydreamError

__all__ = ["published", "PUBLISHED", "ACHIEVABLE_FRACTION"]

#: Fraction of a published peak that real kernels reach (last-resort constant,
#: used only for devices that were not calibrated).  Dense GEMMs of training
#: workloads typically reach 60-80% of peak and streaming kernels ~80-90% of
#: peak bandwidth; 0.7 and 0.85 are used.
ACHIEVABLE_FRACTION = {"compute": 0.7, "memory": 0.85}


def _gpu(name, fp32_tflops, tensor_tflops, bw_gbs, link_gbs, launch_us=4.0):
    c, m = ACHIEVABLE_FRACTION["compute"], ACHIEVABLE_FRACTION["memory"]
    mm = {"float32": Curve.flat(fp32_tflops * 1e12 * c)}
    for dt, tf in tensor_tflops.items():
        mm[dt] = Curve.flat(tf * 1e12 * c)
    ew = {"float32": Curve.flat(bw_gbs * 1e9 * m), "float16": Curve.flat(bw_gbs * 1e9 * m),
          "bfloat16": Curve.flat(bw_gbs * 1e9 * m)}
    return DeviceProfile(name=name, kind="gpu", matmul=mm, elementwise=ew,
                         op_overhead_ns=int(launch_us * 1000),
                         collective={"nccl": (link_gbs * 1e9, 10_000.0)}, source="published spec")


#: Published dense peak figures (NVIDIA datasheets): FP32 TFLOP/s, tensor-core
#: FP16/BF16 TFLOP/s (dense, FP32 accumulate), memory GB/s, per-GPU NVLink/PCIe
#: all-reduce bus bandwidth GB/s.
PUBLISHED = {
    "V100": _gpu("Tesla V100-SXM2", 15.7, {"float16": 125.0}, 900, 130),
    "A100": _gpu("A100-SXM4-80GB", 19.5, {"float16": 312.0, "bfloat16": 312.0}, 2039, 240),
    "H100": _gpu("H100-SXM5-80GB", 67.0, {"float16": 989.0, "bfloat16": 989.0}, 3350, 450),
    "H200": _gpu("H200-SXM", 67.0, {"float16": 989.0, "bfloat16": 989.0}, 4800, 450),
    "RTX2080TI": _gpu("GeForce RTX 2080 Ti", 13.4, {"float16": 53.8}, 616, 12),
}


def published(name: str) -> DeviceProfile:
    """Profile of a device from the published-spec table (matched loosely by name)."""
    key = "".join(ch for ch in name.upper() if ch.isalnum())
    for k, p in PUBLISHED.items():
        if k in key or key in k:
            return p
    raise DaydreamError(f"no published specs for {name!r} (known: {', '.join(PUBLISHED)})")
