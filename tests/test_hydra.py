"""``hydra``: balanced shards, exact schedule makespans, what-if on the MLP trace, the real 2-process run."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daydream.graph import build_graph
from daydream.model import EventKind
from daydream.optimizations import NotApplicable, OptionError
from daydream.optimizations._optstep import CallCosts, call_costs
from daydream.optimizations.hydra import (Schedule, ShardCosts, balanced_split, layer_units, schedule_graph, shard_costs,
                                          step_call_ns)
from daydream.sim import simulate
from daydream.whatif import predict

from conftest import assert_profile_refuses, bench_module, flat_profile

COSTS = ShardCosts(fwd_ns=(10, 12), bwd_ns=(20, 20), opt_ns=(5, 5), send_bytes=(100,), layers=(1, 1))


def _one(_nbytes):
    return 1


def test_balanced_split():
    assert balanced_split([5, 5, 5, 5], 2) == [2, 2]
    assert balanced_split([1, 1, 1, 1, 4], 2) == [4, 1]
    assert balanced_split([9, 1, 1, 1, 1], 2) == [1, 4]
    assert balanced_split([1, 2, 3], 3) == [1, 1, 1]
    assert balanced_split([1, 2, 3], 1) == [3]
    with pytest.raises(OptionError, match="cannot split 3 layer"):
        balanced_split([1, 2, 3], 4)


def test_one_model_chain_exact():
    # F0 0-10, act 10-11, F1 11-23, B1 23-43, grad 43-44, B0 44-64, O0 64-69 (O1 43-48 overlaps)
    for sched in (Schedule.MODEL_PARALLEL, Schedule.SHARD_PARALLEL):
        res = simulate(schedule_graph(COSTS, 1, _one, sched))
        assert res.makespan_ns == 69
        assert res.mean_iteration_ns()[1] == 69


def test_one_model_chain_with_send_posting_exact():
    # transfers of 4 ns from the send's call, 3 of them the sender posting it:
    # F0 0-10, post 10-13, act 13-14, F1 14-26, B1 26-46, post 46-49, O1 49-54, grad 49-50, B0 50-70, O0 70-75
    for sched in (Schedule.MODEL_PARALLEL, Schedule.SHARD_PARALLEL):
        res = simulate(schedule_graph(COSTS, 1, lambda _b: 4, sched, send_post_ns=3))
        g = res.graph
        start = {g.task_name(t): int(res.start_ns[t]) for t in range(g.n_tasks)}
        assert start["post model 0 gradient 1->0"] == 46 and start["model 0 optimizer shard 1"] == 49
        assert start["model 0 backward shard 0"] == 50 and res.makespan_ns == 75


def test_model_parallel_runs_models_one_after_another():
    res = simulate(schedule_graph(COSTS, 3, _one, Schedule.MODEL_PARALLEL))
    assert res.makespan_ns == 3 * 69
    g = res.graph
    names = [g.task_name(t) for t in g.lane_tasks[0]]
    assert names[1:4] == ["model 0 forward shard 0", "model 0 backward shard 0", "model 0 optimizer shard 0"]


def test_shard_parallel_interleaves_models_exact():
    res = simulate(schedule_graph(COSTS, 2, _one, Schedule.SHARD_PARALLEL))
    g = res.graph
    start = {g.task_name(t): int(res.start_ns[t]) for t in range(g.n_tasks)}
    # device 0 runs model 1's first shard while device 1 runs model 0's second
    assert start["model 1 forward shard 0"] == 10 and start["model 0 forward shard 1"] == 11
    # device 1 prefers the less advanced model: model 1's forward before model 0's backward
    # (model 1's activation arrived at 21, model 0's backward became ready at 23)
    assert start["model 1 forward shard 1"] == 23 and start["model 0 backward shard 1"] == 35
    assert start["model 1 backward shard 1"] == 55 and start["model 0 backward shard 0"] == 56
    assert res.makespan_ns == 106


def test_whatif_on_mlp_trace(own_trace):
    dev = flat_profile(allreduce=(1e9, 10_000.0))
    trace = own_trace("mlp")
    g = build_graph(trace)
    table = {m["path"]: m for m in trace.ranks[0].meta["daydream"]["modules"]}
    units, head, opt = layer_units(g, table)
    assert [u.name for u in units][:3] == ["MLP.blocks.0.0", "MLP.blocks.0.1", "MLP.blocks.1.0"]
    base = simulate(g).mean_iteration_ns()[1]
    assert sum(u.fwd_ns + u.bwd_ns for u in units) + head + opt == pytest.approx(base, rel=1e-3)

    one, _ = predict(trace, ["hydra:models=1,devices=2,corun=off"], device=dev)
    single = one.metrics["model_parallel_makespan_ms"]
    assert one.metrics["shard_parallel_makespan_ms"] == pytest.approx(single)
    rep, res = predict(trace, ["hydra:models=4,devices=2,corun=off"], device=dev)
    m = rep.metrics
    assert m["model_parallel_makespan_ms"] == pytest.approx(4 * single, abs=1e-5)
    assert rep.predicted_ms == pytest.approx(m["shard_parallel_makespan_ms"])
    assert single < m["shard_parallel_makespan_ms"] < m["model_parallel_makespan_ms"]
    assert m["shard_parallel_speedup"] > 1.2
    assert 0 < m["model_parallel_utilisation"] < m["shard_parallel_utilisation"] <= 1
    assert m["shard0_layers"] + m["shard1_layers"] == len(units)
    mp, _ = predict(trace, ["hydra:models=4,devices=2,schedule=model-parallel,corun=off"], device=dev)
    assert mp.predicted_ms == pytest.approx(m["model_parallel_makespan_ms"])


def test_a_stall_in_one_iteration_does_not_move_the_balanced_split(own_trace):
    """The split weighs each layer's median iteration; the costs stay the means."""
    trace = own_trace("mlp")
    g = build_graph(trace)
    table = {m["path"]: m for m in trace.ranks[0].meta["daydream"]["modules"]}
    units, head, opt = layer_units(g, table)
    before = shard_costs(units, head, opt, 2).layers
    T = g.tasks
    relu = units[-2]
    mine = np.flatnonzero(T["layer"] == g.layers.get(relu.name))
    its, cost = T["iteration"][mine], (T["dur_ns"] + T["gap_ns"])[mine]
    slow = max(range(1, 5), key=lambda it: cost[its == it].sum())          # of the trace's counted iterations, 1-4
    T["gap_ns"][mine[its == slow][0]] += 10 * sum(u.fwd_ns + u.bwd_ns for u in units)  # the machine's stall
    stalled, _, _ = layer_units(g, table)
    assert stalled[-2].fwd_ns + stalled[-2].bwd_ns > 10 * (relu.fwd_ns + relu.bwd_ns)
    assert stalled[-2].typical_ns == relu.typical_ns
    assert shard_costs(stalled, head, opt, 2).layers == before
    assert balanced_split([u.fwd_ns + u.bwd_ns for u in stalled], 2) != list(before)   # the means would move it


