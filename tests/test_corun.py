"""Co-run rate: one process's compute beside a second busy one, calibrated and used by the
CPU data-parallel and tensor-parallel what-ifs (their ranks share one host)."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from daydream.device import load_profile, save_profile
from daydream.errors import DaydreamError
from daydream.graph import build_graph
from daydream.model import LaneKind
from daydream.whatif import predict

from conftest import flat_profile


def test_profile_keeps_corun_and_refuses_bad_ones(tmp_path):
    path = save_profile(dataclasses.replace(flat_profile(), corun=0.8), str(tmp_path / "p.json"))
    assert load_profile(path).corun == 0.8
    doc = json.loads(open(path).read())
    for bad in (0, 1.5, float("nan")):
        doc["corun"] = bad
        open(path, "w").write(json.dumps(doc))
        with pytest.raises(DaydreamError, match="corun"):
            load_profile(path)


@pytest.mark.parametrize("spec", ["data-parallel:workers=2,stragglers=false",
                                  "tensor-parallel:degree=2,stragglers=false,api=megatron"])
def test_ranks_on_one_host_run_the_traced_work_at_the_corun_rate(own_trace, spec):
    """data-parallel and tensor-parallel: every rank's traced thread work (ops and gaps) at the rate."""
    trace = own_trace("mlp")
    spec = [spec]
    _, alone = predict(trace, spec, device=flat_profile())
    _, shared = predict(trace, spec, device=dataclasses.replace(flat_profile(), corun=0.5))
    g, T = alone.graph, alone.graph.tasks
    cpu = [i for i, ln in enumerate(g.lanes) if ln.kind == LaneKind.CPU_THREAD]
    n = build_graph(trace).n_tasks                     # inserted tasks come after the traced ones
    traced = np.flatnonzero(np.isin(T["lane"], cpu) & (T["iteration"] >= 0) & (np.arange(g.n_tasks) < n))
    S = shared.graph.tasks
    assert len(traced) > 0
    assert np.array_equal(S["dur_ns"][traced], np.round(T["dur_ns"][traced] * 2))
    assert np.array_equal(S["gap_ns"][traced], np.round(T["gap_ns"][traced] * 2))
    assert shared.mean_iteration_ns()[1] > 1.5 * alone.mean_iteration_ns()[1]


@pytest.mark.parametrize("opt", ["data-parallel:workers=2,stragglers=false,corun=trace",
                                 "tensor-parallel:degree=2,stragglers=false,api=megatron,corun=trace"])
def test_ranks_on_one_host_run_each_phase_at_its_corun_rate(own_trace, monkeypatch, opt):
    """``corun=trace``: each traced task and the gap before it at its phase's rate (``corun_rates``)."""
    from daydream.model import Phase
    from daydream.optimizations import _corun

    trace = own_trace("mlp")
    _, alone = predict(trace, [opt.replace("corun=trace", "corun=off")], device=flat_profile())
    rates = {Phase.FORWARD: 0.5, Phase.BACKWARD: 0.8, None: 1.0}
    monkeypatch.setattr(_corun, "_measured_phases", lambda ctx, f: rates)
    _, shared = predict(trace, [opt], device=flat_profile())
    g, T, S = alone.graph, alone.graph.tasks, shared.graph.tasks
    cpu = [i for i, ln in enumerate(g.lanes) if ln.kind == LaneKind.CPU_THREAD]
    n = build_graph(trace).n_tasks
    traced = np.flatnonzero(np.isin(T["lane"], cpu) & (T["iteration"] >= 0) & (np.arange(g.n_tasks) < n))
    for phase, factor in ((Phase.FORWARD, 2.0), (Phase.BACKWARD, 1.25), (Phase.OPTIMIZER, 1.0)):
        mine = traced[T["phase"][traced] == phase]
        assert len(mine) > 0
        assert np.array_equal(S["dur_ns"][mine], np.round(T["dur_ns"][mine] * factor))
        assert np.array_equal(S["gap_ns"][mine], np.round(T["gap_ns"][mine] * factor))


