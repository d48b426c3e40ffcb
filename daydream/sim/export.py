"""Export of a simulated timeline as Chrome-trace JSON (Perfetto opens it).

Lanes keep the input's process and thread ids, so the simulated timeline
lines up with the traced one; with several ranks, process ids are prefixed by
the rank.
"""
from __future__ import annotations

from ..model import EventKind, LaneKind, Phase
from .result import SimResult

__all__ = ["to_chrome_trace"]


def _ids(lane, multi_rank: bool):
    pid, tid = lane.pid, lane.tid
    if multi_rank:
        pid = f"rank {lane.rank} {'GPU' if lane.kind == LaneKind.GPU_STREAM else 'pid'} {pid}"
    return pid, tid


def to_chrome_trace(result: SimResult, meta: dict | None = None) -> dict:
    """The simulated timeline as a Chrome-trace document.

    Parameters
    ----------
    result : SimResult
    meta : dict, optional
        Stored under the top-level ``"daydream"`` key (command, versions, ...).
    """
    g = result.graph
    multi = len(g.ranks) > 1
    T = g.tasks
    events = []
    for li, lane in enumerate(g.lanes):
        pid, tid = _ids(lane, multi)
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                       "args": {"name": lane.label or f"{lane.kind.label} {tid}"}})
        if lane.kind == LaneKind.GPU_STREAM:
            events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                           "args": {"name": f"GPU {lane.device}" + (f" (rank {lane.rank})" if multi else "")}})
    origin = g.origin_ns
    start, end = result.start_ns.tolist(), result.end_ns.tolist()
    lanes = [_ids(ln, multi) for ln in g.lanes]
    kinds, names, layers = T["kind"].tolist(), T["name"].tolist(), T["layer"].tolist()
    phases, its = T["phase"].tolist(), T["iteration"].tolist()
    for t in range(g.n_tasks):
        pid, tid = lanes[T["lane"][t]]
        kind = EventKind(kinds[t])
        if kind == EventKind.MARKER:
            events.append({"ph": "i", "s": "p", "name": f"iteration {its[t]}", "pid": pid, "tid": tid,
                           "ts": (origin + start[t]) / 1000.0})
            continue
        args = {"phase": Phase(phases[t]).label, "iteration": its[t]}
        if layers[t] >= 0:
            args["layer"] = g.layers[layers[t]]
        events.append({"ph": "X", "cat": kind.label, "name": g.names[names[t]], "pid": pid, "tid": tid,
                       "ts": (origin + start[t]) / 1000.0, "dur": (end[t] - start[t]) / 1000.0,
                       "args": args})
    doc = {"traceEvents": events, "displayTimeUnit": "ms"}
    if meta:
        doc["daydream"] = meta
    return doc