def test_layers_fixes_the_split_and_the_shards_costs_follow_it(own_trace):
    dev = flat_profile(allreduce=(1e9, 10_000.0))
    trace = own_trace("mlp")
    g = build_graph(trace)
    units, head, opt = layer_units(g, {m["path"]: m for m in trace.ranks[0].meta["daydream"]["modules"]})
    n = len(units)
    rep, _ = predict(trace, [f"hydra:models=2,devices=2,corun=off,layers=1:{n - 1}"], device=dev)
    assert (rep.metrics["shard0_layers"], rep.metrics["shard1_layers"]) == (1, n - 1)
    costs = shard_costs(units, head, opt, 2, [1, n - 1])
    assert costs.fwd_ns[0] == pytest.approx(units[0].fwd_ns + head)
    assert costs.bwd_ns[1] == pytest.approx(sum(u.bwd_ns for u in units[1:]))
    assert costs.send_bytes == (units[0].output_bytes,)
    one, _ = predict(trace, [f"hydra:models=1,devices=2,corun=off,layers=1:{n - 1}"], device=dev)
    assert one.metrics["model_parallel_makespan_ms"] * 1e6 >= sum(costs.fwd_ns) + sum(costs.bwd_ns)
    for bad in ("1:1", f"{n}:0", "2", "a:b", f"1:{n - 2}:1"):
        with pytest.raises(OptionError, match="hydra: layers="):
            predict(trace, [f"hydra:devices=2,layers={bad}"], device=dev)


def test_each_shard_pays_the_whole_optimizer_call(own_trace):
    """A shard's own step updates its parameters' share but runs the whole call around them."""
    trace = own_trace("mlp")
    g = build_graph(trace)
    units, head, opt = layer_units(g, {m["path"]: m for m in trace.ranks[0].meta["daydream"]["modules"]})
    call = step_call_ns(g)
    assert 0 < call < opt / 4           # SGD over 10 tensors: the updates are most of the step
    n = len(units)
    costs = shard_costs(units, head, opt, 2, [1, n - 1], call)
    share = units[0].param_bytes / sum(u.param_bytes for u in units)
    assert costs.opt_ns[0] == pytest.approx(call + (opt - call) * share)
    assert sum(costs.opt_ns) == pytest.approx(opt + call)        # one call more than the single model
    assert shard_costs(units, head, opt, 1, [n], call).opt_ns == pytest.approx((opt,))
    assert shard_costs(units, head, opt, 2, [1, n - 1]).opt_ns == pytest.approx((opt * share, opt * (1 - share)))


def test_each_shard_runs_its_own_backward_call_and_zero_grad(own_trace):
    """Each extra shard pays one more zero_grad, backward way in and step call; the backward's way
    out moves from the step to every shard's backward, the step's from the first shard's forward
    to every shard's step; the tracer's time at the boundary goes."""
    trace = own_trace("mlp")
    g = build_graph(trace)
    units, head, opt = layer_units(g, {m["path"]: m for m in trace.ranks[0].meta["daydream"]["modules"]})
    call, calls = step_call_ns(g), call_costs(trace.ranks[0])
    assert calls.zero_grad_ns > 0 and calls.backward_entry_ns > 0
    assert 0 < calls.backward_exit_ns < call          # the way out is part of the step's idle time
    n = len(units)
    plain = shard_costs(units, head, opt, 2, [4, n - 4], call)
    split = shard_costs(units, head, opt, 2, [4, n - 4], call, calls)
    assert 0 < calls.step_exit_ns and 0 < calls.boundary_ns and calls.step_exit_ns + calls.boundary_ns < head
    step_out, tracer = calls.step_exit_ns, calls.boundary_ns
    assert split.fwd_ns == pytest.approx((plain.fwd_ns[0] - step_out - tracer, plain.fwd_ns[1] + calls.zero_grad_ns))
    out, into = calls.backward_exit_ns, calls.backward_entry_ns
    assert split.bwd_ns == pytest.approx((plain.bwd_ns[0] + into + out, plain.bwd_ns[1] + out))
    assert split.opt_ns == pytest.approx(tuple(o - out + step_out for o in plain.opt_ns))
    total = sum(u.fwd_ns + u.bwd_ns for u in units) + head + opt
    assert sum(split.fwd_ns + split.bwd_ns + split.opt_ns) == pytest.approx(
        total + call + calls.zero_grad_ns + into + step_out - tracer)
    one = shard_costs(units, head, opt, 1, [n], call, calls)
    assert sum(one.fwd_ns + one.bwd_ns + one.opt_ns) == pytest.approx(total - tracer)
    dev = flat_profile(allreduce=(1e9, 10_000.0))
    rep, _ = predict(trace, ["hydra:models=1,devices=2,corun=off"], device=dev)
    assert any("runs its own backward call" in note for note in rep.notes)
    off, _ = predict(trace, ["hydra:models=1,devices=2,corun=off,calls=off"], device=dev)
    assert not any("runs its own backward call" in note for note in off.notes)
    assert off.predicted_ms < rep.predicted_ms        # one model's chain: the added way in and zero_grad


def test_a_trace_without_an_optimizer_step_has_no_call_costs(own_trace):
    rank = own_trace("mlp").ranks[0]
    cols = dict(rank.cols)
    cols["kind"] = cols["kind"].copy()
    cols["kind"][cols["kind"] == EventKind.ANNOTATION] = EventKind.MARKER     # no step annotation left
    assert call_costs(dataclasses.replace(rank, cols=cols)) == CallCosts()


def test_cores_that_share_a_host_slow_each_other_only_while_both_work(own_trace):
    """corun=profile at 0.8: in model-parallel the devices overlap only where one shard's optimizer
    step runs beside the other's backward, and the makespan grows a little; shard-parallel keeps
    both busy and stretches by much more, though less than 1 / 0.8."""
    import dataclasses

    dev = dataclasses.replace(flat_profile(allreduce=(1e9, 10_000.0)), corun=0.8)
    trace = own_trace("mlp")
    off, _ = predict(trace, ["hydra:models=4,devices=2,corun=off"], device=dev)
    on, _ = predict(trace, ["hydra:models=4,devices=2,corun=profile"], device=dev)
    assert any("0.80x" in n for n in on.notes)
    mp = on.metrics["model_parallel_makespan_ms"] / off.metrics["model_parallel_makespan_ms"]
    sp = on.metrics["shard_parallel_makespan_ms"] / off.metrics["shard_parallel_makespan_ms"]
    assert 1.0 < mp < 1.03 and mp + 0.05 < sp < 1 / 0.8