def test_corun_factor_measures_two_processes():
    torch = pytest.importorskip("torch")
    from daydream.calibrate_corun import corun_factor

    f = corun_factor(torch)
    assert 0 < f <= 1


def test_corun_factor_pools_the_earlier_sittings_rounds():
    """Two earlier sittings in a slow spell (every round 0.5) outnumber this sitting's rounds: the
    pooled median is theirs; one such sitting among two normal ones keeps it among the normal rounds."""
    torch = pytest.importorskip("torch")
    import os

    from daydream.calibrate_corun import CORUN_SITTING_ROUNDS, corun_factor
    from daydream.opcorun import pooled_rate

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two cores")
    assert corun_factor(torch, earlier=[[0.5] * CORUN_SITTING_ROUNDS] * 2) == 0.5
    assert pooled_rate([0.5] * 5, [0.97, 0.99, 1.0, 0.98, 0.99], [1.0, 0.96, 0.99, 0.99, 1.01]) == 0.98


def test_profile_keeps_the_process_spread_and_refuses_bad_ones(tmp_path):
    path = save_profile(dataclasses.replace(flat_profile(), process_spread=(0.95, 1.05)), str(tmp_path / "p.json"))
    assert load_profile(path).process_spread == (0.95, 1.05)
    doc = json.loads(open(path).read())
    doc["process_spread"] = [1.0, -0.2]
    open(path, "w").write(json.dumps(doc))
    with pytest.raises(DaydreamError, match="process_spread"):
        load_profile(path)


def test_process_spread_times_fresh_pairs_of_processes():
    pytest.importorskip("torch")
    import os

    from daydream.calibrate_corun import process_spread

    if len(os.sched_getaffinity(0)) < 2:
        assert process_spread(1, 0.05) == ()
        return
    got = process_spread(2, 0.05)
    assert len(got) == 4
    assert got[0] + got[1] == pytest.approx(2.0) and got[2] + got[3] == pytest.approx(2.0)
    assert all(0.2 < x < 1.8 for x in got)


def _spin(core, seconds):
    import os
    import time

    os.sched_setaffinity(0, {core})
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_process_spread_retries_a_pair_that_shared_its_core_and_warns():
    """A busy program on the first core for the whole measurement: every try of the pair is
    disturbed (that side gets about half its core), so the pair is tried 1 + retries times and
    the warning names it; the figures are still returned."""
    pytest.importorskip("torch")
    import multiprocessing
    import os

    from daydream.calibrate_corun import process_spread

    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("needs two cores")
    hog = multiprocessing.get_context("fork").Process(target=_spin, args=(cores[0], 60.0))
    hog.start()
    warned = []
    try:
        got = process_spread(1, 0.2, warn=warned.append, retries=1)
    finally:
        hog.terminate()
        hog.join()
    assert len(got) == 2 and sum(got) == pytest.approx(2.0)
    assert len(warned) == 1 and "pair 1" in warned[0] and "all 2 tries" in warned[0]


def test_least_disturbed_prefers_the_first_clean_try():
    from daydream.calibrate_corun import least_disturbed

    clean = [(5, 0.95), (6, 0.99)]
    assert least_disturbed([[(1, 0.5), (2, 1.0)], clean, [(7, 1.0), (8, 1.0)]]) == (clean, True)
    assert least_disturbed([[(1, 0.5), (2, 1.0)]], min_share=0.4) == ([(1, 0.5), (2, 1.0)], True)


