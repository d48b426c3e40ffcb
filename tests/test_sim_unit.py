"""Simulator unit tests on hand-made graphs, with exact expected times (ns)."""
from __future__ import annotations

import pytest

from daydream.errors import SimulationError
from daydream.graph.graph import Anchor, EdgeKind, WaitKind
from daydream.model import EventKind, LaneKind
from daydream.sim import simulate


def times(res, *tasks):
    return [(int(res.start_ns[t]), int(res.end_ns[t])) for t in tasks]


def test_lane_serialisation_and_gaps_kept(maker):
    cpu = maker.lane()
    a = maker.task(cpu, 10, gap=5)
    b = maker.task(cpu, 20, gap=3)
    c = maker.task(cpu, 1, gap=0)
    res = simulate(maker.g)
    assert times(res, a, b, c) == [(5, 15), (18, 38), (38, 39)]


def test_kernels_overlap_across_streams_but_not_within(maker):
    cpu = maker.lane()
    s1, s2 = maker.lane(LaneKind.GPU_STREAM), maker.lane(LaneKind.GPU_STREAM)
    l1 = maker.task(cpu, 4)
    l2 = maker.task(cpu, 4, gap=1)
    l3 = maker.task(cpu, 4, gap=1)
    k1 = maker.task(s1, 100)
    k2 = maker.task(s2, 50)
    k3 = maker.task(s1, 10)
    maker.launch(l1, k1, lag=2)
    maker.launch(l2, k2, lag=2)
    maker.launch(l3, k3, lag=2)
    res = simulate(maker.g)
    # k2 overlaps k1 (other stream); k3 queues behind k1 on its stream
    assert times(res, k1, k2, k3) == [(2, 102), (7, 57), (102, 112)]


def test_stream_sync_waits_for_last_kernel_after_edit(maker):
    cpu = maker.lane()
    s = maker.lane(LaneKind.GPU_STREAM)
    l1 = maker.task(cpu, 5, kind=EventKind.RUNTIME)
    sync = maker.task(cpu, 2, gap=1, kind=EventKind.SYNC)
    after = maker.task(cpu, 3, gap=4)
    k1 = maker.task(s, 30)
    maker.launch(l1, k1, lag=1)
    g = maker.g
    g.tasks["wait_kind"][sync] = WaitKind.STREAM
    g.tasks["wait_lane"][sync] = s
    g.tasks["wait_lag_ns"][sync] = 3
    res = simulate(g)
    assert times(res, k1, sync, after) == [(1, 31), (6, 34), (38, 41)]

    # edit: a second launch before the sync puts another kernel on the stream;
    # the sync must now wait for it, not for the kernel the trace had last.
    l2 = maker.task(cpu, 5, kind=EventKind.RUNTIME)
    g.lane_tasks[cpu] = [l1, l2, sync, after]
    k2 = maker.task(s, 40)
    maker.launch(l2, k2, lag=1)
    res = simulate(g)
    # l2 runs 5..10, sync starts 11; k2 queues behind k1: 31..71; sync ends 71+3
    assert times(res, l2, k2, sync, after) == [(5, 10), (31, 71), (11, 74), (78, 81)]


def test_device_sync_waits_for_every_stream(maker):
    cpu = maker.lane()
    s1, s2 = maker.lane(LaneKind.GPU_STREAM), maker.lane(LaneKind.GPU_STREAM)
    l1 = maker.task(cpu, 2)
    l2 = maker.task(cpu, 2)
    sync = maker.task(cpu, 1, kind=EventKind.SYNC)
    k1, k2 = maker.task(s1, 10), maker.task(s2, 50)
    maker.launch(l1, k1)
    maker.launch(l2, k2)
    maker.g.tasks["wait_kind"][sync] = WaitKind.DEVICE
    res = simulate(maker.g)
    assert times(res, sync) == [(4, 52)]


def test_collective_waits_for_slowest_rank(maker):
    c0, c1 = maker.lane(rank=0), maker.lane(rank=1)
    n0, n1 = maker.lane(LaneKind.GPU_STREAM, rank=0), maker.lane(LaneKind.GPU_STREAM, rank=1)
    a0 = maker.task(c0, 10)
    a1 = maker.task(c1, 40)          # rank 1 is slower to reach the collective
    p0 = maker.task(n0, 100, kind=EventKind.COLLECTIVE, group=0)
    p1 = maker.task(n1, 100, kind=EventKind.COLLECTIVE, group=0)
    maker.launch(a0, p0, lag=10)
    maker.launch(a1, p1, lag=40)
    import numpy as np
    maker.g.group_transfer_ns = np.array([25], np.int64)
    maker.g.tasks["dur_ns"][[p0, p1]] = 25
    res = simulate(maker.g)
    # both parts end when the last arrives (t=40) plus the transfer (25)
    assert times(res, p0, p1) == [(10, 65), (40, 65)]


def test_edge_anchors_and_end_constraints(maker):
    cpu, gpu = maker.lane(), maker.lane(LaneKind.GPU_STREAM)
    call = maker.task(cpu, 3, kind=EventKind.RUNTIME)    # blocking copy call
    nxt = maker.task(cpu, 2)
    copy = maker.task(gpu, 20, kind=EventKind.MEMCPY)
    maker.launch(call, copy, lag=1)                      # from the call's start
    maker.edge(copy, call, EdgeKind.SYNC, lag=2, target=Anchor.END)
    res = simulate(maker.g)
    assert times(res, copy, call, nxt) == [(1, 21), (0, 23), (23, 25)]


def test_critical_path_follows_what_released_each_time(maker):
    cpu, gpu = maker.lane(), maker.lane(LaneKind.GPU_STREAM)
    l1 = maker.task(cpu, 2, kind=EventKind.RUNTIME)
    sync = maker.task(cpu, 1, kind=EventKind.SYNC)
    k = maker.task(gpu, 100)
    maker.launch(l1, k)
    maker.g.tasks["wait_kind"][sync] = WaitKind.STREAM
    maker.g.tasks["wait_lane"][sync] = gpu
    res = simulate(maker.g)
    assert res.critical_path(last=sync) == [l1, k, sync]
    util = res.lane_utilisation()
    assert util[gpu] == 1.0


def test_deadlock_is_reported(maker):
    cpu = maker.lane()
    a = maker.task(cpu, 1)
    b = maker.task(cpu, 1)
    maker.edge(b, a)       # a waits for b, which runs after a on the lane
    with pytest.raises(SimulationError, match="never ran"):
        simulate(maker.g)