def test_data_landing_on_a_busy_device_lengthens_its_shard(own_trace):
    """With receives posted ahead, shard-parallel lands activations and gradients on devices busy
    with another model's shard, each of which then takes the profile's p2p_land longer;
    model-parallel's devices wait for their data, which costs them nothing more."""
    import dataclasses

    from daydream.primitives import select

    base = flat_profile(allreduce=(1e9, 10_000.0))
    land = dataclasses.replace(base, p2p_land={"gloo": ((1.0, 50_000.0),)})     # 50 us a message, any size
    trace = own_trace("mlp")
    spec = "hydra:models=4,devices=2,corun=off"
    (off, g_off), (on, g_on) = ((r, res.graph) for r, res in (predict(trace, [spec], device=d) for d in (base, land)))
    (n,) = [int(x.split()[1]) for x in on.notes if "transfers land" in x]
    assert n > 0 and not any("transfers land" in x for x in off.notes)
    shards = lambda g: g.tasks["dur_ns"][select(g, name="^model ")].sum()     # noqa: E731  (shards, posts, transfers)
    assert shards(g_on) - shards(g_off) == n * 50_000
    assert on.metrics["model_parallel_makespan_ms"] == off.metrics["model_parallel_makespan_ms"]
    assert on.metrics["shard_parallel_makespan_ms"] > off.metrics["shard_parallel_makespan_ms"]


def test_transfers_to_receives_posted_ahead_cost_the_calibrated_preposted_send(own_trace):
    """The runtime posts a step's receives before its barrier: each hand-over costs the profile's
    send to a receive posted ahead, not the fitted latency that carries sends stalled by a late
    receive.  One model over two devices, one after the other: its two transfers (activation,
    gradient) are on the critical path, so the makespan drops by exactly 2 x (300 - 40) us."""
    import dataclasses

    base = dataclasses.replace(flat_profile(), p2p={"gloo": (1e9, 300_000.0)})
    clean = dataclasses.replace(base, p2p_preposted={"gloo": 40_000.0})
    spec = "hydra:models=1,devices=2,corun=off,schedule=model-parallel"
    (fitted, _), (posted, _) = (predict(own_trace("mlp"), [spec], device=d) for d in (base, clean))
    drop = fitted.metrics["model_parallel_makespan_ms"] - posted.metrics["model_parallel_makespan_ms"]
    assert drop == pytest.approx(2 * 0.260, abs=1e-6)
    assert any("receive, 40 us, not its fitted 300 us" in n for n in posted.notes)
    assert not any("posted ahead" in n for n in fitted.notes)


def test_shard_parallel_hand_overs_add_the_waiter_threads_notice(own_trace):
    """The shard-parallel runtime learns of arrivals through waiter threads: each of its
    transfers takes the profile's ``p2p_notified`` less ``p2p_preposted`` more.  One model over
    two devices: both transfers are on the critical path, so shard-parallel's makespan grows by
    exactly 2 x 110 us and model-parallel's, whose scheduler waits on the receive, not at all."""
    import dataclasses

    base = dataclasses.replace(flat_profile(), p2p={"gloo": (1e9, 300_000.0)}, p2p_preposted={"gloo": 40_000.0})
    waiter = dataclasses.replace(base, p2p_notified={"gloo": 150_000.0})
    spec = "hydra:models=1,devices=2,corun=off"
    (plain, _), (notified, _) = (predict(own_trace("mlp"), [spec + ",schedule=shard-parallel"], device=d)
                                 for d in (base, waiter))
    for sched, grew in (("model_parallel", 0.0), ("shard_parallel", 2 * 0.110)):
        key = f"{sched}_makespan_ms"
        assert notified.metrics[key] - plain.metrics[key] == pytest.approx(grew, abs=1e-6)
    assert any("waiter thread: +110 us" in n for n in notified.notes)
    assert not any("waiter thread" in n for n in plain.notes)


def test_models_taking_turns_stretch_every_shard_by_the_cycle_factor(own_trace):
    """The traced MLP's parameters and momentum against K = 4 copies': the profile's cycle
    figures give x1.2 at 4x the state (interpolated in log bytes), so every shard's forward,
    backward and step takes 1.2x its time in both schedules (no transfers, no co-run: the
    makespans then scale exactly); one model, or `cycle=false`, leaves them as they were."""
    import dataclasses

    from daydream.primitives import select

    trace = own_trace("mlp")
    table = {m["path"]: m for m in trace.ranks[0].meta["daydream"]["modules"]}
    units, _, _ = layer_units(build_graph(trace), table)
    state = 2 * sum(u.param_bytes for u in units)         # SGD with momentum: parameters + momentum
    dev = dataclasses.replace(flat_profile(), cycle=((state, 1.0), (16 * state, 1.4)))
    spec = "hydra:models=4,devices=1,corun=off"
    (off, g_off), (on, g_on) = ((r, res.graph) for r, res in
                                (predict(trace, [spec + ",cycle=" + c], device=dev) for c in ("false", "true")))
    assert on.metrics["shard0_cycle_factor"] == pytest.approx(1.2)
    assert "shard0_cycle_factor" not in off.metrics
    shards_off, shards_on = (g.tasks["dur_ns"][select(g, name="^model ")] for g in (g_off, g_on))
    assert shards_on == pytest.approx(1.2 * shards_off, abs=1)
    for sched in ("model_parallel", "shard_parallel"):
        assert on.metrics[f"{sched}_makespan_ms"] == pytest.approx(1.2 * off.metrics[f"{sched}_makespan_ms"], abs=1e-5)
    assert any("x1.20" in n for n in on.notes)
    one, _ = predict(trace, ["hydra:models=1,devices=1,corun=off"], device=dev)
    assert one.metrics["shard0_cycle_factor"] == pytest.approx(1.0)


def test_each_device_takes_the_cycle_factor_of_its_own_shards_against_the_whole_model(own_trace):
    """Split 2:7, the first device keeps one Linear's parameters and momentum (2.1 MB), the
    second the rest (6.3 MB); the trace's one process cycled all 8.4 MB.  With cycle figures
    x1.0 up to the model's state and x1.2 from twice that on, four models taking turns leave
    the first device's shards as they were (4 x 2.1 MB is about the model's state) and stretch
    the second's x1.2 (4 x 6.3 MB): the factor is of K copies of the device's own shard against
    the state the trace's ops saw (against one copy of the shard it would read x1.2 for both)."""
    import dataclasses

    from daydream.primitives import select

    trace = own_trace("mlp")
    table = {m["path"]: m for m in trace.ranks[0].meta["daydream"]["modules"]}
    units, _, _ = layer_units(build_graph(trace), table)
    model = 2 * sum(u.param_bytes for u in units)
    dev = dataclasses.replace(flat_profile(allreduce=(1e9, 10_000.0)), cycle=((model, 1.0), (2 * model, 1.2)))
    spec = "hydra:models=4,devices=2,corun=off,layers=2:7,cycle="
    (off, g_off), (on, g_on) = ((r, res.graph) for r, res in
                                (predict(trace, [spec + c], device=dev) for c in ("false", "auto")))
    assert (on.metrics["shard0_cycle_factor"], on.metrics["shard1_cycle_factor"]) == pytest.approx((1.0, 1.2))
    for shard, factor in ((0, 1.0), (1, 1.2)):
        pattern = f"^model .* shard {shard}$"
        before, after = (g.tasks["dur_ns"][select(g, name=pattern)] for g in (g_off, g_on))
        assert len(before) == 12 and after == pytest.approx(factor * before, abs=1)
    assert any("x1.00 / x1.20" in n for n in on.notes)


