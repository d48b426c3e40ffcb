"""Work resumed after its lane sat idle: the profile's factors and where the what-ifs use them."""
from __future__ import annotations

import dataclasses

import pytest

from conftest import assert_profile_refuses, flat_profile
from daydream.device import load_profile, save_profile
from daydream.optimizations._resume import add_resume_costs
from daydream.optimizations.hydra import Schedule, ShardCosts, device_lanes, schedule_graph
from daydream.sim import simulate
from daydream.whatif import predict

#: forward, backward, optimizer per shard; 1 ns transfers (see test_hydra's chain)
COSTS = ShardCosts((10, 12), (20, 20), (5, 5), (100,), (2, 2))


def test_hydra_chain_the_backward_after_the_wait_takes_the_factor_exact():
    # F0 0-10, act 10-11, F1 11-23, B1 23-43, grad 43-44, B0 44-64, O0 64-69: device 0 sits idle
    # 34 ns before B0 (factor 1.5: 20 -> 30); device 1's tasks follow each other, its first has no gap
    g = schedule_graph(COSTS, 1, lambda _b: 1, Schedule.MODEL_PARALLEL)
    dev = dataclasses.replace(flat_profile(), resume=((34.0, 1.5),))
    assert add_resume_costs(g, device_lanes(g), simulate(g), dev) == (1, 10)
    res = simulate(g)
    start = {g.task_name(t): int(res.start_ns[t]) for t in range(g.n_tasks)}
    assert start["model 0 optimizer shard 0"] == 74 and res.makespan_ns == 79
    assert add_resume_costs(g, device_lanes(g), res, flat_profile()) == (0, 0)     # no figures: nothing


def test_hydra_step_repeated_device_1_s_first_forward_follows_its_idle_time_since_the_step_before():
    # the chain above, one step every 69 ns: device 1 ends its step with O1 at 48 and starts the
    # next with F1 at 69 + 11, 32 ns idle (12 -> 18); device 0 runs O0 up to the step's end
    g = schedule_graph(COSTS, 1, lambda _b: 1, Schedule.MODEL_PARALLEL)
    dev = dataclasses.replace(flat_profile(), resume=((32.0, 1.5),))
    res = simulate(g)
    assert add_resume_costs(g, device_lanes(g), res, dev, period_ns=res.makespan_ns) == (2, 16)
    assert simulate(g).makespan_ns == 69 + 6 + 10


def test_profile_keeps_resume_points_and_refuses_bad_ones(tmp_path):
    path = save_profile(dataclasses.replace(flat_profile(), resume=((1e6, 1.05), (4e6, 1.2))), str(tmp_path / "p.json"))
    assert load_profile(path).resume_factor(2.5e6) == pytest.approx(1.125)
    assert_profile_refuses(path, "resume", (([[4e6, 1.2], [1e6, 1.05]], "resume: gaps must increase"),
                                            ([[1e6, 0.9]], "resume needs"), ([[0.0, 1.1]], "resume needs")))


@pytest.mark.parametrize("spec", ["hydra:models=2,devices=2,schedule=model-parallel,corun=off",
                                  "pipeline:stages=2,microbatches=4,schedule=gpipe,corun=off"])
def test_whatifs_of_ranks_that_wait_lengthen_the_resumed_work(own_trace, spec):
    base = flat_profile(allreduce=(1e9, 10_000.0))
    base = dataclasses.replace(base, p2p={"gloo": (1e9, 10_000.0)})
    plain, _ = predict(own_trace("mlp"), [spec], device=base)
    resumed, _ = predict(own_trace("mlp"), [spec], device=dataclasses.replace(base, resume=((1e5, 1.2),)))
    assert resumed.predicted_ms > plain.predicted_ms
    assert any("sat idle" in n and "resume factors" in n for n in resumed.notes)
    assert not any("sat idle" in n for n in plain.notes)


