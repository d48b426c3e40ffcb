"""High-level analyses over the pipeline: replay and trace summaries.

Measured and simulated figures share one interface (:class:`IterationReport`).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from .graph import GraphBuilder, build_graph
from .loader import load_trace
from .loader.pauses import PEER_PAUSES_KEY
from .model import EventKind, LaneKind, Phase, Trace
from .overhead import TracingOverhead, tracing_overhead
from .progress import Stages
from .sim import SimResult, mean_iteration_ns, simulate

__all__ = ["IterationReport", "ReplayReport", "replay", "TraceSummary", "summarize", "as_trace",
           "trace_and_graph", "op_times_ms", "TracingOverhead", "tracing_overhead"]


def as_trace(trace_or_paths, iteration_marker: str | None = None) -> Trace:
    """Accept a loaded :class:`Trace` or paths to load."""
    if isinstance(trace_or_paths, Trace):
        return trace_or_paths
    return load_trace(trace_or_paths, iteration_marker=iteration_marker)


def trace_and_graph(trace_or_paths, iteration_marker: str | None = None):
    """A loaded :class:`Trace` (or paths to load) and its dependency graph.

    Files are built into the graph one by one as the loader's workers finish
    them, so building overlaps parsing; where one rank's pause was cut from
    the others once all were loaded (:func:`daydream.loader.pauses.cut_peer_pauses`),
    the graph is built again from the cut ranks.  Returns ``(trace, graph)``.
    """
    if isinstance(trace_or_paths, Trace):
        return trace_or_paths, build_graph(trace_or_paths)
    b = GraphBuilder()
    trace = load_trace(trace_or_paths, iteration_marker=iteration_marker, on_rank=b.add_rank)
    if any(PEER_PAUSES_KEY in r.meta for r in trace):   # cut after the ranks were built: build again
        return trace, build_graph(trace)
    return trace, b.finish()


@dataclass(frozen=True)
class IterationReport:
    """One iteration, measured and simulated (ms, averaged over ranks)."""

    measured_ms: float
    simulated_ms: float


@dataclass(frozen=True)
class ReplayReport:
    """Replay of a trace: measured vs simulated mean iteration time.

    ``measured_ms``/``simulated_ms`` are means over iterations after the first
    (the only one if there is one), averaged over ranks.
    """

    sources: tuple
    measured_ms: float
    simulated_ms: float
    iterations: tuple
    repairs: dict = field(default_factory=dict)

    @property
    def error_pct(self) -> float:
        return abs(self.simulated_ms - self.measured_ms) / self.measured_ms * 100.0

    def to_dict(self) -> dict:
        return {"sources": list(self.sources), "measured_ms": self.measured_ms,
                "simulated_ms": self.simulated_ms, "error_pct": self.error_pct,
                "iterations": [{"measured_ms": i.measured_ms, "simulated_ms": i.simulated_ms}
                               for i in self.iterations],
                "repairs": self.repairs}


def op_times_ms(res: SimResult) -> dict:
    """``(op name, phase) -> mean ms per iteration`` on CPU threads in the schedule ``res``
    (iterations only; an op split by nested calls counts its own slices).

    The figure that tells which ops a prediction, or a real run, changed.
    """
    g = res.graph
    T = g.tasks
    cpu = np.array([ln.kind == LaneKind.CPU_THREAD for ln in g.lanes], bool)[T["lane"]]
    keep = np.flatnonzero(cpu & (T["iteration"] >= 0))
    iterations = max(len(np.unique(T["iteration"][keep])), 1)
    total = Counter()
    dur = res.end_ns[keep] - res.start_ns[keep]
    for t, d in zip(keep.tolist(), dur.tolist()):
        total[(g.task_name(t), int(T["phase"][t]))] += int(d)
    return {k: v / iterations / 1e6 for k, v in total.items()}


def replay(trace_or_paths, iteration_marker: str | None = None) -> tuple[ReplayReport, SimResult]:
    """Load (if needed), build and simulate a trace unedited.

    Returns
    -------
    report : ReplayReport
    result : SimResult
        The simulated timeline (for export or further analysis).
    """
    stages = Stages("replay")
    stages.enter("loading and building the dependency graph")
    trace, g = trace_and_graph(trace_or_paths, iteration_marker)
    stages.enter(f"simulating {g.n_tasks} tasks of {len(trace)} rank(s)")
    res = simulate(g)
    stages.finish()
    its = res.iterations()
    k = min(len(i.measured_ns) for i in its)
    meas = np.mean([i.measured_ns[:k] for i in its], axis=0) / 1e6
    sim = np.mean([i.simulated_ns[:k] for i in its], axis=0) / 1e6
    report = ReplayReport(
        sources=tuple(trace.sources),
        measured_ms=float(np.mean([mean_iteration_ns(i.measured_ns) for i in its]) / 1e6),
        simulated_ms=float(np.mean([mean_iteration_ns(i.simulated_ns) for i in its]) / 1e6),
        iterations=tuple(IterationReport(float(m), float(s)) for m, s in zip(meas, sim)),
        repairs=dict(g.repairs))
    return report, res


@dataclass(frozen=True)
class TraceSummary:
    """What ``daydream info`` prints."""

    ranks: tuple          # (rank, source, n events, n iterations, mean iteration ms)
    devices: tuple        # device names
    phase_ms: dict        # phase label -> (cpu ms, gpu ms) per iteration, mean over ranks
    top_layers: tuple     # (layer, ms per iteration)
    top_kernels: tuple    # (name, count per iteration, ms per iteration)
    repairs: dict
    overhead: tuple = ()  # (rank, TracingOverhead) for ranks whose trace measured it


def summarize(trace: Trace, top: int = 10) -> TraceSummary:
    """Summarise ranks, devices, iterations, time by phase, top layers and kernels.

    Times are per iteration over the traced iterations, averaged over ranks.
    GPU time is used for layers where the trace has GPU tasks, CPU time otherwise.
    """
    ranks, devices = [], []
    phase = Counter()
    layers, kernels, kcount = Counter(), Counter(), Counter()
    repairs = Counter()
    overhead = []
    for r in trace:
        c = r.cols
        n_it = max(r.n_iterations, 1)
        in_it = c["iteration"] >= 0
        dur = c["dur_ns"] / 1e6 / n_it / len(trace)
        gpu = np.isin(c["kind"], (EventKind.KERNEL, EventKind.MEMCPY, EventKind.MEMSET, EventKind.COLLECTIVE))
        top_cpu = _top_level_cpu(r)
        for p in Phase:
            sel = in_it & (c["phase"] == p)
            phase[(p.label, "cpu")] += float(dur[sel & top_cpu].sum())
            phase[(p.label, "gpu")] += float(dur[sel & gpu].sum())
        basis = gpu if gpu.any() else top_cpu
        for lay, d in zip(c["layer"][in_it & basis], dur[in_it & basis]):
            layers[r.layers[int(lay)] if lay >= 0 else "(unmapped)"] += float(d)
        ksel = in_it & gpu
        for nm, d in zip(c["name"][ksel], dur[ksel]):
            kernels[r.names[int(nm)]] += float(d)
            kcount[r.names[int(nm)]] += 1 / n_it / len(trace)
        mean_ms = mean_iteration_ns(r.iteration_times_ns()) / 1e6
        ranks.append((r.rank, r.source, len(r), r.n_iterations, mean_ms))
        for d in r.meta.get("deviceProperties") or []:
            if isinstance(d, dict) and d.get("name") and d["name"] not in devices:
                devices.append(d["name"])
        repairs.update(r.repairs)
        if (o := tracing_overhead(r.meta)) is not None:
            overhead.append((r.rank, o))
    if not devices:
        devices.append("CPU only" if not any(ln.kind == LaneKind.GPU_STREAM for r in trace for ln in r.lanes)
                       else "GPU (not named in the trace)")
    phase_ms = {p.label: (phase[(p.label, "cpu")], phase[(p.label, "gpu")]) for p in Phase}
    return TraceSummary(tuple(ranks), tuple(devices), phase_ms,
                        tuple(layers.most_common(top)),
                        tuple((k, kcount[k], v) for k, v in kernels.most_common(top)),
                        dict(repairs), tuple(overhead))


def _top_level_cpu(r) -> np.ndarray:
    """CPU ops not nested in another CPU op on their thread (no double counting)."""
    c = r.cols
    out = np.zeros(len(r), bool)
    ops = np.flatnonzero(c["kind"] == EventKind.CPU_OP)
    for lane in np.unique(c["lane"][ops]):
        idx = ops[c["lane"][ops] == lane]
        end = c["start_ns"][idx] + c["dur_ns"][idx]
        reach = np.maximum.accumulate(end)
        top = np.ones(len(idx), bool)
        top[1:] = c["start_ns"][idx][1:] >= reach[:-1]
        out[idx[top]] = True
    return out
