"""A rank's pause cut from the other ranks of its job (``daydream.loader.pauses.cut_peer_pauses``)."""
from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from daydream.analysis import replay
from daydream.loader import load_trace
from daydream.loader.pauses import PAUSE_NAME, PAUSES_KEY, PEER_PAUSES_KEY, cut_peer_pauses
from daydream.validate import replay_rank0


def _rank(pauses, starts, durs, bounds):
    return SimpleNamespace(meta={PAUSES_KEY: pauses} if pauses else {},
                           cols={"start_ns": np.array(starts), "dur_ns": np.array(durs)},
                           boundaries_ns=np.array(bounds), fwdbwd=np.array([[150, 0, 1250, 0]], np.int64))


def test_a_peer_pause_is_cut_from_the_other_rank_on_its_clock():
    # rank 1 paused at 100-1200 (its own clock before its cut); rank 0 waited in an op 110-1250
    r0 = _rank(None, [0, 100, 110, 1300], [100, 10, 1140, 100], [0, 100, 1300, 1400])
    r1 = _rank([[100, 1200]], [0, 100, 200], [100, 100, 100], [0, 100, 200, 300])
    assert cut_peer_pauses([r0, r1]) == 1
    assert r0.cols["start_ns"].tolist() == [0, 100, 100, 200]
    assert r0.cols["dur_ns"].tolist() == [100, 0, 50, 100]
    assert np.diff(r0.boundaries_ns).tolist() == [100, 100, 100]
    assert r0.fwdbwd.tolist() == [[100, 0, 150, 0]] and r0.meta[PEER_PAUSES_KEY] == [[100, 1200]]
    assert r1.cols["start_ns"].tolist() == [0, 100, 200] and PEER_PAUSES_KEY not in r1.meta


def test_a_peer_pause_maps_through_the_ranks_own_pauses():
    # rank 0 paused 50-60 itself: rank 1's pause at 100-200 lies at 90-190 on rank 0's cut clock
    r0 = _rank([[50, 60]], [0, 90, 200], [40, 150, 10], [0, 40, 240])
    r1 = _rank([[100, 200]], [0], [300], [0, 300])
    cut_peer_pauses([r0, r1])
    assert r0.meta[PEER_PAUSES_KEY] == [[90, 190]] and r0.boundaries_ns.tolist() == [0, 40, 140]
    assert r1.meta[PEER_PAUSES_KEY] == [[50, 60]]


def test_ranks_without_pauses_are_untouched():
    r0, r1 = _rank(None, [0], [5], [0, 5]), _rank(None, [0], [7], [0, 7])
    assert cut_peer_pauses([r0, r1]) == 0 and r0.cols["start_ns"].tolist() == [0]


def _write_rank(path, rank, events):
    evs = [{"ph": "X", "cat": "cpu_op", "name": n, "ts": ts, "dur": dur, "pid": 10 + rank, "tid": 10 + rank}
           for n, ts, dur in events]
    path.write_text(json.dumps({"traceEvents": evs, "distributedInfo": {"rank": rank, "world_size": 2}}))
    return path


@pytest.fixture
def paused_job(tmp_path):
    """Two ranks, us: rank 1 pauses 1.1 ms before its second step; rank 0 waits for it in that step."""
    steps = [("ProfilerStep#1", 0, 100), ("ProfilerStep#3", 1300, 100)]
    r0 = _write_rank(tmp_path / "job.rank0.json", 0, steps + [("ProfilerStep#2", 100, 1200), ("aten::mm", 100, 10),
                                                              ("c10d::allreduce_", 110, 1140)])
    r1 = _write_rank(tmp_path / "job.rank1.json", 1, steps + [(PAUSE_NAME, 100, 1100), ("ProfilerStep#2", 1200, 100),
                                                              ("c10d::allreduce_", 1210, 40)])
    return r0, r1


def test_a_job_loads_with_each_ranks_pause_cut_from_the_others(paused_job):
    trace = load_trace(list(paused_job))
    assert [r.iteration_times_ns().tolist() for r in trace] == [[100_000] * 3, [100_000] * 3]


def test_the_validation_measures_a_runs_rank0_without_its_peers_pauses(paused_job):
    rank0 = paused_job[0]
    assert replay(rank0)[0].measured_ms == pytest.approx(0.65)      # (1.2 + 0.1) / 2: the wait kept
    assert replay_rank0(rank0, 2)[0].measured_ms == pytest.approx(0.1)


def test_a_replay_of_the_job_builds_its_graph_from_the_cut_ranks(paused_job):
    # the graph is built rank by rank while loading, before the cut: it must be built again
    report = replay(list(paused_job))[0]
    assert report.measured_ms == pytest.approx(0.1)