def _process_state(pid: int) -> str:
    """Linux's one-letter state of process ``pid`` (``T``: stopped)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(")")[1].split()[0]


def test_corun_rounds_median_of_ratios_spread_over_the_span():
    """Stopped for the 'alone' side (the process's state says so), running for the 'beside'
    one; the median of the rounds' ratios, at most 1; the rounds last at least the span."""
    import subprocess
    import time

    from daydream.opcorun import corun_rounds

    other = subprocess.Popen(["sleep", "60"])
    seen, times = [], iter([5.0, 10.0, 9.0, 10.0, 8.0, 8.0, 7.0, 10.0, 30.0, 10.0])

    def timed(side):
        seen.append((side, _process_state(other.pid)))
        return next(times)

    try:
        t0 = time.perf_counter()
        rate = corun_rounds(other.pid, lambda: timed("alone"), lambda: timed("beside"), rounds=5, span_s=0.5)
        took = time.perf_counter() - t0
    finally:
        other.kill()
        other.wait()
    assert rate == pytest.approx(0.9)          # ratios 0.5, 0.9, 1.0, 0.7, 3.0: median 0.9
    assert took >= 0.5
    assert {s for side, s in seen if side == "alone"} == {"T"}        # stopped
    beside = {s for side, s in seen if side == "beside"}
    assert beside and not beside & {"T", "t"}   # not stopped: running, or asleep in `sleep` (S, or D for a moment)


def test_each_side_of_a_round_follows_an_untimed_warm_up_in_its_own_state():
    """With ``warm``, every round runs warm-up, alone (the other process stopped), warm-up, beside
    (it running): the timed sides never start right after the idle gap between rounds."""
    import subprocess

    from daydream.opcorun import corun_ratios

    other = subprocess.Popen(["sleep", "60"])
    seen = []

    def call(what, value=None):
        seen.append((what, _process_state(other.pid) in ("T", "t")))
        return value

    try:
        ratios = corun_ratios(other.pid, lambda: call("alone", 9.0), lambda: call("beside", 10.0), rounds=3,
                              span_s=0.3, warm=lambda: call("warm"))
    finally:
        other.kill()
        other.wait()
    assert ratios == [0.9, 0.9, 0.9]
    assert seen == [("warm", True), ("alone", True), ("warm", False), ("beside", False)] * 3


def test_a_sequence_beside_its_twin_runs_at_most_as_fast_as_alone():
    """Real: a twin process on the other core; the rate is in (0, 1] and this process's cores are given back."""
    import os

    from daydream import opcorun

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two cores")
    before = os.sched_getaffinity(0)
    mm = '["aten::mm", [[64, 256], [256, 256]], ["float", "float"], null, null]'
    rate = opcorun.sequence_corun([mm] * 4, threads=1, rounds=2)
    assert rate is not None and 0 < rate <= 1
    assert os.sched_getaffinity(0) == before


def test_sequence_calls_say_which_signatures_they_rebuilt():
    """A signature that cannot be rebuilt is left out, and ``kept`` still maps each call to its own."""
    from daydream import opcorun, opseq

    mm = '["aten::mm", [[2, 2], [2, 2]], ["float", "float"], null, null]'
    bad = '["aten::no_such_op", [[2]], ["float"], null, null]'
    calls, kept = opseq._sequence_calls([mm, bad, mm], kept=True)
    assert len(calls) == 2 and kept == [0, 2]
    row = opcorun._labelled_pass_ns(calls, [1, 0], 3)
    assert row.shape == (3,) and row[0] > 0 and row[1] > 0 and row[2] == row[0] + row[1]


def test_a_labelled_sequence_beside_its_twin_gives_a_rate_per_label_and_one_for_the_pass():
    """Real: each label's calls are timed within the same passes; every rate is in (0, 1]."""
    import os

    from daydream import opcorun

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two cores")
    mm = '["aten::mm", [[64, 256], [256, 256]], ["float", "float"], null, null]'
    add = '["aten::add", [[256, 256], [256, 256]], ["float", "float"], null, null]'
    rates = opcorun.sequence_corun([mm, add, mm, add], threads=1, rounds=2, labels=["f", "o", "f", "o"])
    assert set(rates) == {"f", "o", None} and all(0 < r <= 1 for r in rates.values())