def test_a_device_cycling_less_state_than_the_trace_is_not_made_faster(own_trace):
    """One model over two devices: each device's shard holds less state than the whole model
    the trace cycled, where the figures read x1.0 against x1.3; the factor stays 1 (a shard
    alone ran no faster than in the trace, session 40), and ``true`` is ``auto``."""
    import dataclasses

    trace = own_trace("mlp")
    table = {m["path"]: m for m in trace.ranks[0].meta["daydream"]["modules"]}
    units, _, _ = layer_units(build_graph(trace), table)
    model = 2 * sum(u.param_bytes for u in units)
    dev = dataclasses.replace(flat_profile(allreduce=(1e9, 10_000.0)), cycle=((model / 4, 1.0), (model, 1.3)))
    got = [predict(trace, [f"hydra:models=1,devices=2,corun=off,cycle={c}"], device=dev)[0] for c in
           ("auto", "true", "false")]
    assert (got[0].metrics["shard0_cycle_factor"], got[0].metrics["shard1_cycle_factor"]) == (1.0, 1.0)
    assert got[0].predicted_ms == got[1].predicted_ms == got[2].predicted_ms
    assert not any("in turn" in n for n in got[0].notes)


def test_profile_keeps_cycle_points_and_refuses_bad_ones(tmp_path):
    import dataclasses

    from daydream.device import load_profile, save_profile

    prof = dataclasses.replace(flat_profile(), cycle=((4e6, 1.0), (16e6, 1.2)))
    path = save_profile(prof, str(tmp_path / "p.json"))
    assert load_profile(path).cycle_factor(8e6) == pytest.approx(1.1)
    assert flat_profile().cycle_factor(8e6) == 1.0                       # not calibrated: no change
    assert_profile_refuses(path, "cycle", (([[16e6, 1.2], [4e6, 1.0]], "cycle: state bytes must increase"),
                                           ([[4e6, 0.9]], "cycle needs"), ([[0.0, 1.1]], "cycle needs")))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(1.0, 2.0), min_size=1, max_size=6), st.floats(0.5, 300.0), st.floats(1.0, 64.0))
def test_cycle_factor_never_falls_with_more_state(factors, mb, more):
    """Whatever the calibrated points (a dip is noise), more state never gives a smaller factor,
    so K models' steps are never predicted faster than one model's."""
    import dataclasses

    dev = dataclasses.replace(flat_profile(), cycle=tuple((4e6 * 2 ** i, f) for i, f in enumerate([1.0, *factors])))
    assert dev.cycle_factor(mb * 1e6 * more) >= dev.cycle_factor(mb * 1e6) >= 1.0


def test_cycle_calibration_measures_a_point_per_number_of_copies():
    torch = pytest.importorskip("torch")
    from daydream.calibrate_cycle import CYCLE_COPIES, cycle_points

    pts = cycle_points(torch, rounds=1)
    state = 2 * 2 * (512 * 512 + 512) * 4                  # two Linear(512): parameters + momentum, fp32
    assert [b for b, _ in pts] == [n * state for n in CYCLE_COPIES]
    assert pts[0][1] == 1.0 and all(f >= 1.0 for _, f in pts)


def test_corun_stretch_exact():
    """Two lanes: a (100 ns) then b (100 ns) on one, c (150 ns) on the other, at rate 0.5.  a and
    c overlap all along, so both last twice their work until one ends: a: 200; c: 200 for its
    first 100 ns of work, then 50 ns of work beside b's start, 100 ns at half speed -> 300; b
    overlaps c for 100 ns (50 of b's work), then 50 alone -> 150; a fixed point."""
    from daydream.graph.graph import DependencyGraph
    from daydream.model import Lane, LaneKind
    from daydream.optimizations._corun import corun_stretch

    g = DependencyGraph()
    one, two = (g.add_lane(Lane(0, LaneKind.CPU_THREAD, 1, i)) for i in range(2))
    a, b, c = (int(t) for t in g.add_tasks(lane=[one, one, two], dur_ns=[100, 100, 150]))
    g.lane_tasks[one] += [a, b]
    g.lane_tasks[two].append(c)
    res = corun_stretch(g, [one, two], 0.5)
    assert g.tasks["dur_ns"].tolist() == [200, 150, 300]
    assert int(res.end_ns[b]) == 350 and int(res.end_ns[c]) == 300


def test_corun_stretch_takes_each_tasks_phase_rate_exact():
    """A forward task (100 ns) beside an optimizer task (100 ns) on the other lane, at forward 1.0
    and optimizer 0.5: the forward keeps its time; the step does 50 ns of work in the forward's
    100 ns, then its last 50 alone -> 150."""
    from daydream.graph.graph import DependencyGraph
    from daydream.model import Lane, LaneKind, Phase
    from daydream.optimizations._corun import corun_stretch

    g = DependencyGraph()
    one, two = (g.add_lane(Lane(0, LaneKind.CPU_THREAD, 1, i)) for i in range(2))
    f, o = (int(t) for t in g.add_tasks(lane=[one, two], dur_ns=[100, 100],
                                        phase=[int(Phase.FORWARD), int(Phase.OPTIMIZER)]))
    g.lane_tasks[one].append(f)
    g.lane_tasks[two].append(o)
    res = corun_stretch(g, [one, two], {Phase.FORWARD: 1.0, Phase.OPTIMIZER: 0.5, None: 1.0})
    assert g.tasks["dur_ns"].tolist() == [100, 150] and int(res.end_ns[o]) == 150


