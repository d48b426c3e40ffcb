"""Predicting an optimization's effect: apply what-ifs to the graph, simulate, compare.

Examples
--------
>>> from daydream.whatif import predict                       # doctest: +SKIP
>>> report, result = predict("run.json.gz", ["fused-adam"])   # doctest: +SKIP
>>> report.speedup                                            # doctest: +SKIP
1.12
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from .analysis import trace_and_graph
from .graph.stalls import settle_stalls
from .device import DeviceProfile, default_profile_path, load_profile
from .published import published
from .errors import DaydreamError
from .model import EventKind, LaneKind, Phase
from .primitives import check_acyclic
from .sim import SimResult, simulate

__all__ = ["WhatIfReport", "predict", "device_for", "phase_busy_ms", "layer_busy_ms"]


@dataclass(frozen=True)
class WhatIfReport:
    """Measured, simulated baseline and predicted mean iteration time (ms)."""

    sources: tuple
    optimizations: tuple
    measured_ms: float
    baseline_ms: float
    predicted_ms: float
    phases: dict          # phase label -> (baseline busy ms, predicted busy ms)
    device: str
    notes: tuple = field(default_factory=tuple)
    metrics: dict = field(default_factory=dict)   # other predicted figures, units in names

    @property
    def speedup(self) -> float:
        return self.baseline_ms / self.predicted_ms if self.predicted_ms else float("inf")

    def to_dict(self) -> dict:
        return {"sources": list(self.sources), "optimizations": list(self.optimizations),
                "measured_ms": self.measured_ms, "baseline_ms": self.baseline_ms,
                "predicted_ms": self.predicted_ms, "speedup": self.speedup, "device": self.device,
                "phases": {k: {"baseline_ms": b, "predicted_ms": p} for k, (b, p) in self.phases.items()},
                "notes": list(self.notes), "metrics": dict(self.metrics)}


def device_for(trace, device: str | DeviceProfile | None = None, profile_path: str | None = None) -> DeviceProfile:
    """The device profile for cost models.

    ``device`` names a published device (``"A100"``) or is a profile; otherwise
    a GPU trace uses the published specs of the GPU it names, and a CPU trace
    the calibrated profile of this machine (``daydream calibrate``).
    """
    if isinstance(device, DeviceProfile):
        return device
    if device:
        return published(device)
    threads = _trace_threads(trace)
    prof = load_profile(profile_path or default_profile_path("cpu", threads))
    gpus = [d.get("name", "") for r in trace for d in (r.meta.get("deviceProperties") or []) if isinstance(d, dict)]
    has_gpu = any(ln.kind == LaneKind.GPU_STREAM for r in trace for ln in r.lanes)
    if has_gpu:
        if prof is not None and prof.kind == "gpu" and gpus and prof.name in gpus:
            return prof
        if gpus:
            try:
                gpu = published(gpus[0])
            except DaydreamError:
                gpu = None
            if gpu is not None:
                # host-side costs (DataLoader hand-over) from this machine's CPU, if calibrated
                if prof is not None and prof.kind == "cpu":
                    gpu = replace(gpu, loader_fetch=prof.loader_fetch, source=gpu.source + " + host: " + prof.source)
                return gpu
        raise DaydreamError("cannot tell which GPU the trace ran on; pass --device NAME "
                            "(V100, A100, H100, H200, RTX2080TI)")
    if prof is None or prof.kind != "cpu":
        flag = f" --threads {threads}" if threads else ""
        raise DaydreamError(f"no calibrated CPU profile{f' for {threads} threads' if threads else ''}: "
                            f"run `daydream calibrate{flag}` once on this machine")
    return prof


def _trace_threads(trace) -> int | None:
    """Intra-op threads the traced process used (from daydream metadata), if known."""
    for r in trace:
        cpu = ((r.meta.get("daydream") or {}).get("device") or {}).get("cpu") or {}
        if cpu.get("torch_threads"):
            return int(cpu["torch_threads"])
    return None


def _busy_ms_per_iteration(result: SimResult):
    """Per task: ms of work per iteration (iterations after the first, mean over ranks),
    with the mask of the tasks that count."""
    g = result.graph
    T = g.tasks
    n_it = max(1, max(len(m) - 1 for m in g.markers.values()))
    counted = (T["iteration"] >= (1 if n_it > 1 else 0)) & (T["kind"] != EventKind.MARKER)
    per_it = max(1, n_it - 1) * max(1, len(g.markers))
    return (result.end_ns - result.start_ns).astype(float) / 1e6 / per_it, counted


def phase_busy_ms(result: SimResult) -> dict:
    """Per phase: task time per iteration (iterations after the first), mean over ranks."""
    busy, counted = _busy_ms_per_iteration(result)
    phase = result.graph.tasks["phase"]
    return {p.label: float(busy[counted & (phase == p)].sum()) for p in Phase}


def layer_busy_ms(result: SimResult) -> dict:
    """Per layer: task time per iteration (iterations after the first), mean over ranks."""
    g = result.graph
    busy, counted = _busy_ms_per_iteration(result)
    sel = counted & (g.tasks["layer"] >= 0)
    sums = np.bincount(g.tasks["layer"][sel], weights=busy[sel], minlength=len(g.layers))
    return {g.layers[i]: float(v) for i, v in enumerate(sums) if v}


def predict(trace_or_paths, optimizations, device=None, profile_path=None, iteration_marker=None):
    """Apply ``optimizations`` (specs like ``"amp:dtype=bfloat16"`` or instances) in order.

    Ops that stalled in one iteration (:mod:`daydream.graph.stalls`) are first
    given their duration in the other iterations, the rest kept as time before
    the next op, so no optimization rescales the machine's stalls (the replay,
    and so the baseline, is unchanged by it); the report's notes say so when
    that happened.

    Returns
    -------
    report : WhatIfReport
    result : SimResult
        The predicted timeline.
    """
    from .optimizations import WhatIfContext, get

    opts = [get(o) if isinstance(o, str) else o for o in optimizations]
    if not opts:
        raise DaydreamError("no optimization given (see `daydream optimizations`)")
    trace, base_graph = trace_and_graph(trace_or_paths, iteration_marker)
    stalls = settle_stalls(base_graph)
    base = simulate(base_graph)
    ctx = WhatIfContext(graph=base_graph.copy(), trace=trace, device=device_for(trace, device, profile_path))
    if stalls.tasks:
        ctx.notes.append(stalls.note(len(base.iterations()[0].measured_ns)))
    for opt in opts:
        opt.apply(ctx)
    check_acyclic(ctx.graph)
    pred = simulate(ctx.graph)
    measured, baseline = base.mean_iteration_ns()
    _, predicted = pred.mean_iteration_ns()
    pb, pp = phase_busy_ms(base), phase_busy_ms(pred)
    report = WhatIfReport(sources=tuple(trace.sources), optimizations=tuple(o.describe() for o in opts),
                          measured_ms=measured / 1e6, baseline_ms=baseline / 1e6, predicted_ms=predicted / 1e6,
                          phases={k: (pb[k], pp[k]) for k in pb}, device=ctx.device.name,
                          notes=tuple(ctx.notes), metrics=dict(ctx.metrics))
    return report, pred
