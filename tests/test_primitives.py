"""Graph-transformation primitives: exact times after each edit."""
from __future__ import annotations

import pytest

from daydream.errors import CycleError, GraphError
from daydream.graph.graph import Anchor, EdgeKind
from daydream.model import EventKind, LaneKind, Phase
from daydream.primitives import (LanePolicy, add_dependency, check_acyclic, insert, remove, scale,
                                 select, set_policy, set_priority)
from daydream.sim import simulate


@pytest.fixture
def pipeline(maker):
    """CPU launches three kernels on one stream; the last CPU op waits for the last kernel."""
    cpu, gpu = maker.lane(), maker.lane(LaneKind.GPU_STREAM)
    calls = [maker.task(cpu, 2, kind=EventKind.RUNTIME, name="launch", phase=Phase.FORWARD) for _ in range(3)]
    tail = maker.task(cpu, 1, name="tail", phase=Phase.OTHER)
    ks = [maker.task(gpu, d, name=f"k{i}", phase=Phase.BACKWARD if i else Phase.FORWARD,
                     layer=maker.g.layers.intern(f"block.{i}")) for i, d in enumerate((10, 20, 30))]
    for c, k in zip(calls, ks):
        maker.launch(c, k)
    maker.edge(ks[-1], tail)
    return maker.g, cpu, gpu, calls, ks, tail


def test_select_by_each_criterion(pipeline):
    g, cpu, gpu, calls, ks, tail = pipeline
    assert select(g, kind="kernel").tolist() == ks
    assert select(g, phase=["backward"]).tolist() == ks[1:]
    assert select(g, layer=r"block\.[12]").tolist() == ks[1:]
    assert select(g, name="^k").tolist() == ks
    assert select(g, lane="gpu_stream").tolist() == ks
    assert select(g, lane=[cpu]).tolist() == calls + [tail]
    assert select(g, rank=0, kind=EventKind.RUNTIME).tolist() == calls
    with pytest.raises(GraphError, match="valid: forward"):
        select(g, phase="sideways")


def test_scale_then_simulate(pipeline):
    g, *_, ks, tail = pipeline
    assert simulate(g).end_ns[tail] == 61          # kernels 0..10, 10..30, 30..60; tail 60..61
    scale(g, ks, 0.5)
    assert simulate(g).end_ns[tail] == 31


def test_remove_bridges_dependencies(pipeline):
    g, cpu, gpu, calls, ks, tail = pipeline
    remove(g, [ks[2]])                              # tail now waits for what k2 waited for: its launch
    res = simulate(g)
    tail = select(g, name="tail")[0]
    assert res.start_ns[tail] == 6 and g.n_tasks == 6
    bridged = [(int(s), int(a)) for s, d, a in zip(g.edges["src"], g.edges["dst"], g.edges["anchor"]) if d == tail]
    assert bridged == [(calls[2], Anchor.START)]


def test_remove_keep_gap_moves_cpu_time(maker):
    cpu = maker.lane()
    maker.task(cpu, 5)
    b = maker.task(cpu, 5, gap=7)
    maker.task(cpu, 5, gap=1)
    remove(maker.g, [b], keep_gap=True)
    res = simulate(maker.g)
    assert res.start_ns.tolist() == [0, 13]


def test_insert_with_dependencies(pipeline):
    g, cpu, gpu, calls, ks, tail = pipeline
    cast = insert(g, gpu, dur_ns=4, name="cast", after=ks[0], deps=[calls[0]])
    res = simulate(g)
    assert (res.start_ns[cast], res.end_ns[cast]) == (10, 14)
    assert res.end_ns[tail] == 65


def test_insert_refuses_a_cycle_and_names_tasks(pipeline):
    g, cpu, gpu, calls, ks, tail = pipeline
    n = g.n_tasks
    with pytest.raises(CycleError, match="'tail'.*would create a cycle") as err:
        insert(g, cpu, dur_ns=1, name="bad", before=calls[0], deps=[tail])
    assert g.n_tasks == n                             # nothing half-inserted
    with pytest.raises(CycleError) as err:
        add_dependency(g, tail, calls[0])
    assert err.value.tasks == (tail, calls[0])


def test_check_acyclic_allows_blocking_copy_but_not_cycles(maker):
    cpu, gpu = maker.lane(), maker.lane(LaneKind.GPU_STREAM)
    call, copy = maker.task(cpu, 3), maker.task(gpu, 9, kind=EventKind.MEMCPY)
    maker.launch(call, copy)
    maker.edge(copy, call, EdgeKind.SYNC, target=Anchor.END)
    check_acyclic(maker.g)
    maker.edge(copy, call, EdgeKind.DATA)               # start of call after copy's end: a cycle
    with pytest.raises(CycleError):
        check_acyclic(maker.g)


def test_priority_lane_runs_ready_high_priority_first(maker):
    cpu, net = maker.lane(), maker.lane(LaneKind.COMM)
    a = maker.task(cpu, 10)
    b = maker.task(cpu, 10)
    low = maker.task(net, 50, name="low")     # ready at 0
    mid = maker.task(net, 5, name="mid")      # ready at 10
    high = maker.task(net, 5, name="high")    # ready at 20
    maker.edge(a, mid)
    maker.edge(b, high)
    g = maker.g
    set_policy(g, net, LanePolicy.PRIORITY)
    set_priority(g, [low, mid, high], [2, 1, 0])
    res = simulate(g)
    assert [int(res.start_ns[t]) for t in (low, high, mid)] == [0, 50, 55]
    set_policy(g, net, LanePolicy.FIFO)
    res = simulate(g)
    assert [int(res.start_ns[t]) for t in (low, mid, high)] == [0, 50, 55]