def test_corun_rates_time_every_compute_and_memory_op_per_phase(own_trace, monkeypatch):
    """corun=trace: the iteration's ops with FLOPs and the memory-bound ones (the optimizer's updates)
    re-run beside a twin, labelled with their phases; each shard task then takes its phase's rate."""
    import dataclasses

    from daydream import opcorun
    from daydream.model import Phase
    from daydream.optimizations import WhatIfContext
    from daydream.optimizations._corun import corun_rates, forget_measured
    from daydream.whatif import trace_and_graph

    seen = {}

    def fake(sequence, threads=None, rounds=9, labels=None):
        seen.update(sequence=sequence, labels=labels)
        return {int(Phase.FORWARD): 1.0, int(Phase.BACKWARD): 0.95, int(Phase.OPTIMIZER): 0.5, None: 0.9}

    monkeypatch.setattr(opcorun, "sequence_corun", fake)
    forget_measured()
    dev = dataclasses.replace(flat_profile(allreduce=(1e9, 10_000.0)), corun=0.8)
    trace = own_trace("mlp")
    tr, g = trace_and_graph(trace, None)
    ctx = WhatIfContext(graph=g, trace=tr, device=dev)
    assert corun_rates(ctx) == {Phase.FORWARD: 1.0, Phase.BACKWARD: 0.95, Phase.OPTIMIZER: 0.5, None: 0.9}
    names = [json.loads(s)[0] for s in seen["sequence"]]
    assert "aten::addmm" in names and any(n in names for n in ("aten::add_", "aten::mul_", "aten::_foreach_add_"))
    assert len(seen["labels"]) == len(names) and set(seen["labels"]) >= {int(Phase.FORWARD), int(Phase.OPTIMIZER)}
    assert corun_rates(ctx, "profile") == {None: 0.8} and corun_rates(ctx, "off") == {None: 1.0}
    off, _ = predict(trace, ["hydra:models=4,devices=2,corun=off"], device=dev)
    on, _ = predict(trace, ["hydra:models=4,devices=2"], device=dev)
    assert any("optimizer 0.50x" in n and "forward 1.00x" in n for n in on.notes)
    assert on.metrics["shard_parallel_makespan_ms"] > off.metrics["shard_parallel_makespan_ms"]
    forget_measured()


def test_bad_input_is_refused_with_the_reason(own_trace):
    trace = own_trace("mlp")
    with pytest.raises(OptionError, match="more shards than the model's 9 layer"):
        predict(trace, ["hydra:models=2,devices=10"], device=flat_profile())
    with pytest.raises(OptionError, match="at least 1"):
        predict(trace, ["hydra:models=0"], device=flat_profile())
    with pytest.raises(OptionError, match="must be one of"):
        predict(trace, ["hydra:schedule=random"], device=flat_profile())
    for r in trace.ranks:
        r.meta.get("daydream", {}).pop("modules", None)
    with pytest.raises(NotApplicable, match="parameter sizes per module"):
        predict(trace, ["hydra"], device=flat_profile())


def test_real_two_process_run_reports_both_makespans():
    """Two gloo processes, tiny sizes: about 5 s, mostly process start-up."""
    pytest.importorskip("torch")
    cmd = [sys.executable, "-m", "daydream.workloads.hydra", "--models", "2", "--devices", "2", "--in-features", "8",
           "--hidden", "16", "--layers", "2", "--batch-size", "4", "--rounds", "1", "--warmup", "1",
           "--shard0-layers", "1"]   # the second shard starts with an in-place ReLU
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["models"] == 2 and out["devices"] == 2
    assert out["model-parallel_ms"] > 0 and out["shard-parallel_ms"] > 0


def test_real_run_refuses_impossible_splits():
    pytest.importorskip("torch")
    from daydream.workloads import hydra

    with pytest.raises(SystemExit, match="--shard0-layers must be between 1 and 2"):
        hydra.main(["--devices", "2", "--layers", "1", "--shard0-layers", "3"])
    with pytest.raises(SystemExit, match="4 shards but the model has only 3 layers"):
        hydra.main(["--devices", "4", "--layers", "1"])
    with pytest.raises(SystemExit, match="at least 1"):
        hydra.main(["--models", "0"])


def test_docstring_examples():
    import doctest

    pytest.importorskip("torch")
    from daydream.optimizations import _shards, hydra
    from daydream.workloads import hydra as real

    assert doctest.testmod(_shards).attempted >= 3 and doctest.testmod(_shards).failed == 0
    assert doctest.testmod(hydra).failed == 0
    assert doctest.testmod(real).failed == 0


