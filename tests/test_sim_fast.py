"""The compiled simulator core gives exactly the reference simulator's results."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daydream.errors import SimulationError
from daydream.graph.graph import Anchor, EdgeKind, WaitKind
from daydream.model import EventKind, LaneKind
from daydream.primitives import LanePolicy, set_policy
from daydream.sim.core import fast_core_available, flatten_lanes, simulate_fast
from daydream.sim.reference import simulate_reference

from conftest import GraphMaker, public_traces

pytestmark = pytest.mark.skipif(not fast_core_available(), reason="daydream._simcore is not built")

_FIELDS = ("start_ns", "end_ns", "start_by", "start_by_start", "end_by")


def _outcome(sim, g):
    try:
        tl = sim(g)
    except SimulationError as exc:
        return ("error", str(exc))
    return tuple(getattr(tl, k).tolist() for k in _FIELDS)


@st.composite
def random_graphs(draw):
    """Multi-rank graphs with launches, END-target edges, dynamic syncs, collectives, priority lanes."""
    m = GraphMaker()
    n_ranks = draw(st.integers(1, 3))
    lanes = []
    for r in range(n_ranks):
        for k in draw(st.lists(st.sampled_from([LaneKind.CPU_THREAD, LaneKind.GPU_STREAM]), min_size=1, max_size=3)):
            lanes.append(m.lane(k, rank=r))
    gpu = [li for li in lanes if m.g.lanes[li].kind == LaneKind.GPU_STREAM]
    n = draw(st.integers(1, 40))
    for _ in range(n):
        li = draw(st.sampled_from(lanes))
        cols = {}
        if m.g.lanes[li].kind == LaneKind.CPU_THREAD and gpu and draw(st.integers(0, 5)) == 0:
            mine = [x for x in gpu if m.g.lanes[x].rank == m.g.lanes[li].rank] or gpu
            wk = draw(st.sampled_from([WaitKind.STREAM, WaitKind.DEVICE]))
            cols = {"wait_kind": int(wk), "wait_lane": draw(st.sampled_from(mine)),
                    "wait_lag_ns": draw(st.integers(0, 5))}
        m.task(li, draw(st.integers(0, 50)), gap=draw(st.integers(0, 10)),
               kind=EventKind.SYNC if cols else None, priority=draw(st.integers(0, 3)), **cols)
    for dst in range(1, n):
        for src in draw(st.lists(st.integers(0, dst - 1), max_size=2, unique=True)):
            src_cpu = m.g.lanes[int(m.g.tasks["lane"][src])].kind == LaneKind.CPU_THREAD
            dst_gpu = m.g.lanes[int(m.g.tasks["lane"][dst])].kind == LaneKind.GPU_STREAM
            if src_cpu and dst_gpu and draw(st.booleans()):
                m.launch(src, dst, lag=draw(st.integers(0, 5)))
                continue
            m.edge(src, dst, EdgeKind.DATA, lag=draw(st.integers(-5, 20)),
                   anchor=draw(st.sampled_from([Anchor.START, Anchor.END])),
                   target=draw(st.sampled_from([Anchor.START, Anchor.START, Anchor.END])))
    groups = []
    for _ in range(draw(st.integers(0, 3)) if n >= 2 else 0):
        members = draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=4, unique=True))
        if draw(st.booleans()):   # the lanes' last tasks: fewer mutual waits
            members = [seq[-1] for seq in m.g.lane_tasks if seq][:4]
        lane_of = m.g.tasks["lane"]   # one part per lane, else parts wait on each other
        free = list({int(lane_of[t]): t for t in members if m.g.tasks["group"][t] < 0}.values())
        if len(free) >= 2:
            m.g.tasks["group"][free] = len(groups)
            m.g.tasks["wait_lag_ns"][free] = draw(st.integers(0, 5))
            groups.append(draw(st.integers(0, 30)))
    m.g.group_transfer_ns = np.asarray(groups, np.int64)
    for li in draw(st.lists(st.sampled_from(lanes), max_size=2, unique=True)):
        set_policy(m.g, li, LanePolicy.PRIORITY)
    return m.g


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_graphs())
def test_fast_core_equals_reference_on_random_graphs(g):
    assert _outcome(simulate_fast, g) == _outcome(simulate_reference, g)


@pytest.mark.parametrize("name", ["sampled_rank-0.json.gz", "nccl_data.json.gz", "dlrm_kineto.tar.gz"])
def test_fast_core_equals_reference_on_public_traces(name):
    from daydream.graph import build_graph
    from daydream.loader import load_trace

    paths = [p for p in public_traces() if p.name == name]
    if not paths:
        pytest.skip("public trace absent")
    g = build_graph(load_trace(paths[0]))
    assert _outcome(simulate_fast, g) == _outcome(simulate_reference, g)


def test_deadlock_message_is_the_same(maker):
    cpu = maker.lane()
    a, b = maker.task(cpu, 5), maker.task(cpu, 5)
    maker.edge(b, a)
    with pytest.raises(SimulationError) as fast:
        simulate_fast(maker.g)
    with pytest.raises(SimulationError) as ref:
        simulate_reference(maker.g)
    assert str(fast.value) == str(ref.value)


def test_flatten_lanes_accepts_lists_and_arrays():
    for lanes in ([[2, 0], [], [1]], [np.array([2, 0]), np.array([], np.int64), np.array([1])]):
        ptr, flat = flatten_lanes(lanes)
        assert ptr.tolist() == [0, 2, 2, 3] and flat.tolist() == [2, 0, 1]
