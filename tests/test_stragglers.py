"""Expected waits for the slowest worker at the barriers of a synchronous job."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daydream.model import EventKind
from daydream.sim import simulate
from daydream.whatif import predict
from optimizations._stragglers import WAIT_NAME, expected_waits_ns, insert_barrier_waits, wait_for_stragglers


def test_waits_are_the_expected_maximum_over_the_other_workers_minus_ones_own():
    # x = 10: E[max(10, X)] = (10 + 20 + 30) / 3 = 20; x = 20: (20 + 20 + 30) / 3; x = 30: never waits
    assert expected_waits_ns([10, 20, 30], 2) == pytest.approx([10.0, 10 / 3, 0.0])
    # 3 workers: the others' maximum is 30 unless both draw 10 or 20: P(max <= 20) = 4/9
    assert expected_waits_ns([10, 20, 30], 3)[1] == pytest.approx((20 * 4 / 9 + 30 * 5 / 9) - 20)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 1000), min_size=2, max_size=5), st.integers(1, 4))
def test_mean_wait_is_expected_maximum_minus_mean_by_enumeration(xs, workers):
    draws = list(itertools.product(xs, repeat=workers))
    expected = np.mean([max(d) for d in draws]) - np.mean(xs)
    w = expected_waits_ns(xs, workers)
    assert w.mean() == pytest.approx(expected, abs=1e-6)
    assert (w >= -1e-9).all()
    order = np.argsort(xs, kind="stable")                # the slower a worker was, the less it waits
    assert (np.diff(w[order]) <= 1e-9).all()


def test_steady_iterations_wait_nothing():
    assert expected_waits_ns([5, 5, 5, 5], 8).tolist() == [0.0] * 4


def _barrier_graph(maker, starts, work):
    """One lane: per iteration a traced op (at ``starts``) then a 'collective' it gates."""
    lane = maker.lane()
    barriers = []
    for i, (s, w) in enumerate(zip(starts, work)):
        op = maker.task(lane, w, traced_start_ns=s, iteration=i)
        coll = maker.task(lane, 1, name="all-reduce", iteration=i)
        barriers.append((op, coll))
    return lane, barriers


def test_barrier_waits_come_from_segments_between_barriers(maker):
    # segments 10, 30, 20 (first barrier: none, gets the mean); others drawn from {10, 30, 20}
    lane, barriers = _barrier_graph(maker, [0, 10, 40, 60], [5, 5, 5, 5])
    waits = insert_barrier_waits(maker.g, barriers, 2)
    w = expected_waits_ns([10, 30, 20], 2)
    got = maker.g.tasks["dur_ns"][waits].tolist()
    assert got == [int(round(w.mean()))] + [int(round(x)) for x in w if x >= 1]
    seq = maker.g.lane_tasks[lane]
    for t in waits:                                       # each wait right before its collective
        assert maker.g.task_name(seq[seq.index(t) + 1]) == "all-reduce"
        assert maker.g.tasks["kind"][t] == EventKind.SYNC and maker.g.task_name(t) == WAIT_NAME
    assert simulate(maker.g).end_ns.max() == 4 * (5 + 1) + sum(got)


def test_a_lasting_process_spread_adds_its_share_of_each_segment(maker):
    # segments 10, 30, 20 (steady apart from that), the slowest worker lastingly 10 % slower:
    # each wait grows by a tenth of the segment before it, the first by a tenth of the mean
    _, barriers = _barrier_graph(maker, [0, 10, 40, 60], [5, 5, 5, 5])
    plain = expected_waits_ns([10, 30, 20], 2)
    waits = insert_barrier_waits(maker.g, barriers, 2, slower_by=0.1)
    got = maker.g.tasks["dur_ns"][waits].tolist()
    with_spread = plain + 0.1 * np.array([10, 30, 20])
    assert got == [int(round(with_spread.mean()))] + [int(round(x)) for x in with_spread]


def test_data_parallel_adds_the_profiles_process_spread(own_trace, profile):
    import dataclasses

    trace = own_trace("mlp")
    spread = dataclasses.replace(profile, process_spread=(0.8, 1.2))     # slowest of 2: +10 %
    a, _ = predict(trace, ["data-parallel:workers=2"], device=profile)
    b, _ = predict(trace, ["data-parallel:workers=2"], device=spread)
    c, _ = predict(trace, ["data-parallel:workers=2,stragglers=false"], device=spread)
    assert b.predicted_ms > a.predicted_ms > c.predicted_ms
    assert any("process-to-process spread: +10.0 %" in n for n in b.notes)


def test_one_worker_inserts_nothing(maker):
    _, barriers = _barrier_graph(maker, [0, 10, 40], [1, 1, 1])
    assert insert_barrier_waits(maker.g, barriers, 1) == []


def test_data_parallel_waits_for_the_slowest_worker_from_the_traces_spread(own_trace, profile):
    trace = own_trace("mlp")
    on, res = predict(trace, ["data-parallel:workers=8"], device=profile)
    off, _ = predict(trace, ["data-parallel:workers=8,stragglers=false"], device=profile)
    g = res.graph
    waits = [t for t in range(g.n_tasks) if g.task_name(t) == WAIT_NAME]
    # one barrier per iteration (no buffers to broadcast); the slowest iteration waits for no one
    assert 0 < len(waits) <= trace.ranks[0].n_iterations
    assert len(set(g.tasks["iteration"][waits].tolist())) == len(waits)
    for t in waits:                                       # before the iteration's last all-reduce
        seq = g.lane_tasks[int(g.tasks["lane"][t])]
        assert g.task_name(seq[seq.index(t) + 1]) == "all-reduce"
    assert on.predicted_ms > off.predicted_ms
    assert any("slowest of 8 workers" in n for n in on.notes)



def test_a_multi_rank_trace_gets_no_waits(maker):
    from types import SimpleNamespace

    _, barriers = _barrier_graph(maker, [0, 10, 40], [1, 1, 1])
    notes = []
    ranks = [SimpleNamespace(world_size=lambda: 2)] * 2
    ctx = SimpleNamespace(graph=maker.g, trace=SimpleNamespace(ranks=ranks), note=notes.append)
    wait_for_stragglers(ctx, barriers, 8, "data-parallel")
    assert not any(maker.g.task_name(t) == WAIT_NAME for t in range(maker.g.n_tasks))
    assert "already include waits" in notes[0]