def test_real_run_logs_every_task_and_arrival(tmp_path):
    """``--task-log``: per process, each model's three tasks per round in order, a receive
    arrival before the task that needs it (shard-parallel), and the round spans."""
    pytest.importorskip("torch")
    cmd = [sys.executable, "-m", "daydream.workloads.hydra", "--models", "2", "--devices", "2", "--in-features", "8",
           "--hidden", "16", "--layers", "2", "--batch-size", "4", "--rounds", "1", "--warmup", "0",
           "--task-log", str(tmp_path / "log")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for rank, needs in ((0, "gradient"), (1, "activation")):
        log = json.loads((tmp_path / "log" / f"hydra-rank{rank}.json").read_text())
        rows = [dict(zip(log["columns"], r)) for r in log["rows"]]
        for sched in ("model-parallel", "shard-parallel"):
            mine = [r for r in rows if r["schedule"] == sched]
            (span,) = [r for r in mine if r["what"] == "round"]
            tasks = [r for r in mine if r["what"] in ("forward", "backward", "step")]
            assert sorted((r["model"], r["what"]) for r in tasks) == sorted(
                (k, w) for k in (0, 1) for w in ("forward", "backward", "step"))
            for k in (0, 1):
                order = [r["what"] for r in tasks if r["model"] == k]
                assert order == ["forward", "backward", "step"]
            assert all(span["start_ns"] <= r["start_ns"] <= r["end_ns"] <= span["end_ns"] for r in tasks)
            for r in tasks:     # each part of a task within it
                parts = [p for p in mine if p["model"] == r["model"] and p["what"].startswith(r["what"] + ".")]
                assert sorted(p["what"] for p in parts) == {
                    "forward": ["forward.compute", "forward.prepare"], "backward": ["backward.compute"],
                    "step": []}[r["what"]]
                assert all(r["start_ns"] <= p["start_ns"] <= p["end_ns"] <= r["end_ns"] for p in parts)
            arrived = {r["model"]: r["start_ns"] for r in mine if r["what"] == needs}
            if sched == "model-parallel":
                assert arrived == {}
            else:
                task = "backward" if needs == "gradient" else "forward"
                assert set(arrived) == {0, 1}
                assert all(arrived[r["model"]] <= r["start_ns"] for r in tasks if r["what"] == task)


def test_validation_rows_are_medians_over_rounds_with_each_ks_runs_between_their_own_traces(tmp_path, monkeypatch):
    """A trace before each K's runs of a round and one after the last; each K's round predicted
    from the mean of the predictions from the two traces around its runs (the split from the
    first trace); a row the median over the traces' own predictions, each once, and over the
    real rounds (a slow trace moves neither its two rounds nor the row, a slow round not the row)."""
    from types import SimpleNamespace

    import daydream.validate as validate
    import daydream.validation.hydra as vh

    traced, real_calls, specs = [], [], []
    monkeypatch.setattr(vh, "trace_workload", lambda w, p, args, iterations: traced.append(p) or p)

    def run_real(k, shard0, processes):
        assert processes == validate.REAL_PROCESSES
        real_calls.append((k, shard0, len(traced)))
        r = len(real_calls)                                   # 1, 2, ... : one per (round, K)
        slow = 50.0 if r >= 5 else 0.0                        # the last round's runs are slow
        return {"model-parallel": 10.0 * k + r + slow, "shard-parallel": 6.0 * k + r + slow}

    def predict(path, spec, profile_path):
        specs.append(spec[0])
        r = traced.index(path)
        if "models=1," in spec[0]:                            # the split: 3 layers, then 6
            return SimpleNamespace(metrics={"shard0_layers": 3 + r, "shard1_layers": 6 - r}), None
        k = int(spec[0].split("models=")[1].split(",")[0])
        base = 8.0 + 2 * r + (20.0 if r in (2, 6) else 0.0)  # the third and the last trace slow
        return SimpleNamespace(optimizations=[spec[0]], baseline_ms=base, predicted_ms=base * k), None

    monkeypatch.setattr(vh, "run_real", run_real)
    monkeypatch.setattr(vh, "predict", predict)
    monkeypatch.setattr(validate, "predict", predict)
    assert vh.MODELS == (2, 4)
    rows = vh.validate_rows(tmp_path, "prof.json", progress=lambda m: None, repeat=3)
    assert [Path(p).name for p in traced] == [f"hydra.mlp.base.r{n}.json.gz" for n in range(7)]
    # every K's runs right after a trace of their own: traces 1, 3, 5 before K = 2, 2, 4, 6 before K = 4
    assert real_calls == [(k, 3, n) for n, k in zip(range(1, 7), [2, 4] * 3)]
    assert all("layers=3:6" in sp for sp in specs if "models=1," not in sp)
    # each trace predicted once per spec, though most serve two K's rounds
    assert len([sp for sp in specs if "models=2," in sp and "model-parallel" in sp]) == 7
    by = {(r.workload, r.optimization.split("schedule=")[1].split(",")[0]): r for r in rows}
    # K = 2 ran in calls 1, 3, 5 between traces 0-1, 2-3, 4-5 (8 10 | 32 14 | 16 18): rounds 9, 23, 17,
    # traces' median 15 (the rounds' would read 17)
    x2 = by[("mlp x2 on 2 procs", "model-parallel")]
    assert x2.measured_ms == 20 + 3 and x2.measured_rounds_ms == (21, 23, 75)
    assert x2.predicted_rounds_ms == (18, 46, 34) and x2.predicted_traces_ms == (16, 20, 64, 28, 32, 36)
    # each trace over the round it brackets: 16 / 21, 20 / 21, 64 / 23 (the slow trace), 28 / 23,
    # 32 / 75, 36 / 75 (the slow round): the median lies between the first round's two
    assert x2.predicted_ms == pytest.approx(23 * (16 / 21 + 20 / 21) / 2) and x2.baseline_ms == 15
    # K = 4 in calls 2, 4, 6 between traces 1-2, 3-4, 5-6 (10 32 | 14 16 | 18 40): rounds 21, 15, 29,
    # traces' median 17 (the rounds' would read 21)
    x4 = by[("mlp x4 on 2 procs", "shard-parallel")]
    assert x4.measured_ms == 24 + 4 and x4.predicted_rounds_ms == (84, 60, 116)
    # over the rounds 26 / 28 / 80: 40 / 26, 128 / 26 (slow trace), 56 / 28, 64 / 28, 72 / 80, 160 / 80
    assert x4.predicted_traces_ms == (40, 128, 56, 64, 72, 160) and x4.predicted_ms == pytest.approx(28 * 2.0)


def test_by_default_the_cycle_factor_applies_over_several_devices_too(own_trace):
    """``cycle=auto``: a device runs its K models' steps in turn whether or not it waits on
    another device between them (session 90: the real runtime's steps took longer with 4 models
    than with 1 over two processes), so over two devices, as on one, four models stretch the
    shards; ``cycle=false`` leaves it out, and an unknown value is refused."""
    import dataclasses

    trace = own_trace("mlp")
    dev = dataclasses.replace(flat_profile(allreduce=(1e9, 10_000.0)), cycle=((1e5, 1.0), (1e9, 1.5)))
    one, _ = predict(trace, ["hydra:models=4,devices=1,corun=off"], device=dev)
    # at 4:5, four copies of either shard's state exceed the whole model's
    two, _ = predict(trace, ["hydra:models=4,devices=2,corun=off,layers=4:5"], device=dev)
    off, _ = predict(trace, ["hydra:models=4,devices=2,corun=off,layers=4:5,cycle=false"], device=dev)
    assert one.metrics["shard0_cycle_factor"] > 1.0
    assert two.metrics["shard0_cycle_factor"] > 1.0 and two.metrics["shard1_cycle_factor"] > 1.0
    assert "shard0_cycle_factor" not in off.metrics and two.predicted_ms > off.predicted_ms
    with pytest.raises(OptionError, match="cycle must be one of"):
        predict(trace, ["hydra:models=4,devices=2,cycle=maybe"], device=dev)


def test_the_specs_benchmark_reads_a_validations_hydra_rows_and_sets_options(tmp_path):
    import doctest

    bench = bench_module("hydra_specs")
    csv = tmp_path / "results.csv"
    csv.write_text('# daydream: {}\nworkload,optimization,measured_rounds_ms\n'
                   'mlp,"pipeline:stages=2",30.0 31.0\n'
                   'mlp,"pipeline:stages=1,microbatches=4",40.0 41.0\n'
                   'mlp x2 on 2 procs,"hydra:models=2,schedule=shard-parallel",12.5 13.0\n')
    assert bench.hydra_rows(csv) == [("hydra:models=2,schedule=shard-parallel", [12.5, 13.0])]
    assert bench.hydra_rows(csv, "pipeline") == [("pipeline:stages=2", [30.0, 31.0])]
    assert doctest.testmod(bench).failed == 0
    prof = tmp_path / "device-cpu-1t.json"
    prof.write_text(json.dumps({"name": "cpu", "resume": [[1e6, 1.1]], "corun": 1.0}))
    out = tmp_path / "out"
    out.mkdir()
    assert bench.profile_without(prof, [], out) == str(prof)
    assert json.loads(Path(bench.profile_without(prof, ["resume"], out)).read_text()) == {"name": "cpu", "corun": 1.0}
    assert json.loads(prof.read_text())["resume"] == [[1e6, 1.1]]          # the validation's own file untouched
    with pytest.raises(SystemExit, match="no field resum"):
        bench.profile_without(prof, ["resum"], out)
    # the point-to-point figures pooled with other calibrations': each the median of all
    spell = {"name": "cpu", "p2p": {"gloo": [2e9, 280e3]}, "p2p_preposted": {"gloo": 157e3},
             "p2p_land": {"gloo": [[16384, 190e3], [131072, 247e3]]}, "resume": [[1e6, 1.1]]}
    others = []
    for i, (lat, pre, land) in enumerate(((90e3, 62e3, 144e3), (70e3, 60e3, 113e3))):
        others.append(tmp_path / f"other{i}.json")
        others[-1].write_text(json.dumps({"p2p": {"gloo": [3e9, lat]}, "p2p_preposted": {"gloo": pre},
                                          "p2p_land": {"gloo": [[16384, 100e3], [131072, land]]}}))
    prof.write_text(json.dumps(spell))
    assert bench.profile_p2p_pooled(prof, [], out) == str(prof)
    pooled = json.loads(Path(bench.profile_p2p_pooled(prof, others, out)).read_text())
    assert pooled["p2p"]["gloo"] == [3e9, 90e3] and pooled["p2p_preposted"]["gloo"] == 62e3
    assert pooled["p2p_land"]["gloo"] == [[16384, 100e3], [131072, 144e3]]
    assert pooled["resume"] == [[1e6, 1.1]] and json.loads(prof.read_text()) == spell     # the rest kept, the file untouched
    # the trace before a round's runs: one a round (until session 76), or one before each K since
    (tmp_path / "traces").mkdir()
    for n in range(3):
        (tmp_path / "traces" / f"hydra.mlp.base.r{n}.json.gz").write_text("")
    assert [bench.trace_before(tmp_path, "hydra", "hydra:models=4", rd, 2) for rd in (0, 1)] == [0, 1]
    for n in range(3, 5):
        (tmp_path / "traces" / f"hydra.mlp.base.r{n}.json.gz").write_text("")
    assert [bench.trace_before(tmp_path, "hydra", f"hydra:models={k},devices=2", rd, 2)
            for rd in (0, 1) for k in (2, 4)] == [0, 1, 2, 3]
    assert bench.trace_before(tmp_path, "pipeline", "pipeline:stages=2", 1, 2) == 1


def test_the_placement_benchmark_sets_each_round_beside_its_runs_and_traces_probes(tmp_path, capsys):
    """``benchmarks/hydra_placement.py`` reads the probes in the Hydra validation's order: per
    round the trace's two, then each K's real runs, and one more trace after the last round."""
    import doctest

    from daydream.validate import REAL_PROCESSES
    from daydream.validation.hydra import MODELS

    bench = bench_module("hydra_placement")
    assert doctest.testmod(bench).failed == 0
    near, far, per_k = 100.0, 400.0, 2 * REAL_PROCESSES

    def round_probes(trace, runs):          # runs: the placement of each K's runs, in MODELS' order
        return [trace] * 2 + [p for k in MODELS for p in [runs[k]] * per_k]

    probes = (round_probes(near, {k: far if k == MODELS[-1] else near for k in MODELS})
              + round_probes(far, {k: far for k in MODELS}) + [far] * 2)
    text = " ".join(f"{p:.0f}" for p in probes)
    k0, k1 = MODELS[0], MODELS[-1]
    csv = tmp_path / "results.csv"
    csv.write_text("# daydream: {}\nworkload,optimization,measured_rounds_ms,predicted_rounds_ms,core_to_core_ns\n"
                   f'mlp,"pipeline:stages=2",10 10,9 9,{text}\n'
                   f'x,"hydra:models={k0},devices=2,schedule=shard-parallel",10 20,9 21,{text}\n'
                   f'x,"hydra:models={k1},devices=2,schedule=model-parallel",10 20,11 18,{text}\n'
                   f'x,"hydra:models={k1},devices=2,schedule=shard-parallel",10 20,9 18,90 95\n')
    got = bench.rounds(csv)
    assert list(got) == [(k0, "shard-parallel"), (k1, "model-parallel")]     # the unprobed row left out
    assert [(round(e, 3), run, tr) for e, run, tr in got[(k0, "shard-parallel")]] == \
        [(-10.0, "near", "mixed"), (5.0, "far", "far")]
    assert [(run, tr) for _, run, tr in got[(k1, "model-parallel")]] == [("far", "mixed"), ("far", "far")]
    bench.main([str(csv)])
    out = capsys.readouterr().out
    assert f"K={k0} shard-parallel: 2 rounds" in out and "runs near  traces mixed n   1  mean  -10.0 %" in out
    # since session 76: a trace before each K's runs, the same rounds read alike
    traces, runs = [near, near, near, far, far], [near, far, far, far]        # in order: K0, K1 of round 0, ...
    each = [p for t, r in zip(traces, runs) for p in [t] * 2 + [r] * per_k] + [traces[-1]] * 2
    text = " ".join(f"{p:.0f}" for p in each)
    csv.write_text("# daydream: {}\nworkload,optimization,measured_rounds_ms,predicted_rounds_ms,core_to_core_ns\n"
                   f'x,"hydra:models={k0},devices=2,schedule=shard-parallel",10 20,9 21,{text}\n'
                   f'x,"hydra:models={k1},devices=2,schedule=model-parallel",10 20,11 18,{text}\n')
    again = bench.rounds(csv)
    assert [(run, tr) for _, run, tr in again[(k0, "shard-parallel")]] == [("near", "near"), ("far", "mixed")]
    assert [(run, tr) for _, run, tr in again[(k1, "model-parallel")]] == [("far", "near"), ("far", "far")]


def test_the_round_correlation_benchmark_pairs_rounds_within_runs(tmp_path, capsys):
    """``benchmarks/round_correlation.py`` correlates rounds centred on their run's mean: two runs
    at different levels whose predictions follow their real rounds read +1; a prediction that
    moves against them -1."""
    import doctest

    bench = bench_module("round_correlation")
    assert doctest.testmod(bench).failed == 0
    head = "workload,optimization,measured_rounds_ms,predicted_rounds_ms\n"
    files = []
    for i, (real, follows, against) in enumerate([("10 12 11", "20 24 22", "12 10 11"),
                                                   ("30 33 27", "15 16.5 13.5", "9 8.1 9.9")]):
        f = tmp_path / f"run{i}.csv"
        f.write_text(head + f'x,"hydra:models=2,devices=2,schedule=model-parallel",{real},{follows}\n'
                     f'x,"hydra:models=2,devices=2,schedule=shard-parallel",{real},{against}\n'
                     'mlp,"pipeline:stages=2",1 2 3,3 2 1\n')
        files.append(str(f))
    bench.main(files)
    out = capsys.readouterr().out
    assert "6 rounds a row" in out
    assert "K=2 model-parallel: prediction with real r = +1.00" in out
    assert "K=2 shard-parallel: prediction with real r = -1.00" in out
    other = tmp_path / "other.csv"
    other.write_text(head + 'mlp,"pipeline:stages=2",1 2,2 1\n')
    with pytest.raises(SystemExit, match="no Hydra rows"):
        bench.main([str(other)])


def test_the_ratio_benchmarks_leave_out_rows_without_rounds_and_refuse_other_files(tmp_path, capsys):
    """``hydra_sp_mp.py`` pairs each K's rows round by round and leaves out rows of files older than
    the per-round columns; ``hydra_placement.py`` names a file that is not a results CSV in one line."""
    sp_mp = bench_module("hydra_sp_mp")
    new = tmp_path / "new.csv"
    new.write_text("workload,optimization,measured_rounds_ms,predicted_rounds_ms\n"
                   'x,"hydra:models=2,devices=2,schedule=model-parallel",20 10,18 10\n'
                   'x,"hydra:models=2,devices=2,schedule=shard-parallel",15 8,12 8\n')
    old = tmp_path / "old.csv"
    old.write_text("workload,optimization,measured_ms\n"
                   'x,"hydra:models=2,devices=2,schedule=model-parallel",20\n'
                   'x,"hydra:models=2,devices=2,schedule=shard-parallel",15\n')
    assert sp_mp.ratios(new) == {2: pytest.approx((0.775, 0.7333333))}     # medians of 0.75 & 0.8, 0.667 & 0.8
    assert sp_mp.ratios(old) == {}
    sp_mp.main([str(old)])
    assert capsys.readouterr().out == f"{old}: no Hydra rows with per-round figures\n"
    placement = bench_module("hydra_placement")
    not_csv = tmp_path / "notes.txt"
    not_csv.write_text("just words\nand more\n")
    with pytest.raises(SystemExit, match=r"hydra_placement: .*notes.txt: not a validation results CSV"):
        placement.main([str(not_csv)])


def test_the_replay_benchmark_simulates_the_real_rounds_task_times_exact(tmp_path, own_trace, capsys):
    """``benchmarks/hydra_replay.py`` puts each real task's logged time into hydra's schedule graph:
    one model over two ranks replays as its chain, F0 + hand-over + F1 + B1 + hand-over + B0 + S0,
    with shard-parallel's hand-overs taking the profile's arrival notice (110 us) more."""
    import doctest

    bench = bench_module("hydra_replay")
    assert doctest.testmod(bench).failed == 0
    dev = dataclasses.replace(flat_profile(), p2p={"gloo": (1e9, 300_000.0)}, p2p_preposted={"gloo": 40_000.0},
                              p2p_notified={"gloo": 150_000.0})
    us = {(0, "forward"): 1000, (1, "forward"): 1200, (1, "backward"): 2000, (0, "backward"): 2100,
          (0, "step"): 500, (1, "step"): 400}
    cols = ["schedule", "round", "what", "model", "start_ns", "end_ns"]
    for rank in (0, 1):
        rows = [[s, 0, "round", -1, 0, 9_000_000] for s in ("model-parallel", "shard-parallel")]
        rows += [[s, 0, kind, 0, 0, d * 1000] for s in ("model-parallel", "shard-parallel")
                 for (r, kind), d in us.items() if r == rank]
        (tmp_path / f"hydra-rank{rank}.json").write_text(json.dumps({"columns": cols, "rows": rows}))
    from hydra_timeline import load          # beside the benchmark, which puts its folder on the path

    got = bench.real_rounds(load(tmp_path))
    durs, span = got[("model-parallel", 0)]
    assert span == 9.0 and durs["model 0 backward shard 0"] == 2_100_000
    hop = dev.p2p_preposted_ns(512)
    chain = sum(us[c] for c in ((0, "forward"), (1, "forward"), (1, "backward"), (0, "backward"), (0, "step"))) * 1000
    assert bench.replay_ms(durs, 1, "model-parallel", dev, 512) == pytest.approx((chain + 2 * hop) / 1e6, abs=1e-6)
    assert bench.replay_ms(durs, 1, "shard-parallel", dev, 512) == pytest.approx((chain + 2 * hop + 2 * 110_000) / 1e6,
                                                                                 abs=1e-6)
    posting = dataclasses.replace(dev, p2p_post={"gloo": (20_000.0, 20_000.0)})
    _, res = predict(own_trace("mlp"), ["hydra:models=2,devices=2,corun=off"], device=posting)
    assert sum(res.graph.task_name(t).startswith("post model") for t in range(res.graph.n_tasks)) == 4
    pred = bench.predicted_durations(res)
    assert not any(n.startswith("post ") for n in pred) and len(pred) == 2 * 2 * 3
    device_ns = sum(int(res.end_ns[t] - res.start_ns[t]) for t in range(res.graph.n_tasks)
                    if res.graph.lanes[int(res.graph.tasks["lane"][t])].kind.name != "COMM")
    assert sum(pred.values()) == device_ns                 # every post folded into its sending task, none lost
    prof = tmp_path / "device.json"
    prof.write_text(json.dumps(dev.to_json()))
    bench.main(["--profile", str(prof), "--models", "1", "--logs", str(tmp_path), "--send-bytes", "512"])
    out = capsys.readouterr().out
    assert "model-parallel (1 rounds)" in out and "replay / real" in out


def test_the_row_estimators_benchmark_sums_up_each_row_three_ways(tmp_path, monkeypatch, capsys):
    """``benchmarks/hydra_row_estimators.py``: every trace predicted once per row (``corun=off``),
    round r of the K at index k between traces 2r + k and 2r + k + 1; a slow trace moves the
    rounds' means, not the traces' median; a directory of another layout is passed over."""
    import doctest
    from types import SimpleNamespace

    import daydream.whatif as whatif

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))   # its hydra_specs
    bench = bench_module("hydra_row_estimators")
    assert doctest.testmod(bench).failed == 0
    run = tmp_path / "run"
    (run / "traces").mkdir(parents=True)
    (run / "results.csv").write_text("workload,optimization,measured_rounds_ms\n"
                                     'mlp x2,"hydra:models=2,schedule=model-parallel,layers=4:5",20 20\n'
                                     'mlp x4,"hydra:models=4,schedule=model-parallel,layers=4:5",40 40\n')
    speed = [10.0, 10.0, 15.0, 10.0, 10.0]                  # trace 2 slow: K = 2's round 1, K = 4's round 0
    for n in range(5):
        (run / "traces" / f"hydra.mlp.base.r{n}.json.gz").write_text("")
    asked = []

    def predict(path, specs, profile_path):
        asked.append(specs[0])
        k = int(specs[0].split("models=")[1].split(",")[0])
        return SimpleNamespace(predicted_ms=speed[int(path.split(".r")[-1].split(".")[0])] * k), None

    monkeypatch.setattr(whatif, "predict", predict)
    old = tmp_path / "old"
    (old / "traces").mkdir(parents=True)
    (old / "results.csv").write_text((run / "results.csv").read_text())
    for n in range(3):                                      # one trace a round: before session 76
        (old / "traces" / f"hydra.mlp.base.r{n}.json.gz").write_text("")
    bench.main([str(run), str(old)])
    out = capsys.readouterr().out
    assert len(asked) == 10 and all("corun=off" in s for s in asked)
    assert "models=2,schedule=model-parallel: mean +12.5 min +0.0 traces +0.0" in out
    assert "models=4,schedule=model-parallel: mean +12.5 min +0.0 traces +0.0" in out
    assert f"{old}: not a validation of one trace before each K (passed over)" in out
