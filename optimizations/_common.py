"""Helpers shared by the optimization modules (graph queries, metadata)."""
from __future__ import annotations

import re
from collections import defaultdict

import numpy as np

from daydream.model import LaneKind

from .base import NotApplicable

__all__ = ["by_rank_iteration", "launch_of", "launched_by", "module_table", "layer_mask", "main_lane",
           "HOW_TO_RECORD", "require_meta", "cpu_lane_of", "OPTIMIZER_STEP_RE"]

HOW_TO_RECORD = "record it with `daydream trace -- python train.py ...`, which stores the module table"
OPTIMIZER_STEP_RE = r"^Optimizer\.step#"


def by_rank_iteration(g, tasks) -> dict:
    """Group task ids by (rank, iteration), in lane order within each lane."""
    out = defaultdict(list)
    T = g.tasks
    for t in np.asarray(tasks).tolist():
        out[(int(T["rank"][t]), int(T["iteration"][t]))].append(t)
    return dict(out)


def launched_by(g) -> dict:
    """Runtime call -> GPU tasks it launched."""
    E = g.edges
    out = defaultdict(list)
    from daydream.graph import EdgeKind
    for s, d in zip(E["src"][E["kind"] == EdgeKind.LAUNCH].tolist(), E["dst"][E["kind"] == EdgeKind.LAUNCH].tolist()):
        out[s].append(d)
    return out


def launch_of(g) -> dict:
    """GPU task -> the runtime call that launched it."""
    from daydream.graph import EdgeKind
    E = g.edges
    m = E["kind"] == EdgeKind.LAUNCH
    return dict(zip(E["dst"][m].tolist(), E["src"][m].tolist()))


def module_table(ctx, what: str) -> dict:
    """Module path -> row of the trace's module table; NotApplicable if absent."""
    mods = ctx.meta().get("modules")
    if not mods:
        raise NotApplicable(f"{what} needs parameter sizes per module, which this trace does not have; "
                            f"{HOW_TO_RECORD}")
    return {m["path"]: m for m in mods}


def require_meta(ctx, key: str, what: str):
    v = ctx.meta().get(key)
    if not v:
        raise NotApplicable(f"{what} needs '{key}' from the trace metadata; {HOW_TO_RECORD}")
    return v


def layer_mask(g, pattern: str) -> np.ndarray:
    rx = re.compile(pattern)
    ok = np.array([rx.search(s) is not None for s in g.layers.strings] + [False], bool)
    L = g.tasks["layer"]
    return ok[np.where(L >= 0, L, len(g.layers.strings))]


def main_lane(g, rank: int) -> int:
    """The CPU lane carrying the iteration markers of ``rank``."""
    return int(g.tasks["lane"][g.markers[rank][0]])


def cpu_lane_of(g, t: int) -> bool:
    return g.lanes[int(g.tasks["lane"][t])].kind == LaneKind.CPU_THREAD
