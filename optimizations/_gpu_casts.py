"""Autocast's casts on a GPU trace: a CPU call that launches a kernel, in forward and in backward.

On a GPU the cost of a cast that matters is mostly the host's: each ``aten::to`` under
autocast dispatches ``_to_copy``, allocates, and launches one elementwise kernel, and
each cast of a tensor that needs a gradient adds a ``ToCopyBackward0`` node that does the
same in backward.  The bundled MLP on an H200 (session 34, bf16) spent ~30 us of host time
on each, where its kernels took 1-2 us.  A cast here costs what the trace's own one-kernel
ops cost on their thread (:func:`one_kernel_op_ns`: the same dispatch, allocation and
launch, timed under the same tracer), and its kernel streams the bytes at the device's
bandwidth for data out of cache.

:func:`insert_gpu_casts` is ``amp``'s cast step for ranks with GPU streams.
"""
from __future__ import annotations

import numpy as np

from daydream.model import LaneKind, Phase
from daydream.primitives import insert

from ._layers import _GPU_KINDS, op_figures, signatures_of

__all__ = ["one_kernel_op_ns", "insert_gpu_casts"]


def one_kernel_op_ns(g, op) -> float | None:
    """Median host time of the trace's top-level ops that launch exactly one GPU task and do no
    arithmetic a FLOP count knows of (``aten::relu_``, ``aten::fill_``, a cast): the op's CPU
    tasks summed (its slices and the calls nested in it).  None where the trace has none.

    ``op`` is :func:`~optimizations._layers.op_figures`'s third column.
    """
    T = g.tasks
    cpu_lane = np.array([ln.kind == LaneKind.CPU_THREAD for ln in g.lanes] + [False], bool)
    known = (op >= 0) & (T["iteration"] >= 0)
    gpu = known & np.isin(T["kind"], _GPU_KINDS)
    cpu = known & cpu_lane[T["lane"]]
    ops, n_gpu = np.unique(op[gpu], return_counts=True)
    one = ops[n_gpu == 1]
    arithmetic = np.unique(op[cpu & (T["flops"] > 0)])
    one = np.setdiff1d(one, arithmetic)
    sel = cpu & np.isin(op, one)
    if not sel.any():
        return None
    _, inv = np.unique(op[sel], return_inverse=True)
    return float(np.median(np.bincount(inv.reshape(-1), weights=T["dur_ns"][sel].astype(float))))


def _first_by(g, key_of, lanes) -> dict:
    """key -> first task (in lane order) of each key, over ``lanes``."""
    out = {}
    for li in lanes:
        for t in g.lane_tasks[li]:
            k = key_of(t)
            if k is not None:
                out.setdefault(k, t)
    return out


def insert_gpu_casts(ctx, fwd_compute, dtype_bytes: int = 2) -> int:
    """Insert autocast's casts for the forward compute ops ``fwd_compute`` (CPU tasks) of ranks
    with GPU streams; returns how many ops got them.

    Each float input of an op (its recorded shapes; one cast where unknown) gets a host call
    before the op on its thread, lasting :func:`one_kernel_op_ns` (else the device's op
    overhead), that launches a kernel before the op's first kernel on that kernel's stream,
    lasting the input's bytes (read fp32, written in the new dtype) at
    :meth:`~daydream.device.DeviceProfile.stream_bw_bytes_per_s`.  The inputs after the first
    (weights and bias: those that need a gradient) get the same pair again at the start of
    the layer's backward: the gradient cast back to fp32.
    """
    g, dev = ctx.graph, ctx.device
    T = g.tasks
    _, _, op = op_figures(ctx)
    host_ns = one_kernel_op_ns(g, op) or float(dev.op_overhead_ns)
    bw = dev.stream_bw_bytes_per_s()
    sigs = signatures_of(ctx, fwd_compute)
    cpu_lanes = [i for i, ln in enumerate(g.lanes) if ln.kind == LaneKind.CPU_THREAD]
    gpu_lanes = [i for i, ln in enumerate(g.lanes) if ln.kind != LaneKind.CPU_THREAD]
    gpu_task = np.isin(T["kind"], _GPU_KINDS)
    first_kernel = _first_by(g, lambda t: int(op[t]) if gpu_task[t] and op[t] >= 0 else None, gpu_lanes)
    in_bwd = T["phase"] == Phase.BACKWARD

    def bwd_key(t):
        return (int(T["layer"][t]), int(T["iteration"][t])) if in_bwd[t] and T["layer"][t] >= 0 else None
    bwd_cpu, bwd_gpu = _first_by(g, bwd_key, cpu_lanes), _first_by(g, bwd_key, gpu_lanes)
    n, seen = 0, set()
    for t in fwd_compute.tolist():
        if g.lanes[int(T["lane"][t])].kind != LaneKind.CPU_THREAD or op[t] < 0 or int(op[t]) in seen:
            continue
        kernel = first_kernel.get(int(op[t]))
        if kernel is None:          # an op of a CPU-only rank: amp's CPU casts apply
            continue
        seen.add(int(op[t]))
        kernel_ns = [nbytes * (4 + dtype_bytes) / 4 / bw * 1e9 for nbytes in _input_bytes(sigs.get(t))]
        layer, it = int(T["layer"][t]), int(T["iteration"][t])
        name = g.layers[layer] if layer >= 0 else None
        for ns in kernel_ns:
            _cast(g, t, kernel, host_ns, ns, "aten::to (autocast)", Phase.FORWARD, name, it)
        b_cpu, b_gpu = bwd_cpu.get((layer, it)), bwd_gpu.get((layer, it))
        if b_cpu is not None and b_gpu is not None:
            for ns in kernel_ns[1:]:
                _cast(g, b_cpu, b_gpu, host_ns, ns, "ToCopyBackward0 (autocast, grad to fp32)", Phase.BACKWARD,
                      name, it)
        n += 1
    return n


def _input_bytes(sig) -> list:
    """fp32 bytes of each float input of a call signature ([0] where unknown: one cast)."""
    if sig is None:
        return [0]
    from daydream.opbench import float_inputs

    return [4 * int(np.prod(d)) if d else 4 for d in float_inputs(sig)] or [0]


def _cast(g, cpu_before, gpu_before, host_ns, kernel_ns, name, phase, layer, it) -> None:
    call = insert(g, int(g.tasks["lane"][cpu_before]), dur_ns=int(host_ns), name=name, before=cpu_before,
                  phase=phase, layer=layer, iteration=it)
    insert(g, int(g.tasks["lane"][gpu_before]), dur_ns=max(int(kernel_ns), 1), name=f"{name} kernel",
           before=gpu_before, deps=(call,), phase=phase, layer=layer, iteration=it)