def test_calibration_measures_factors_by_gap():
    torch = pytest.importorskip("torch")
    from daydream.calibrate_cycle import RESUME_GAPS_MS, resume_points

    pts = resume_points(torch, tries=3)
    assert [g for g, _ in pts] == [g * 1e6 for g in RESUME_GAPS_MS]
    assert all(1.0 <= f < 5.0 for _, f in pts)


def test_calibration_pools_the_cold_state_figures_over_sittings_spread_over_its_run(monkeypatch):
    import daydream.calibrate as cal
    from daydream.calibrate_cycle import CYCLE_COPIES, RESUME_GAPS_MS
    from daydream.calibrate_procs import HandoverSitting

    # three sittings: the second falls in a spell that doubles every resumed and cycled time
    slow = iter([1.0, 2.0, 1.0])
    cycle_calls, resume_calls = [], []

    def cycle_times(torch, rounds):
        cycle_calls.append(rounds)
        k = next(slow)
        return {n: [k * (100.0 + 10 * (n > 1))] * rounds for n in CYCLE_COPIES}

    def resume_times(torch, tries):
        resume_calls.append(tries)
        return {g: [100.0 * (1 + (g >= 4.0)) * (2.0 if len(resume_calls) == 2 and g else 1.0)] * tries
                for g in (0.0, *RESUME_GAPS_MS)}

    handover_calls = []

    def handover_sitting(steps):     # the spell's sitting catches three stalls of its six hand-overs
        handover_calls.append(steps)
        times = [2000.0] * 3 + [20.0] * 3 if len(handover_calls) == 2 else [20.0] * 6
        return HandoverSitting(tuple(times), (100.0 * len(handover_calls),), (50.0,))

    p2p_calls = []

    def gloo_fit(sizes, kind):       # the spell's sitting reads every point-to-point figure high
        p2p_calls.append((tuple(sizes), kind))
        k = 3.0 if len(p2p_calls) == 2 else 1.0 + 0.1 * len(p2p_calls)
        return {"p2p": (1e9 / k, k * 60e3), "p2p_preposted": k * 60e3, "p2p_land": ((16384, k * 100.0),)}

    monkeypatch.setattr(cal, "cycle_times", cycle_times)
    monkeypatch.setattr(cal, "resume_times", resume_times)
    monkeypatch.setattr(cal, "handover_sitting", handover_sitting)
    monkeypatch.setattr(cal, "gloo_fit", gloo_fit)
    said = []
    sittings = cal._Sittings(None, said.append, corun=False, cold=True, quick=False, handover=True,
                             p2p_sizes=(1024, 65536))
    sittings.take()
    sittings.take()
    sittings.take(last=True)
    sittings.take(last=True)         # no more than the calibration's sittings
    assert cycle_calls == [9, 9, 9] and resume_calls == [14, 14, 14] and handover_calls == [80, 80, 80]
    assert [f for _, f in sittings.cycle()] == [1.0, 1.1, 1.1, 1.1]
    assert [f for _, f in sittings.resume()] == [1.0, 1.0, 1.0, 2.0, 2.0]
    assert sittings.handover_ns(float("inf")) == {"gloo": (3 * 2000.0 + 15 * 20.0) / 18}
    assert sittings.post_ns() == {"gloo": (200.0, 50.0)}       # the medians of the pooled posts
    assert p2p_calls == [((1024, 65536), "p2p")] * 3
    p2p = sittings.p2p()                                        # each figure the median of the sittings
    assert p2p["p2p_preposted"] == {"gloo": pytest.approx(1.3 * 60e3)}
    assert p2p["p2p"]["gloo"] == pytest.approx((1e9 / 1.3, 1.3 * 60e3))
    assert [(x, round(y, 6)) for x, y in p2p["p2p_land"]["gloo"]] == [(16384, 130.0)]
    assert said[:2] == ["work resumed after an idle gap (sitting 1 of 3)",
                        "training steps of several model copies in turn (sitting 1 of 3)"]
