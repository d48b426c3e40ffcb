"""daydream: a predictive performance profiler for PyTorch training.

Trace one iteration of what you run today, then ask "what if?".  The
pipeline, one plain function per stage::

    trace = load_trace("rank0.json.gz")        # Kineto JSON -> columnar Trace
    graph = build_graph(trace)                 # tasks on lanes, typed edges
    result = simulate(graph)                   # deterministic replay
    report, result = replay("rank0.json.gz")   # all three, measured vs simulated

Examples
--------
>>> import daydream
>>> daydream.Phase.FORWARD.label
'forward'
"""
from __future__ import annotations

__version__ = "0.1.0"

from .analysis import ReplayReport, replay, summarize
from .collect import step, trace
from .errors import (CycleError, DaydreamError, GraphError, NoIterationsError, SimulationError,
                     TraceError)
from .graph import Anchor, DependencyGraph, EdgeKind, WaitKind, build_graph
from .loader import load_trace
from .model import EventKind, Lane, LaneKind, Phase, RankTrace, Trace
from .sim import SimResult, simulate
from .sim.export import to_chrome_trace

__all__ = [
    "__version__", "trace", "step", "load_trace", "build_graph", "simulate", "replay", "summarize",
    "to_chrome_trace", "Trace", "RankTrace", "DependencyGraph", "SimResult", "ReplayReport",
    "EventKind", "Phase", "LaneKind", "Lane", "EdgeKind", "Anchor", "WaitKind",
    "DaydreamError", "TraceError", "NoIterationsError", "GraphError", "CycleError",
    "SimulationError",
]
