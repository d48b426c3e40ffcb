"""Cross-rank collectives and offset calibration, for :mod:`daydream.graph.build`.

Holds the joining of the k-th collective of each kind across ranks into one
collective (its transfer time and each rank's wait), and the calibration of
start and end offsets described in :mod:`daydream.graph.build`: the releasing
constraint keeps its measured offset, the others are relaxed to
``min(measured, natural)``.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from ..model import LaneKind
from .graph import Anchor, EdgeKind

__all__: list[str] = []   # internal to daydream.graph.build


def _coll_key(name: str) -> str:
    return name.split("(", 1)[0]


def _join_collectives(g, collectives, start, dur, repairs):
    """Group the k-th collective of each kind across ranks into one collective."""
    if len(collectives) < 2:
        return
    by_key = {}
    for rank, tasks in collectives.items():
        d = defaultdict(list)
        for t in sorted(tasks, key=lambda t: start[t]):
            d[_coll_key(g.task_name(t))].append(t)
        by_key[rank] = d
    keys = set().union(*(d.keys() for d in by_key.values()))
    transfer = []
    for key in sorted(keys):
        lists = [d.get(key, []) for d in by_key.values()]
        m = min(len(x) for x in lists)
        repairs_n = sum(len(x) - m for x in lists)
        if repairs_n:
            repairs["collectives without a partner on every rank (not joined)"] += repairs_n
        for k in range(m):
            parts = np.array([x[k] for x in lists])
            max_start = int(start[parts].max())
            ends = start[parts] + dur[parts]
            T = max(int(ends.min()) - max_start, 0)
            gid = len(transfer)
            transfer.append(T)
            g.tasks["group"][parts] = gid
            g.tasks["wait_lag_ns"][parts] = ends - (max_start + T)
            g.tasks["dur_ns"][parts] = np.minimum(dur[parts], T)
    g.group_transfer_ns = np.asarray(transfer, np.int64)


# --------------------------------------------------------------- calibration
def _lane_prev_end(g, sc, start, dur):
    prev_end = np.zeros(g.n_tasks, np.int64)
    for a in sc.ids.values():
        if len(a):
            e = start[a] + dur[a]
            prev_end[a[1:]] = e[:-1]
    return prev_end


def _natural(offsets, binding, groups, n_groups):
    """Median releasing offset per group (0 where a group never released)."""
    out = np.zeros(n_groups, np.int64)
    offsets, groups = offsets[binding], groups[binding]
    for k in np.flatnonzero(np.bincount(groups, minlength=n_groups)).tolist():
        out[k] = int(np.median(offsets[groups == k]))
    return out


def _calibrate_starts(g, sc, start, dur):
    t, e = g.tasks, g.edges
    lane_off = start - _lane_prev_end(g, sc, start, dur)
    lane_kind = np.array([int(ln.kind) for ln in g.lanes], np.int64)[t["lane"]] if g.n_tasks else np.zeros(0, np.int64)
    on_start = e["target"] == Anchor.START
    src, dst = e["src"], e["dst"]
    anchor_t = start[src] + np.where(e["anchor"] == Anchor.END, dur[src], 0)
    edge_off = start[dst] - anchor_t
    min_edge = np.full(g.n_tasks, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(min_edge, dst[on_start], edge_off[on_start])
    lane_bind = lane_off <= min_edge
    edge_bind = on_start & (edge_off == min_edge[dst]) & (edge_off < lane_off[dst])
    nat_lane = _natural(lane_off, lane_bind, lane_kind, len(LaneKind))
    t["gap_ns"] = np.where(lane_bind, lane_off, np.minimum(lane_off, nat_lane[lane_kind]))
    nat_edge = _natural(edge_off, edge_bind, e["kind"].astype(np.int64), len(EdgeKind))
    relaxed = np.minimum(edge_off, nat_edge[e["kind"]])
    e["lag_ns"] = np.where(on_start, np.where(edge_bind, edge_off, relaxed), e["lag_ns"])


def _calibrate_ends(g, start, dur, waits):
    """Synchronizing calls: which of (own duration, waited-for work) ended them."""
    t, e = g.tasks, g.edges
    end = start + dur
    on_end = np.flatnonzero(e["target"] == Anchor.END)
    # latest anchor among end constraints, per task
    anchor = {}
    for i in on_end.tolist():
        d = int(e["dst"][i])
        anchor[d] = max(anchor.get(d, -(1 << 62)), int(end[e["src"][i]]))
    dyn = {}
    for s_task, x in waits:
        dyn[s_task] = max(dyn.get(s_task, -(1 << 62)), int(end[x]))
        anchor[s_task] = max(anchor.get(s_task, -(1 << 62)), dyn[s_task])
    if not anchor:
        return
    tasks = np.fromiter(anchor.keys(), np.int64)
    a = np.fromiter(anchor.values(), np.int64)
    bind = (end[tasks] - a) < dur[tasks]          # released by the awaited work
    nat_dur = int(np.median(dur[tasks][~bind])) if (~bind).any() else 0
    nat_wake = int(np.median((end[tasks] - a)[bind])) if bind.any() else 0
    t["dur_ns"][tasks] = np.where(bind, np.minimum(dur[tasks], nat_dur), dur[tasks])
    bound = dict(zip(tasks.tolist(), bind.tolist()))
    for s_task, lat in dyn.items():
        off = int(end[s_task]) - lat
        t["wait_lag_ns"][s_task] = off if bound[s_task] and lat == anchor[s_task] else min(off, nat_wake)
    for i in on_end.tolist():
        d = int(e["dst"][i])
        off = int(end[d]) - int(end[e["src"][i]])
        exact = bound[d] and int(end[e["src"][i]]) == anchor[d]
        e["lag_ns"][i] = off if exact else min(off, nat_wake)
