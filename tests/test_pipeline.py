"""``pipeline`` what-if: schedules, partitioner, stage graph (exact times), bad input, a real trace."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from daydream import load_trace
from daydream.device import Curve, DeviceProfile
from daydream.graph.graph import DependencyGraph
from daydream.model import EventKind, Lane, LaneKind, Phase
from daydream.optimizations import WhatIfContext, get
from daydream.optimizations import _schedules as sch
from daydream.optimizations._handover import add_late_holds, add_post_collisions
from daydream.optimizations._pipegraph import PipeGraph, StageCosts, build_graph, partition
from daydream.optimizations.base import OptionError
from daydream.optimizations.pipeline import bubble_fraction
from daydream.primitives import select
from daydream.sim import simulate

REPO = Path(__file__).resolve().parent.parent


def device(bw=None, lat=0.0):
    """Flat curves, no per-op overhead: scaling to a micro-batch divides every duration by M."""
    return DeviceProfile("test", "cpu", {"float32": Curve.flat(1e9)}, {"float32": Curve.flat(1e9)}, 0,
                         collective={"gloo": (bw, lat)} if bw else {})


def costs(S, f, b, send=0, pre=0.0, opt=0.0):
    return StageCosts(fwd_ns=(f,) * S, bwd_ns=(b,) * S, send_bytes=(send,) * S, param_bytes=(0,) * S,
                      stash_bytes=(0,) * S, optimizer_ns=(opt,) * S, pre_ns=pre)


def iteration_ns(pg) -> float:
    return simulate(pg.graph).mean_iteration_ns()[1]


# ------------------------------------------------------------------ schedules
def test_1f1b_order_matches_torch_schedule1f1b():
    assert [" ".join(map(str, r)) for r in sch.one_f_one_b(3, 4)] == [
        "0F0 0F1 0F2 0B0 0F3 0B1 0B2 0B3",
        "1F0 1F1 1B0 1F2 1B1 1F3 1B2 1B3",
        "2F0 2B0 2F1 2B1 2F2 2B2 2F3 2B3"]


def test_interleaved_megatron_order():
    r0, r1 = sch.interleaved(2, 4, 2)
    assert " ".join(map(str, r0)) == "0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 0B3"
    assert " ".join(map(str, r1)) == "1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3"
    sch.validate([r0, r1], 4, 4)


@pytest.mark.parametrize("S,M", [(1, 1), (2, 3), (4, 8)])
def test_every_schedule_is_valid_and_csv_round_trips(S, M):
    for acts in (sch.gpipe(S, M), sch.one_f_one_b(S, M) if M >= S else sch.gpipe(S, M)):
        sch.validate(acts, S, M)
        assert sch.from_csv(sch.to_csv(acts)) == acts


def test_in_flight_activations():
    assert [sch.in_flight(sch.gpipe(3, 5), s) for s in range(3)] == [5, 5, 5]
    assert [sch.in_flight(sch.one_f_one_b(3, 5), s) for s in range(3)] == [3, 2, 1]


@pytest.mark.parametrize("call,msg", [
    (lambda: sch.one_f_one_b(4, 2), "at least as many micro-batches as stages"),
    (lambda: sch.interleaved(2, 3, 2), "multiple of"),
    (lambda: sch.gpipe(0, 2), "at least 1"),
    (lambda: sch.validate([[sch.Action.parse("0F0")]], 1, 1), "0B0 appears 0 times"),
    (lambda: sch.validate([[sch.Action.parse("0F0"), sch.Action.parse("0B0")], [sch.Action.parse("0F0")]], 1, 1),
     "stage 0 appears on ranks 0 and 1"),
    (lambda: sch.Action.parse("0X1"), "bad action"),
])
def test_bad_schedules_refused(call, msg):
    with pytest.raises(sch.ScheduleError, match=msg):
        call()


# ---------------------------------------------------------------- partitioner
def test_partition_balances_and_respects_comm():
    assert partition([4, 1, 1, 1, 1], [0] * 5, 2) == [0, 1]
    assert partition([1, 1, 1, 1], [0, 0, 0, 0], 4) == [0, 1, 2, 3]
    # cutting after unit 0 or 1 would send 10 ns over the link: cut after unit 2 instead (3 | 1)
    assert partition([1, 1, 1, 1], [10, 10, 0, 0], 2) == [0, 3]
    with pytest.raises(sch.ScheduleError, match="3 stages but the model has only 2 layers"):
        partition([1, 1], [0, 0], 3)


# ------------------------------------------------- stage graph: exact times
@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
@pytest.mark.parametrize("S,M", [(2, 2), (2, 4), (3, 6), (4, 8), (4, 5)])
def test_bubble_is_analytic_with_equal_stages_and_free_comm(name, S, M):
    f, b = 10, 20
    pg = build_graph(costs(S, f, b), sch.make_schedule(name, S, M), 3, device(), True, M)
    assert iteration_ns(pg) == (M + S - 1) * (f + b)
    assert bubble_fraction(simulate(pg.graph)) == pytest.approx((S - 1) / M, abs=1e-12)


def test_interleaved_bubble_shrinks_by_virtual_stages():
    S, M, V, f, b = 2, 4, 2, 10, 20
    pg = build_graph(costs(S * V, f, b), sch.interleaved(S, M, V), 3, device(), True, M)
    assert iteration_ns(pg) == M * V * (f + b) + (S - 1) * (f + b)
    assert bubble_fraction(simulate(pg.graph)) == pytest.approx((S - 1) / (M * V))


def test_2bw_has_no_bubble_in_steady_state():
    S, M = 3, 4
    pg = build_graph(costs(S, 10, 20), sch.two_bw(S, M, 5), 5, device(), False, M)
    assert iteration_ns(pg) == M * 30
    assert bubble_fraction(simulate(pg.graph)) == 0.0


def test_transfer_and_per_iteration_work_exact():
    # 2 stages, 1 micro-batch: F0 | send | F1 B1 | send | B0, then the optimizer step;
    # send = 1000 bytes / 1e9 B/s + 50 ns = 1050 ns; input 7 ns on each rank before the schedule
    pg = build_graph(costs(2, 100, 200, send=1000, pre=7, opt=11), sch.gpipe(2, 1), 3, device(1e9, 50), True, 1)
    assert iteration_ns(pg) == 7 + 100 + 1050 + 100 + 200 + 1050 + 200 + 11
    # torch's runtime divides each stage's gradients by M after its last backward: on rank 0
    # that pass (13 ns) lies between B0 and the step; rank 1's (17 ns) is off the critical path
    sc = dataclasses.replace(costs(2, 100, 200, send=1000, pre=7, opt=11), scale_grads_ns=(13, 17))
    scaled = build_graph(sc, sch.gpipe(2, 1), 3, device(1e9, 50), True, 1)
    assert iteration_ns(scaled) == 7 + 100 + 1050 + 100 + 200 + 1050 + 200 + 13 + 11
    assert len(select(scaled.graph, name="^scale gradients")) == 2 * 3


@pytest.mark.parametrize("handshake_ns, expected", [(0.0, 10596), (40.0, 10676)])
def test_a_transfer_waits_for_its_receive_to_be_posted(handshake_ns, expected):
    # GPipe, 2 micro-batches; stage 1's forward (3000 ns) is slow, so its receive for
    # micro-batch 1 is posted (t=4150..4153) long after stage 0 posted the send (t=205..210):
    # gloo moves the data only then (after the handshake), and F1(1) waits for the transfer
    # (1050 - 5 ns) from there; without the rendezvous the period would be 8508 ns.
    # Backward: B0(1)'s receive is posted after B0(0), after the gradient was sent.
    dev = DeviceProfile("t", "cpu", {"float32": Curve.flat(1e9)}, {"float32": Curve.flat(1e9)}, 0,
                        p2p={"gloo": (1e9, 50.0)}, p2p_post={"gloo": (5.0, 3.0)},
                        p2p_handshake={"gloo": handshake_ns} if handshake_ns else {})
    sc = StageCosts(fwd_ns=(100, 3000), bwd_ns=(100, 100), send_bytes=(1000, 1000), param_bytes=(0, 0),
                    stash_bytes=(0, 0), optimizer_ns=(0, 0), pre_ns=0)
    assert iteration_ns(build_graph(sc, sch.gpipe(2, 2), 3, dev, True, 2)) == expected


def test_a_transfer_takes_the_calibrated_hand_over_latency_where_there_is_one():
    # GPipe, 1 micro-batch, posts of 5 / 3 ns: 1000 bytes at 1e9 B/s plus the hand-over's 20 ns
    # (not the fitted 50 ns) after the send's post, two transfers on the critical path
    dev = DeviceProfile("t", "cpu", {"float32": Curve.flat(1e9)}, {"float32": Curve.flat(1e9)}, 0,
                        p2p={"gloo": (1e9, 50.0)}, p2p_post={"gloo": (5.0, 3.0)})
    fitted = iteration_ns(build_graph(costs(2, 100, 200, send=1000), sch.gpipe(2, 1), 3, dev, True, 1))
    handed = dataclasses.replace(dev, p2p_handover={"gloo": 20.0})
    assert iteration_ns(build_graph(costs(2, 100, 200, send=1000), sch.gpipe(2, 1), 3, handed, True, 1)) \
        == fitted - 2 * (50 - 20)


def test_sends_torch_s_1f1b_waits_for_take_the_preposted_latency():
    """``waited_sends`` (Schedule1F1B): a send waited before the rank's next action of the other
    kind hands over in the ``p2p_preposted`` latency, one its rank computes on after (a warm-up
    forward followed by a forward) in the ``p2p_handover`` mean."""
    dev = DeviceProfile("t", "cpu", {"float32": Curve.flat(1e9)}, {"float32": Curve.flat(1e9)}, 0,
                        p2p={"gloo": (1e9, 50.0)}, p2p_handover={"gloo": 400.0}, p2p_preposted={"gloo": 30.0})
    acts = sch.one_f_one_b(2, 3)
    pg = build_graph(costs(2, 100, 200, send=1000), acts, 1, dev, True, 3, waited_sends=True)
    sent = {pg.graph.task_name(x).split()[1]: int(pg.graph.tasks["dur_ns"][x]) for x in pg.sent.values()}
    assert sent == {"0F0": 1000 + 400, "0F1": 1000 + 30, "0F2": 1000 + 30,
                    "1B0": 1000 + 30, "1B1": 1000 + 30, "1B2": 1000 + 30}
    plain = build_graph(costs(2, 100, 200, send=1000), acts, 1, dev, True, 3)
    assert {int(plain.graph.tasks["dur_ns"][x]) for x in plain.sent.values()} == {1000 + 400}


def test_v_placement_with_rendezvous_runs_one_transfer_lane_per_stage_and_kind():
    # Tessel's V (stages 0, 3 on rank 0; 1, 2 on rank 1): rank 1 sends 2F(i) and 1B(i) to rank 0,
    # whose receives come in another order than those sends; one first-come first-served lane per
    # link can hold 1B0's transfer (its receive posted after 3F1's) in front of 2F1's (with the
    # validation MLP's costs: a deadlock), so each stage's sends of one kind get a lane
    acts = sch.from_csv("0F0,0F1,3F0,3B0,0F2,3F1,3B1,0F3,0B0,3F2,3B2,0B1,3F3,3B3,0B2,0B3\n"
                        "1F0,2F0,1F1,2F1,2B0,1F2,1B0,2F2,2B1,1F3,1B1,2F3,2B2,1B2,2B3,1B3\n")
    dev = DeviceProfile("t", "cpu", {"float32": Curve.flat(1e9)}, {"float32": Curve.flat(1e9)}, 0,
                        p2p={"gloo": (1e9, 50.0)}, p2p_post={"gloo": (5.0, 3.0)})
    pg = build_graph(costs(4, 100, 200, send=1000), acts, 3, dev, True, 4)
    assert iteration_ns(pg) > 0
    g = pg.graph
    for lane in (i for i, ln in enumerate(g.lanes) if ln.kind == LaneKind.COMM):
        senders = {g.task_name(t).split(" ")[1][:2] for t in g.lane_tasks[lane]}   # e.g. "2F", "1B"
        assert len(senders) == 1


def test_posts_to_each_other_close_together_both_pay_the_calibrated_collision(maker):
    # rank 0 posts to rank 1 at t=100 and t=1000; rank 1 posts to rank 0 at t=130, and to rank 2
    # at t=1000.  Curve: 1000 ns extra at a gap of 0, falling to 0 at 100 ns.  Only the first two
    # are a pair within the window (gap 30: +700 each); rank 1's second addresses another rank.
    dev = DeviceProfile("t", "cpu", {}, {}, 0, p2p_collision={"gloo": ((0.0, 1000.0), (100.0, 0.0))})
    r0, r1 = maker.lane(rank=0), maker.lane(rank=1)
    maker.task(r0, 100)
    a = maker.task(r0, 50)
    maker.task(r0, 850)
    a2 = maker.task(r0, 50)
    maker.task(r1, 130)
    b = maker.task(r1, 50)
    maker.task(r1, 820)
    b2 = maker.task(r1, 50)
    pg = PipeGraph(maker.g, posts=[(a, 1), (a2, 1), (b, 0), (b2, 2)])
    assert add_post_collisions(pg, dev) == (2, 1400, 0, 0)
    assert maker.g.tasks["dur_ns"][[a, b, a2, b2]].tolist() == [750, 750, 50, 50]
    assert simulate(maker.g).start_ns[a2] == 100 + 750 + 850


def test_a_send_posted_near_its_peers_post_holds_its_data_back(maker):
    # rank 0 posts a send at t=100 (transfer x, 40 ns, after the post) and another at t=1000 (x2);
    # rank 1 posts a receive at t=120 and another at t=1000 + 300.  Hold curve: 500 ns at a gap of
    # 0, 100 at 50, 0 from 200.  The first pair is 20 apart: x is held 500 - 400 * 20 / 50 = 340 ns;
    # the second 300 apart: nothing.  No collision curve: the posts keep their lengths.
    dev = DeviceProfile("t", "cpu", {}, {}, 0, p2p_hold={"gloo": ((0.0, 500.0), (50.0, 100.0), (200.0, 0.0))})
    r0, r1, link = maker.lane(rank=0), maker.lane(rank=1), maker.lane(LaneKind.COMM, rank=0)
    maker.task(r0, 100)
    a = maker.task(r0, 50)
    maker.task(r0, 850)
    a2 = maker.task(r0, 50)
    x, x2 = maker.task(link, 40), maker.task(link, 40)
    maker.edge(a, x)
    maker.edge(a2, x2)
    maker.task(r1, 120)
    b = maker.task(r1, 50)
    maker.task(r1, 1130)
    b2 = maker.task(r1, 50)
    pg = PipeGraph(maker.g, posts=[(a, 1), (a2, 1), (b, 0), (b2, 0)], sent={a: x, a2: x2})
    assert add_post_collisions(pg, dev) == (0, 0, 1, 340)
    assert maker.g.tasks["dur_ns"][[a, b, x, x2]].tolist() == [50, 50, 380, 40]
    assert simulate(maker.g).end_ns[x] == 150 + 380


def test_a_late_receive_waits_a_share_of_its_busy_senders_compute(maker):
    # rank 0: 1000 ns of work, a send's post (50), 2000 more, then waits for rank 1 (a break);
    # rank 1: 1500, the receive's post (50), 3000.  The receive's post ends at 1550, after the
    # send's (1050): the sender, busy 1050 ns without a break when it posted, computes on until
    # 3050.  Share at 1050 ns busy on ((500, 0.1), (2000, 0.4)): 0.21; the transfer waits
    # 0.21 x (3050 - 1550) = 315 ns more.
    dev = DeviceProfile("t", "cpu", {}, {}, 0, p2p_late_hold={"gloo": ((500.0, 0.1), (2000.0, 0.4))})
    r0, r1, link = maker.lane(rank=0), maker.lane(rank=1), maker.lane(LaneKind.COMM, rank=0)
    maker.task(r0, 1000)
    s = maker.task(r0, 50)
    maker.task(r0, 2000)
    d = maker.task(r0, 10)
    maker.task(r1, 1500)
    r = maker.task(r1, 50)
    last = maker.task(r1, 3000)
    x = maker.task(link, 40)
    for a, b in ((s, x), (r, x), (last, d)):
        maker.edge(a, b)
    pg = PipeGraph(maker.g, sent={s: x}, received={x: r})
    assert add_late_holds(pg, dev) == (1, 315)
    assert maker.g.tasks["dur_ns"][x] == 355 and simulate(maker.g).end_ns[x] == 1550 + 355
    early = PipeGraph(maker.g, sent={r: x}, received={x: s})     # receive before the send: nothing
    assert add_late_holds(early, dev) == (0, 0)


def test_no_collision_figures_leave_the_posts_alone(maker):
    r0, r1 = maker.lane(rank=0), maker.lane(rank=1)
    a, b = maker.task(r0, 50), maker.task(r1, 50)
    pg = PipeGraph(maker.g, posts=[(a, 1), (b, 0)])
    assert add_post_collisions(pg, device()) == (0, 0, 0, 0)
    assert maker.g.tasks["dur_ns"][[a, b]].tolist() == [50, 50]


def test_the_pipeline_what_if_notes_colliding_posts():
    # 1F1B over 2 stages, equal costs: in the steady state rank 0 posts the send of 0F(i+1) while
    # rank 1 posts that of 1B(i), 3 ns apart, each followed by a receive: 8 colliding posts an iteration
    acts = sch.one_f_one_b(2, 4)
    dev = DeviceProfile("t", "cpu", {"float32": Curve.flat(1e9)}, {"float32": Curve.flat(1e9)}, 0,
                        p2p={"gloo": (1e9, 50.0)}, p2p_post={"gloo": (5.0, 3.0)},
                        p2p_collision={"gloo": ((0.0, 400.0), (60.0, 0.0))})
    plain = dataclasses.replace(dev, p2p_collision={})
    pg, ref = build_graph(costs(2, 100, 200, send=1000), acts, 3, dev, True, 4), \
        build_graph(costs(2, 100, 200, send=1000), acts, 3, plain, True, 4)
    n, added, _, _ = add_post_collisions(pg, dev)
    assert n == 8 * 3 and added > 0 and add_post_collisions(ref, plain) == (0, 0, 0, 0)
    assert iteration_ns(pg) > iteration_ns(ref)


# ------------------------------------------------------- the what-if itself
def layered_graph(n_layers=4, f=40, b=80, iterations=3, opt=0, updates=0, update_ns=0):
    """One CPU lane; each iteration: marker, F of each layer, B of each layer reversed, optimizer
    (a call of ``opt`` ns, then ``updates`` in-place parameter updates of ``update_ns``)."""
    g = DependencyGraph()
    lane = g.add_lane(Lane(0, LaneKind.CPU_THREAD, 1, 1))
    g.markers[0] = []
    names = [f"net.{i}" for i in range(n_layers)]

    def task(dur, phase, it, layer=None, kind=EventKind.CPU_OP, name=None):
        # bytes: a CPU op with neither FLOPs nor bytes is overhead that batch scaling keeps
        (t,) = g.add_tasks(lane=[lane], kind=[kind], name=[g.names.intern(name or layer or "x")], dur_ns=[dur],
                           bytes=[64],
                           phase=[int(phase)], iteration=[it], layer=[g.layers.intern(layer) if layer else -1])
        g.lane_tasks[lane].append(int(t))
        return int(t)

    for it in range(iterations):
        g.markers[0].append(task(0, Phase.OTHER, it, kind=EventKind.MARKER))
        for n in names:
            task(f, Phase.FORWARD, it, n)
        for n in reversed(names):
            task(b, Phase.BACKWARD, it, n)
        if opt:
            task(opt, Phase.OPTIMIZER, it, "Optimizer.step#SGD.step")
        for _ in range(updates):
            task(update_ns, Phase.OPTIMIZER, it, name="aten::add_")
    g.markers[0].append(task(0, Phase.OTHER, iterations, kind=EventKind.MARKER))
    g.measured_boundaries_ns[0] = np.zeros(iterations + 1, np.int64)
    return g


def whatif(spec, g, dev=None):
    ctx = WhatIfContext(graph=g, trace=None, device=dev or device())
    get(spec).apply(ctx)
    return ctx, simulate(ctx.graph).mean_iteration_ns()[1]


def test_one_stage_one_microbatch_reproduces_the_baseline():
    g = layered_graph(opt=30)
    base = simulate(g).mean_iteration_ns()[1]
    _, pred = whatif("pipeline:stages=1,microbatches=1,schedule=gpipe", g)
    assert pred == base == 4 * 120 + 30


def test_two_stages_exact_prediction_and_metrics():
    # per micro-batch (M=2): F 20, B 40 per layer; 2 layers per stage -> f=40, b=80 per stage
    ctx, pred = whatif("pipeline:stages=2,microbatches=2,schedule=1f1b", layered_graph(opt=30))
    assert pred == (2 + 1) * 120 + 15          # (M+S-1)(f+b) + the rank's half of the step
    m = ctx.metrics
    assert m["partition"] == "net.0..net.1 | net.2..net.3"
    assert (m["stage0_forward_ms"], m["stage1_backward_ms"]) == (40e-6, 80e-6)
    assert m["bubble_fraction"] == pytest.approx(0.5)


def test_each_stage_pays_the_whole_optimizer_call():
    """The step: a 10 ns call around 4 parameter updates of 5 ns.  Each of the 2 stages runs the
    call and its half of the updates (split evenly: the graph has no parameter sizes)."""
    ctx, pred = whatif("pipeline:stages=2,microbatches=2,schedule=1f1b", layered_graph(opt=10, updates=4, update_ns=5))
    assert pred == (2 + 1) * 120 + 10 + 10     # (M+S-1)(f+b) + the call + the rank's half of the updates
    _, one = whatif("pipeline:stages=1,microbatches=1,schedule=gpipe", layered_graph(opt=10, updates=4, update_ns=5))
    assert one == 4 * 120 + 30                 # one stage: the traced step, once


def test_partition_given_by_layer_name_and_counts():
    ctx, _ = whatif("pipeline:stages=2,microbatches=2,schedule=gpipe,partition=net.3", layered_graph())
    assert ctx.metrics["partition"] == "net.0..net.2 | net.3"
    ctx, _ = whatif("pipeline:stages=2,microbatches=2,schedule=gpipe,partition=1:3", layered_graph())
    assert ctx.metrics["partition"] == "net.0 | net.1..net.3"


@pytest.mark.parametrize("spec,msg", [
    ("pipeline:stages=5,microbatches=8", "5 stages but the model has only 4 layers"),
    ("pipeline:stages=3,microbatches=2,schedule=1f1b", "at least as many micro-batches as stages"),
    ("pipeline:stages=2,virtual=2,schedule=gpipe", "needs schedule=interleaved"),
    ("pipeline:stages=2,partition=1:1", "2 positive layer counts summing to 4"),
    ("pipeline:stages=2,partition=nope", "no layer named 'nope'"),
    ("pipeline:stages=0", "must be at least 1"),
])
def test_impossible_configurations_refused(spec, msg):
    with pytest.raises(OptionError, match=msg):
        whatif(spec, layered_graph())


def test_bad_schedule_name_refused():
    with pytest.raises(OptionError, match="schedule must be one of"):
        get("pipeline:schedule=zigzag")


def test_real_trace_predicts_and_reports_memory(profile):
    from daydream.analysis import trace_and_graph
    from daydream.optimizations._pipegraph import recorded_ops
    from daydream.whatif import predict

    trace = REPO / "traces" / "mlp.trace.json.gz"
    one, _ = predict(trace, ["pipeline:stages=1,microbatches=1,schedule=gpipe,recording_us=0"], device=profile)
    assert one.predicted_ms == pytest.approx(one.baseline_ms, abs=1e-5)   # stage times round to whole ns
    # the tracer's 2 us per recorded forward and backward op taken out of the one pass
    ops = recorded_ops(trace_and_graph(trace)[1])
    fb = sum(n for (ph, _), n in ops.items() if ph in (Phase.FORWARD, Phase.BACKWARD))
    untraced, _ = predict(trace, ["pipeline:stages=1,microbatches=1,schedule=gpipe,recording_us=2"], device=profile)
    assert fb > 100 and untraced.predicted_ms == pytest.approx(one.baseline_ms - fb * 2e-3, abs=1e-4)
    rep, res = predict(trace, ["pipeline:stages=2,microbatches=4,schedule=gpipe"], device=profile)
    m = rep.metrics
    assert 0 < m["bubble_fraction"] < 1
    assert m["rank0_memory_bytes"] > m["rank0_weights_bytes"] > 0
    assert m["rank0_activations_bytes"] > 0
    r1f1b, _ = predict(trace, ["pipeline:stages=2,microbatches=4,schedule=1f1b"], device=profile)
    assert r1f1b.metrics["rank0_activations_bytes"] < m["rank0_activations_bytes"]   # 2 vs 4 in flight


def test_each_rank_scales_its_gradients_once_per_iteration(profile):
    """One pass per rank and iteration, as long as the stages' parameter tensors and bytes
    say; none with one micro-batch (torch divides by 1: skipped) or ``scale_grads=false``."""
    from daydream.optimizations._pipegraph import scale_grads_ns
    from daydream.whatif import predict

    trace = REPO / "traces" / "mlp.trace.json.gz"
    rep, res = predict(trace, ["pipeline:stages=2,microbatches=4,schedule=gpipe,corun=off"], device=profile)
    passes = select(res.graph, name="^scale gradients")
    assert len(passes) == 2 * 3                                   # 2 ranks x 3 simulated iterations
    mods = [m for m in load_trace(trace).ranks[0].meta["daydream"]["modules"] if m.get("param_bytes")]
    total = sum(res.graph.tasks["dur_ns"][passes]) / 3
    whole = scale_grads_ns(profile, np.array([m["param_bytes"] for m in mods]), np.ones(len(mods)))
    assert total == pytest.approx(whole, abs=2)                   # the stages' shares add up to the model
    for spec in ("pipeline:stages=2,microbatches=4,schedule=gpipe,corun=off,scale_grads=false",
                 "pipeline:stages=2,microbatches=1,schedule=gpipe,corun=off"):
        _, other = predict(trace, [spec], device=profile)
        assert len(select(other.graph, name="^scale gradients")) == 0
    off, _ = predict(trace, ["pipeline:stages=2,microbatches=4,schedule=gpipe,corun=off,scale_grads=false"],
                     device=profile)
    assert off.predicted_ms < rep.predicted_ms


def test_runtime_cost_per_action_is_added_to_every_action():
    # as test_two_stages_exact_prediction_and_metrics, each F and B 1000 ns longer
    _, pred = whatif("pipeline:stages=2,microbatches=2,schedule=1f1b,action_overhead_us=1", layered_graph(opt=30))
    assert pred == (2 + 1) * (120 + 2000) + 15
    with pytest.raises(OptionError, match="action_overhead_us must be non-negative"):
        whatif("pipeline:action_overhead_us=-1", layered_graph())


def recorded(g):
    """``g`` with every CPU op a recorded op of its own (as a trace's tasks are)."""
    g.tasks["event"] = np.arange(g.n_tasks)
    return g


def test_the_tracer_s_cost_per_recorded_op_comes_out_of_every_micro_batch_pass():
    # as test_two_stages_exact_prediction_and_metrics, each layer's F and B one recorded op of 5 ns less
    ctx, pred = whatif("pipeline:stages=2,microbatches=2,schedule=1f1b,recording_us=0.005",
                       recorded(layered_graph(opt=30)))
    assert pred == (2 + 1) * (120 - 4 * 5) + 15
    assert (ctx.metrics["stage0_forward_ms"], ctx.metrics["stage1_backward_ms"]) == (30e-6, 70e-6)
    assert any("recorded ops a pass" in n for n in ctx.notes)
    # without event rows (inserted tasks) nothing was recorded, so nothing comes out
    _, kept = whatif("pipeline:stages=2,microbatches=2,schedule=1f1b,recording_us=0.005", layered_graph(opt=30))
    assert kept == (2 + 1) * 120 + 15
    # 0 keeps it; auto (the default) measures it here only where the graph holds recorded ops
    _, zero = whatif("pipeline:stages=2,microbatches=2,schedule=1f1b,recording_us=0", recorded(layered_graph(opt=30)))
    _, auto = whatif("pipeline:stages=2,microbatches=2,schedule=1f1b", layered_graph(opt=30))
    assert zero == auto == kept
    for bad in ("-1", "fast"):
        with pytest.raises(OptionError, match="recording_us must be auto or a non-negative number of us"):
            whatif(f"pipeline:recording_us={bad}", layered_graph())


def test_recorded_ops_count_an_op_cut_into_slices_once_per_iteration():
    from daydream.optimizations._pipegraph import recorded_ops

    g = recorded(layered_graph(n_layers=2, iterations=3))
    T = g.tasks
    fwd = np.flatnonzero(T["phase"] == Phase.FORWARD)
    T["event"][fwd[1::2]] = T["event"][fwd[0::2]]     # each iteration's two forward tasks: one op in two slices
    T["layer"][fwd[1::2]] = T["layer"][fwd[0::2]]
    ops = recorded_ops(g)
    net0, net1 = (g.layers.intern(n) for n in ("net.0", "net.1"))
    assert ops == {(int(Phase.FORWARD), net0): 1.0, (int(Phase.BACKWARD), net0): 1.0,
                   (int(Phase.BACKWARD), net1): 1.0}


def test_the_tracer_s_cost_per_op_measured_here_is_positive_and_small():
    from daydream.overhead import recording_us_per_op

    assert 0.0 < recording_us_per_op(rounds=5, steps=4) < 100.0


@pytest.mark.parametrize("name", ["_schedules", "_pipegraph", "_common", "tessel"])
def test_docstring_examples(name):
    import doctest
    import importlib

    mod = importlib.import_module(f"daydream.optimizations.{name}")
    res = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert res.failed == 0 and res.attempted > 0


def test_gradient_accumulation_after_the_first_microbatch():
    # 1 stage, 3 micro-batches: backwards 1 and 2 each add 12 ns of accumulation into .grad
    sc = costs(1, 10, 20)
    sc = sc.__class__(**{**sc.__dict__, "accumulate_ns": (12,)})
    assert iteration_ns(build_graph(sc, sch.gpipe(1, 3), 3, device(), True, 3)) == 3 * 30 + 2 * 12


def test_accumulation_cost_is_a_streaming_add_at_measured_bandwidth():
    from daydream.optimizations._pipegraph import accumulate_ns

    assert accumulate_ns(device(), 1000) == pytest.approx(3 * 1000 / 1e9 * 1e9)   # 3 bytes moved per byte
    assert accumulate_ns(device(), 0) == 0.0


def test_the_gradient_scaling_pass_runs_at_the_in_place_rate_for_its_bytes():
    """Per tensor the op overhead, and 2 bytes moved per gradient byte at the in-place curve's
    rate for that many (the last backward just wrote them); an older profile without the curve
    takes the elementwise curve at the same bytes, not its from-memory end."""
    from daydream.optimizations._pipegraph import scale_grads_ns

    ew = {"float32": Curve(((1e3, 4e9), (1e6, 2e9), (1e9, 1e9)))}
    dev = DeviceProfile("x", "cpu", {"float32": Curve.flat(1e9)}, ew, 100,
                        inplace={"float32": Curve(((1e3, 8e9), (1e6, 5e9), (1e9, 2e9)))})
    two = scale_grads_ns(dev, np.array([300_000, 200_000]), np.array([2, 1]))
    assert two == pytest.approx(3 * 100 + 1e6 / 5e9 * 1e9)            # 1 MB moved at 5 GB/s
    old = dataclasses.replace(dev, inplace={})
    assert scale_grads_ns(old, np.array([500_000]), np.array([1])) == pytest.approx(100 + 1e6 / 2e9 * 1e9)
    assert scale_grads_ns(dev, np.array([0]), np.array([0])) == 0.0
    again = DeviceProfile.from_json(dev.to_json())
    assert again.inplace == dev.inplace and DeviceProfile.from_json(old.to_json()).inplace == {}


def test_calibration_measures_an_in_place_pass_by_bytes_moved():
    import torch

    from daydream.calibrate import _inplace_curve

    curve = _inplace_curve(torch, torch.device("cpu"), [2 ** 10, 2 ** 14], 0.002)
    assert [x for x, _ in curve.points] == [2 * 4 * 2 ** 10, 2 * 4 * 2 ** 14]
    assert all(y > 0 for _, y in curve.points)


def test_the_step_call_s_python_before_its_first_update_is_charged_to_the_step():
    """In each counted iteration the optimizer owns the gap between the last task before its
    first one and that first task (its call's Python, once an iteration), besides its own time
    up to the next iteration: with micro-batches the last backward layer must not repeat it."""
    from daydream.analysis import trace_and_graph
    from daydream.optimizations._pipegraph import _work_lanes, attribute

    _, g = trace_and_graph(REPO / "traces" / "mlp.trace.json.gz")
    res = simulate(g)
    times, _, _ = attribute(g, res)
    T = g.tasks
    rank = min(g.ranks)
    work = np.concatenate([np.asarray(g.lane_tasks[li], np.int64) for li in _work_lanes(g, rank)])
    work = work[T["kind"][work] != EventKind.MARKER]
    work = work[np.argsort(res.start_ns[work], kind="stable")]
    marks = res.start_ns[np.asarray(g.markers[rank], np.int64)]
    owned, gaps = [], []
    for i in range(1, len(marks) - 1):
        ids = work[(res.start_ns[work] >= marks[i]) & (res.start_ns[work] < marks[i + 1])]
        j = int(np.argmax(T["phase"][ids] == Phase.OPTIMIZER))
        assert j > 0 and (T["phase"][ids[j:]] == Phase.OPTIMIZER).all()   # the step closes the iteration
        before = res.end_ns[ids[:j]].max()
        gaps.append(res.start_ns[ids[j]] - before)
        owned.append(marks[i + 1] - before)
    assert np.mean(gaps) > 0
    opt = sum(v for (ph, _), v in times.items() if ph == Phase.OPTIMIZER)
    assert opt == pytest.approx(np.mean(owned), rel=1e-9)


def test_ranks_on_one_host_compute_at_the_measured_corun_rate(monkeypatch):
    """With 2 ranks on one CPU host, forward and backward run at corun_rate (0.8: 1.25x the time);
    one rank, corun=0, or a rate of 1 change nothing."""
    from daydream.optimizations import _corun

    monkeypatch.setattr(_corun, "_measured", lambda ctx, f: 0.8)      # the twin measurement
    ctx, two = whatif("pipeline:stages=2,microbatches=1,schedule=gpipe", layered_graph())
    assert any("0.80x the speed alone" in n for n in ctx.notes)
    _, plain = whatif("pipeline:stages=2,microbatches=1,schedule=gpipe,corun=off", layered_graph())
    _, profile = whatif("pipeline:stages=2,microbatches=1,schedule=gpipe,corun=profile", layered_graph())
    assert profile == plain                           # the test profile's own co-run rate is 1
    # 2 stages x 2 layers: F 80, B 160 ns per stage alone; 100 / 200 at 0.8 (no transfers on this device)
    fwd = simulate(layered_graph()).mean_iteration_ns()[1]
    assert plain == fwd                               # one micro-batch, stages in turn: the whole step
    assert two == round(fwd / 0.8)
    _, one = whatif("pipeline:stages=1,microbatches=1,schedule=gpipe", layered_graph())
    assert one == fwd


def test_forward_and_backward_run_at_their_phases_corun_rate(monkeypatch):
    """``corun=trace`` takes a rate per phase (:func:`corun_rates`, measured at the micro-batch);
    ``corun=compute`` the compute ops' one rate."""
    from daydream.optimizations import _corun

    asked = []
    monkeypatch.setattr(_corun, "_measured_phases", lambda ctx, f: asked.append(f) or
                        {Phase.FORWARD: 0.8, Phase.BACKWARD: 0.5, Phase.OPTIMIZER: 0.1, None: 1.0})
    monkeypatch.setattr(_corun, "_measured", lambda ctx, f: 0.8)
    ctx, two = whatif("pipeline:stages=2,microbatches=1,schedule=gpipe", layered_graph())
    # one micro-batch, stages in turn: F 4 x 40 ns at 0.8, B 4 x 80 ns at 0.5
    assert two == 160 / 0.8 + 320 / 0.5 and asked == [1.0]
    assert any("forward 0.80x / backward 0.50x the speed alone" in n for n in ctx.notes)
    _, compute = whatif("pipeline:stages=2,microbatches=1,schedule=gpipe,corun=compute", layered_graph())
    assert compute == round(480 / 0.8)


def test_corun_rate_is_one_off_cpu_and_without_a_second_core(monkeypatch):
    import os

    from daydream import opcorun
    from daydream.optimizations._corun import corun_rate

    flat = {"float32": Curve.flat(1e9)}
    gpu = WhatIfContext(graph=layered_graph(), trace=None, device=DeviceProfile("g", "gpu", flat, flat, 0))
    assert corun_rate(gpu, 0.25) == 1.0
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert opcorun.sequence_corun(['["aten::mm", [[2, 2], [2, 2]], ["float", "float"], null, null]']) is None


def test_the_pipeline_job_loads_shuffled_batches_in_the_same_order_on_every_rank():
    import torch

    from daydream.workloads.pipeline import _batches, parse_args

    args = parse_args(["--batch-size", "4", "--dataset-batches", "3", "--in-features", "5"])
    a, b = _batches(args), _batches(args)
    first = [next(a) for _ in range(7)]           # past one pass over the data set: the loader starts again
    assert all(x.shape == (4, 5) and y.shape == (4,) for x, y in first)
    assert all(torch.equal(x, x2) and torch.equal(y, y2) for (x, y), (x2, y2) in zip(first, (next(b) for _ in range(7))))
    seen = torch.cat([x for x, _ in first[:3]])
    assert len({tuple(r.tolist()) for r in seen}) == 12        # one pass: every sample once
    assert not torch.equal(torch.cat([x for x, _ in first[:3]]), torch.cat([x for x, _ in first[3:6]]))  # reshuffled


def test_measuring_the_tracer_s_cost_leaves_no_layer_markers_behind():
    import torch

    from daydream.overhead import recording_us_per_op

    call = torch.nn.Module.__call__
    recording_us_per_op(rounds=1, steps=1, blocks=2)
    assert torch.nn.Module.__call__ is call
