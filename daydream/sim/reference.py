"""Reference simulator: the plain-Python discrete-event core.

This is the specification of the simulation semantics; the compiled core
(``daydream._simcore``, see :mod:`daydream.sim.core`) is a port of it and
must give identical start/end arrays (``tests/test_sim_fast.py``).  It is
used when the compiled core is unavailable.  The semantics are described in
:mod:`daydream.sim.core`.
"""
from __future__ import annotations

import heapq

import numpy as np

from ..errors import SimulationError
from ..graph.graph import Anchor, DependencyGraph, EdgeKind, WaitKind
from ..model import LaneKind
from .timeline import Timeline

__all__ = ["simulate_reference"]

_END, _START, _START_SYNC = 0, 1, 2   # event priorities at equal times
_NEG = -(1 << 62)


def _csr(n, src, dst, *payload):
    order = np.argsort(src, kind="stable")
    indptr = np.zeros(n + 1, np.int64)
    np.add.at(indptr, src + 1, 1)
    indptr = np.cumsum(indptr)
    return indptr.tolist(), dst[order].tolist(), [p[order].tolist() for p in payload]


def simulate_reference(g: DependencyGraph) -> Timeline:
    """Simulate ``g``; returns a :class:`Timeline` (times relative to ``g.origin_ns``).

    Raises
    ------
    SimulationError
        If some tasks can never run (their dependencies wait on each other).
    """
    n = g.n_tasks
    T, E = g.tasks, g.edges
    lane = T["lane"].tolist()
    dur = T["dur_ns"].tolist()
    gap = T["gap_ns"].tolist()
    wait_kind = T["wait_kind"].tolist()
    wait_lane = T["wait_lane"].tolist()
    wait_lag = T["wait_lag_ns"].tolist()
    group = T["group"].tolist()
    rank = T["rank"].tolist()
    src, dst = E["src"].astype(np.int64), E["dst"].astype(np.int64)
    indptr, out_dst, (out_kind, out_anchor, out_target, out_lag) = _csr(
        n, src, dst, E["kind"], E["anchor"], E["target"], E["lag_ns"])
    on_start = E["target"] == Anchor.START
    pend_start = np.bincount(dst[on_start], minlength=n).tolist()
    pend_end = np.bincount(dst[~on_start], minlength=n).tolist()
    has_launch = np.zeros(n, bool)
    has_launch[dst[E["kind"] == EdgeKind.LAUNCH]] = True
    has_launch = has_launch.tolist()
    lane_pos = [0] * n
    for seq in g.lane_tasks:
        for p, t in enumerate(seq):
            lane_pos[t] = p
    gpu_lanes_of = {}
    for li, ln in enumerate(g.lanes):
        if ln.kind == LaneKind.GPU_STREAM:
            gpu_lanes_of.setdefault(ln.rank, []).append(li)
    n_groups = len(g.group_transfer_ns)
    grp_size = np.bincount(T["group"][T["group"] >= 0], minlength=n_groups).tolist()
    for t in np.flatnonzero(T["group"] >= 0).tolist():
        pend_end[t] += 1
    grp_members = [[] for _ in range(n_groups)]
    grp_arrived = [0] * n_groups
    grp_max = [_NEG] * n_groups
    transfer = g.group_transfer_ns.tolist()

    tl = Timeline(n)
    start, end = [0] * n, [0] * n
    ready = [_NEG] * n
    ready_by = [-1] * n
    ready_by_start = [False] * n
    end_ready = [_NEG] * n
    end_by = [-1] * n
    started = [False] * n
    done = [False] * n
    waiters = [None] * n
    L = len(g.lanes)
    head = [0] * L
    busy = [False] * L
    prev_end = [0] * L
    prev_task = [-1] * L
    enq_pos = [-1] * L
    seqs = g.lane_tasks
    priority = T["priority"].tolist()
    ready_q = {li: [] for li, pol in g.lane_policy.items() if int(pol) == 1}   # LanePolicy.PRIORITY
    heap = []
    counter = 0
    finished = 0

    def push(time, prio, task):
        nonlocal counter
        heapq.heappush(heap, (time, prio, counter, task))
        counter += 1

    def dispatch(li):
        if busy[li]:
            return
        q = ready_q.get(li)
        if q is not None:
            if not q:
                return
            t = heapq.heappop(q)[2]
        else:
            if head[li] >= len(seqs[li]):
                return
            t = seqs[li][head[li]]
            if pend_start[t]:
                return
        s_lane = prev_end[li] + gap[t]
        if ready[t] > s_lane or (ready[t] == s_lane and ready_by[t] >= 0):
            s = ready[t]
            tl.start_by[t] = ready_by[t]
            tl.start_by_start[t] = ready_by_start[t]
        else:
            s = s_lane
            tl.start_by[t] = prev_task[li]
        busy[li] = True
        head[li] += 1
        start[t] = s
        push(s, _START_SYNC if wait_kind[t] else _START, t)

    def finish_if_ready(t):
        if started[t] and not pend_end[t] and end[t] == _NEG:
            own = start[t] + dur[t]
            if end_ready[t] > own:
                end[t] = end_ready[t]
                tl.end_by[t] = end_by[t]
            else:
                end[t] = own
            push(end[t], _END, t)

    def release_end(t, time, by):
        if time > end_ready[t]:
            end_ready[t] = time
            end_by[t] = by
        pend_end[t] -= 1
        finish_if_ready(t)

    def follow(t, time, anchor):
        for k in range(indptr[t], indptr[t + 1]):
            if out_anchor[k] != anchor:
                continue
            d = out_dst[k]
            at = time + out_lag[k]
            if out_target[k] == Anchor.END:
                release_end(d, at, t)
                continue
            if at > ready[d]:
                ready[d] = at
                ready_by[d] = t
                ready_by_start[d] = anchor == Anchor.START
            if out_kind[k] == EdgeKind.LAUNCH:
                li = lane[d]
                if lane_pos[d] > enq_pos[li]:
                    enq_pos[li] = lane_pos[d]
            pend_start[d] -= 1
            if not pend_start[d]:
                became_ready(d)

    def resolve_waits(t):
        lanes = [wait_lane[t]] if wait_kind[t] == WaitKind.STREAM else gpu_lanes_of.get(rank[t], [])
        for li in lanes:
            p = enq_pos[li]
            if p < 0:
                continue
            x = seqs[li][p]
            if done[x]:
                at = end[x] + wait_lag[t]
                if at > end_ready[t]:
                    end_ready[t] = at
                    end_by[t] = x
            else:
                pend_end[t] += 1
                if waiters[x] is None:
                    waiters[x] = []
                waiters[x].append(t)

    def arrive(t):
        gid = group[t]
        grp_members[gid].append(t)
        grp_arrived[gid] += 1
        if start[t] > grp_max[gid]:
            grp_max[gid] = start[t]
        if grp_arrived[gid] == grp_size[gid]:
            last = max(grp_members[gid], key=lambda m: start[m])
            release = grp_max[gid] + transfer[gid]
            for m in grp_members[gid]:
                release_end(m, release + wait_lag[m], last)

    def became_ready(t):
        q = ready_q.get(lane[t])
        if q is not None:
            heapq.heappush(q, (priority[t], lane_pos[t], t))
        dispatch(lane[t])

    for t in range(n):
        end[t] = _NEG
    for li, q in ready_q.items():
        for t in seqs[li]:
            if not pend_start[t]:
                q.append((priority[t], lane_pos[t], t))
        heapq.heapify(q)
    for li in range(L):
        dispatch(li)

    while heap:
        time, prio, _, t = heapq.heappop(heap)
        li = lane[t]
        if prio != _END:
            started[t] = True
            if not has_launch[t] and lane_pos[t] > enq_pos[li]:
                enq_pos[li] = lane_pos[t]
            if wait_kind[t]:
                resolve_waits(t)
            if group[t] >= 0:
                arrive(t)
            follow(t, start[t], Anchor.START)
            finish_if_ready(t)
            continue
        done[t] = True
        finished += 1
        busy[li] = False
        prev_end[li] = end[t]
        prev_task[li] = t
        if waiters[t]:
            for w in waiters[t]:
                release_end(w, end[t] + wait_lag[w], t)
        follow(t, end[t], Anchor.END)
        dispatch(li)

    if finished != n:
        stuck = [t for t in range(n) if not done[t]][:5]
        names = ", ".join(f"#{t} {g.task_name(t)!r}" for t in stuck)
        raise SimulationError(f"{n - finished} tasks never ran (dependencies wait on each other), e.g. {names}")
    tl.start_ns[:] = start
    tl.end_ns[:] = end
    return tl
