"""Point-to-point transfer figures: calibrated apart from the all-reduce (and reported by
``daydream calibrate``, whose profiles must load again), used by the
pipeline, Tessel and Hydra hand-overs, added to an older cached profile."""
from __future__ import annotations

import dataclasses
import json
import os
import threading
import time

import pytest

from daydream.calibrate_procs import UNRESOLVED_BYTES_PER_S
from daydream.device import load_profile, save_profile
from daydream.errors import DaydreamError
from daydream.primitives import select
from daydream.whatif import predict

from conftest import flat_profile


def test_profile_keeps_p2p_figures_and_refuses_bad_ones(tmp_path):
    prof = dataclasses.replace(flat_profile(), p2p={"gloo": (2e9, 100_000.0)})
    path = save_profile(prof, str(tmp_path / "p.json"))
    assert load_profile(path).p2p == {"gloo": (2e9, 100_000.0)}
    doc = json.loads(open(path).read())
    doc["p2p"] = {"gloo": [0, 5]}
    open(path, "w").write(json.dumps(doc))
    with pytest.raises(DaydreamError, match="p2p gloo: needs"):
        load_profile(path)


def test_profile_keeps_p2p_post_and_refuses_bad_ones(tmp_path):
    prof = dataclasses.replace(flat_profile(), p2p_post={"gloo": (40_000.0, 30_000.0)})
    path = save_profile(prof, str(tmp_path / "p.json"))
    assert load_profile(path).p2p_post_ns("gloo") == (40_000.0, 30_000.0)
    doc = json.loads(open(path).read())
    doc["p2p_post"] = {"gloo": [-1, 5]}
    open(path, "w").write(json.dumps(doc))
    with pytest.raises(DaydreamError, match="p2p_post gloo: needs"):
        load_profile(path)


def test_profile_keeps_the_p2p_handshake_and_refuses_a_negative_one(tmp_path):
    path = save_profile(dataclasses.replace(flat_profile(), p2p_handshake={"gloo": 25_000.0}), str(tmp_path / "p.json"))
    assert load_profile(path).p2p_handshake_ns("gloo") == 25_000.0
    assert flat_profile().p2p_handshake_ns() == 0.0          # older profiles: no handshake
    doc = json.loads(open(path).read())
    doc["p2p_handshake"] = {"gloo": -1}
    open(path, "w").write(json.dumps(doc))
    with pytest.raises(DaydreamError, match="p2p_handshake gloo: needs"):
        load_profile(path)


def test_profile_keeps_what_sends_are_made_of_and_refuses_a_share_over_one(tmp_path):
    path = save_profile(dataclasses.replace(flat_profile(), p2p_sends={"gloo": (30_000.0, 0.25)}),
                        str(tmp_path / "p.json"))
    assert load_profile(path).p2p_sends == {"gloo": (30_000.0, 0.25)}
    doc = json.loads(open(path).read())
    doc["p2p_sends"] = {"gloo": [30_000.0, 1.5]}
    open(path, "w").write(json.dumps(doc))
    with pytest.raises(DaydreamError, match="p2p_sends gloo: needs"):
        load_profile(path)


def test_profile_keeps_the_send_to_a_receive_posted_ahead_and_refuses_a_negative_one(tmp_path):
    path = save_profile(dataclasses.replace(flat_profile(), p2p={"gloo": (1e9, 300_000.0)},
                                            p2p_preposted={"gloo": 35_000.0}), str(tmp_path / "p.json"))
    prof = load_profile(path)
    assert prof.p2p_preposted == {"gloo": 35_000.0}
    assert prof.p2p_preposted_ns(1e6) == 1e6 / 1e9 * 1e9 + 35_000.0 < prof.p2p_ns(1e6)
    doc = json.loads(open(path).read())
    doc["p2p_preposted"] = {"gloo": -1}
    open(path, "w").write(json.dumps(doc))
    with pytest.raises(DaydreamError, match="p2p_preposted gloo: needs"):
        load_profile(path)


def test_profile_keeps_the_pipeline_hand_over_and_refuses_a_negative_one(tmp_path):
    path = save_profile(dataclasses.replace(flat_profile(), p2p={"gloo": (1e9, 600_000.0)},
                                            p2p_handover={"gloo": 250_000.0}), str(tmp_path / "p.json"))
    prof = load_profile(path)
    assert prof.p2p_handover == {"gloo": 250_000.0}
    assert prof.p2p_handover_ns(1e6) == 1e6 + 250_000.0 and prof.p2p_ns(1e6) == 1e6 + 600_000.0
    doc = json.loads(open(path).read())
    doc["p2p_handover"] = {"gloo": -1}
    open(path, "w").write(json.dumps(doc))
    with pytest.raises(DaydreamError, match="p2p_handover gloo: needs"):
        load_profile(path)


def test_handovers_count_receivers_already_waiting_from_the_post_s_return():
    from daydream.calibrate_handover import P2P_HANDOVER_BYTES, handover_latency_ns, handover_times_ns

    sends0 = [(0, 1, 0, 100), (0, 2, 500, 600)]                  # rank 0 posts tags 1 and 2
    waits1 = [(1, 1, 50, 400), (1, 2, 700, 800)]                 # waiting before 1's post ended; late for 2
    waits0, sends1 = [(1, 3, 1000, 2500)], [(0, 3, 1100, 1500)]  # rank 0 waits for tag 3 from rank 1
    assert sorted(handover_times_ns(sends0 + waits0, waits1 + sends1)) == [300, 1000]
    assert handover_times_ns(sends0, [(1, 2, 700, 800)]) == []     # no receiver waited ahead
    # the figure: the pooled mean less the bytes' time (here 100 ns), never below 0
    assert handover_latency_ns([300, 1000], P2P_HANDOVER_BYTES / 100e-9) == 550.0
    assert handover_latency_ns([50], P2P_HANDOVER_BYTES / 100e-9) == 0.0
    assert handover_latency_ns([], 1e9) == 0.0


def test_a_pipeline_sitting_keeps_both_ranks_posts_and_the_receive_posts_are_no_waits():
    """``p2p_post`` comes from the posts of the hand-over exchange (kind 0 a send's, 2 a
    receive's), both ranks' pooled; a receive's post row is not a wait."""
    torch = pytest.importorskip("torch")
    from daydream.calibrate_handover import HandoverSitting, _handover_times, pipeline_post_ns

    rows0 = [(0, 1, 0, 100), (2, 3, 900, 940), (1, 3, 940, 2500)]          # rank 0: a send, a receive
    rows1 = [(2, 1, 20, 50), (1, 1, 50, 400), (0, 3, 1100, 1500)]          # rank 1: a receive, a send
    theirs = [torch.tensor([len(rows1)]), torch.tensor(rows1, dtype=torch.int64)]

    class Dist:
        def recv(self, t, peer):
            t.copy_(theirs.pop(0))

    got = _handover_times(torch, Dist(), 0, rows0)
    assert got == HandoverSitting((1000, 300), (100, 400), (40, 30))
    assert pipeline_post_ns([got]) == (250.0, 35.0)


def test_calibrate_says_what_share_of_sends_stalled():
    from daydream.cli_whatif import _sends_text

    assert _sends_text((30_000.0, 0.25)) == (" (median send 30 us; 25 % of sends took over 10x that, "
                                             "and their mean cost is in the latency)")
    assert _sends_text((30_000.0, 0.0)) == ""


def _stamping_rank0(monkeypatch, torch, cp, took):
    """A ``dist`` for rank 0 of :func:`daydream.calibrate_p2p._p2p_tries`: the clock moves 10 ms
    a read, no spinning, and the receiver's stamps that come back are each send's start plus
    ``took`` (ns, warm-ups first)."""
    sent, now = [], [0]

    class Dist:
        @staticmethod
        def barrier():
            pass

        @staticmethod
        def send(t, dst):
            sent.append(now[0])

        @staticmethod
        def recv(t, src):
            t.copy_(torch.tensor([a + b for a, b in zip(sent, took)]))

    def tick():
        now[0] += 10_000_000
        return now[0]

    monkeypatch.setattr(cp, "spin", lambda seconds, work=None: None)
    monkeypatch.setattr(cp.time, "perf_counter_ns", tick)
    return Dist


def test_one_way_sends_report_their_mean_median_and_stalled_share(monkeypatch):
    """Rank 0 gets the receiver's stamps back: of 123 sends (3 warm-up), 110 take 30 us and 10
    take 3 ms; the trimmed mean drops the slowest 6, the stalled share counts those over 10x
    the median."""
    torch = pytest.importorskip("torch")
    from daydream import calibrate_p2p as cp

    took = [30_000] * 3 + [30_000] * 110 + [3_000_000] * 10
    monkeypatch.setattr(cp, "P2P_TRIES", 120)
    Dist = _stamping_rank0(monkeypatch, torch, cp, took)
    mean, median, stalled = cp._p2p_one_way_ns(torch, Dist, 0, torch.zeros(4))
    assert median == 30_000 and stalled == pytest.approx(10 / 120)
    assert mean == pytest.approx((110 * 30_000 + 4 * 3_000_000) / 114)


def test_notified_sends_are_timed_in_pairs(monkeypatch):
    """The waiter thread's extra time is the median of paired differences: tries alternate
    (notified second, then first, ...), so a slow spell that holds both tries of a pair (+1 ms
    on every fourth pair) moves the plain sends' mean but not the gap (100 us here)."""
    torch = pytest.importorskip("torch")
    from daydream import calibrate_p2p as cp

    monkeypatch.setattr(cp, "P2P_TRIES", 40)
    order = [(False, True), (True, False)] * 20
    took = [30_000] * 3 + [30_000 + 100_000 * n + 1_000_000 * (k % 4 == 0)
                           for k, pair in enumerate(order) for n in pair]
    Dist = _stamping_rank0(monkeypatch, torch, cp, took)
    preposted, notified = cp._p2p_notified_ns(torch, Dist, 0, torch.zeros(4))
    assert notified - preposted == pytest.approx(100_000)
    assert preposted == pytest.approx((30 * 30_000 + 8 * 1_030_000) / 38)    # the slowest 5 % dropped


def test_hydra_transfers_take_the_p2p_figures(own_trace):
    trace = own_trace("mlp")
    old = flat_profile(allreduce=(1e9, 500_000.0))
    new = dataclasses.replace(old, p2p={"gloo": (1e9, 20_000.0)})
    durations = []
    for prof in (old, new):
        _, res = predict(trace, ["hydra:models=1,devices=2"], device=prof)
        (t,) = select(res.graph, name="^model 0 activation")
        durations.append(int(res.end_ns[t] - res.start_ns[t]))
    dur_old, dur_new = durations
    assert dur_old - dur_new == 500_000 - 20_000    # same bytes at the same bandwidth: only the latency differs


def test_pipeline_sends_take_the_p2p_figures(own_trace):
    trace = own_trace("mlp")
    old = flat_profile(allreduce=(1e9, 500_000.0))
    new = dataclasses.replace(old, p2p={"gloo": (1e9, 20_000.0)})
    opt = ["pipeline:stages=2,microbatches=2,schedule=gpipe"]
    a, _ = predict(trace, opt, device=old)
    b, _ = predict(trace, opt, device=new)
    assert b.predicted_ms < a.predicted_ms


def test_pipeline_threads_post_sends_and_receives(own_trace):
    """With ``p2p_post``: each hand-over's send is posted on the sender's compute lane right
    after the action that produced it, its receive on the receiver's lane right before the
    action that needs it; the transfer starts once both are posted and lasts ``p2p_ns`` minus
    the send's share."""
    trace = own_trace("mlp")
    prof = dataclasses.replace(flat_profile(), p2p={"gloo": (1e9, 100_000.0)}, p2p_post={"gloo": (30_000.0, 20_000.0)})
    _, res = predict(trace, ["pipeline:stages=2,microbatches=2,schedule=gpipe"], device=prof)
    g, T = res.graph, res.graph.tasks
    posts, recvs, sends = (select(g, name=f"^{w} ") for w in ("post send", "post receive", "send"))
    assert len(posts) == len(recvs) == len(sends) > 0
    assert set(T["dur_ns"][posts]) == {30_000} and set(T["dur_ns"][recvs]) == {20_000}
    E = g.edges
    for p in posts:
        (x,) = [s for s in sends if g.task_name(s) == g.task_name(p)[len("post "):] and T["iteration"][s] == T["iteration"][p]]
        preds = E["src"][E["dst"] == x]
        assert sorted(g.task_name(t).split(" ")[1] for t in preds) == ["receive", "send"]
        assert res.start_ns[x] == max(res.end_ns[preds].max(), res.end_ns[p])
        assert T["dur_ns"][x] == prof.p2p_ns(T["bytes"][x]) - 30_000
    for r in recvs:
        order = g.lane_tasks[int(T["lane"][r])]
        nxt = order[order.index(int(r)) + 1]
        assert g.task_name(nxt) == g.task_name(r)[len("post receive "):]
    _, plain = predict(trace, ["pipeline:stages=2,microbatches=2,schedule=gpipe"],
                       device=dataclasses.replace(prof, p2p_post={}))
    assert len(select(plain.graph, name="^post ")) == 0 and plain.mean_iteration_ns()[1] < res.mean_iteration_ns()[1]


def test_tessel_charges_the_runtime_per_send_and_receive_action(own_trace):
    """torch's schedule runtime runs each send and receive as an action of its own: Tessel's
    graph charges ``action_overhead_us`` to each posting (the pipeline's schedules send inside
    their F/B actions and do not)."""
    trace = own_trace("mlp")
    prof = dataclasses.replace(flat_profile(), p2p={"gloo": (1e9, 100_000.0)})
    spec = "stages=2,microbatches=2,action_overhead_us=40"
    _, tes = predict(trace, [f"tessel:{spec}"], device=prof)
    posts = select(tes.graph, name="^post (send|receive) ")
    assert len(posts) > 0 and set(tes.graph.tasks["dur_ns"][posts]) == {40_000}
    _, pipe = predict(trace, [f"pipeline:{spec},schedule=1f1b"], device=prof)
    assert len(select(pipe.graph, name="^post ")) == 0


def _fake_ddp_figures(monkeypatch):
    """What ``ensure_profile`` measures for data-parallel and ``cycle``, without processes or DDP."""
    import daydream.calibrate as cal
    import daydream.calibrate_cycle as cycle
    import daydream.calibrate_procs as procs

    monkeypatch.setattr(cal, "ddp_ns", lambda torch, device: ((10, 20), (1, 2)))
    monkeypatch.setattr(procs, "gloo_wake_ns", lambda: 4e5)
    monkeypatch.setattr(cycle, "cycle_points", lambda torch: ((4e6, 1.0), (8e6, 1.1)))


def test_older_cached_profile_gets_p2p_added_and_a_given_one_is_left_alone(tmp_path, monkeypatch):
    import daydream.calibrate as cal
    from daydream import validate
    from daydream.device import default_profile_path

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    _fake_ddp_figures(monkeypatch)
    monkeypatch.setattr(cal, "gloo_p2p", lambda sizes=None: {
        "p2p": (3e9, 50_000.0), "p2p_post": (40_000.0, 30_000.0), "p2p_handshake": 9_000.0,
        "p2p_collision": ((0.0, 2e6), (1e5, 0.0)), "p2p_hold": ((0.0, 1e6), (8e5, 0.0)),
        "p2p_late_hold": ((1e6, 0.1),), "p2p_land": ((16384.0, 1e5),)})
    cached = save_profile(flat_profile(), default_profile_path("cpu", validate.THREADS))
    given = save_profile(flat_profile(), str(tmp_path / "mine.json"))
    before = open(given).read()
    said = []
    assert validate.ensure_profile(progress=said.append) == cached
    got = load_profile(cached)
    assert got.p2p == {"gloo": (3e9, 50_000.0)} and got.p2p_post == {"gloo": (40_000.0, 30_000.0)}
    assert got.p2p_handshake_ns("gloo") == 9_000.0 and got.p2p_collision_ns(5e4, "gloo") == 1e6
    assert got.p2p_hold_ns(4e5, "gloo") == 5e5 and got.p2p_late_hold_share(3e6, "gloo") == 0.1
    assert got.p2p_land_ns(1e6, "gloo") == 1e5
    assert "point-to-point" in said[0] and "DDP" in said[1] and "copies in turn" in said[2]
    assert got.collective_wake_ns("gloo") == 4e5 and got.ddp_call_ns == (10, 20) and got.ddp_tensor_ns == (1, 2)
    assert got.cycle == ((4e6, 1.0), (8e6, 1.1))
    assert validate.ensure_profile(given, progress=said.append) == given
    assert open(given).read() == before and len(said) == 3


def test_cached_profile_without_the_preposted_send_gets_it_measured(tmp_path, monkeypatch):
    """A profile calibrated before ``p2p_preposted`` existed, with every other point-to-point
    figure, is measured again by ``validate`` so that ``hydra`` gets the figure."""
    import daydream.calibrate as cal
    from daydream import validate
    from daydream.device import default_profile_path

    figures = {"p2p": (3e9, 50_000.0), "p2p_post": (40_000.0, 30_000.0), "p2p_handshake": 9_000.0,
               "p2p_collision": ((0.0, 2e6), (1e5, 0.0)), "p2p_hold": ((0.0, 1e6), (8e5, 0.0)),
               "p2p_late_hold": ((1e6, 0.1),), "p2p_land": ((16384.0, 1e5),)}
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    _fake_ddp_figures(monkeypatch)
    monkeypatch.setattr(cal, "gloo_p2p", lambda sizes=None: {**figures, "p2p_preposted": 30_000.0,
                                                             "p2p_notified": 150_000.0, "p2p_handover": 200_000.0})
    older = dataclasses.replace(flat_profile(), **{k: {"gloo": v} for k, v in figures.items()})
    cached = save_profile(older, default_profile_path("cpu", validate.THREADS))
    said = []
    assert validate.ensure_profile(progress=said.append) == cached
    assert load_profile(cached).p2p_preposted == {"gloo": 30_000.0} and "point-to-point" in said[0]
    assert load_profile(cached).p2p_handover == {"gloo": 200_000.0}


def test_cached_profile_without_the_notified_send_gets_it_measured(tmp_path, monkeypatch):
    """A profile calibrated before ``p2p_notified`` existed is measured again by ``validate``,
    so that ``hydra``'s shard-parallel schedule gets the waiter thread's cost."""
    import daydream.calibrate as cal
    from daydream import validate
    from daydream.device import default_profile_path

    figures = {"p2p": (3e9, 50_000.0), "p2p_post": (40_000.0, 30_000.0), "p2p_handshake": 9_000.0,
               "p2p_preposted": 30_000.0, "p2p_handover": 200_000.0, "p2p_collision": ((0.0, 2e6), (1e5, 0.0)),
               "p2p_hold": ((0.0, 1e6), (8e5, 0.0)), "p2p_late_hold": ((1e6, 0.1),), "p2p_land": ((16384.0, 1e5),)}
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    _fake_ddp_figures(monkeypatch)
    monkeypatch.setattr(cal, "gloo_p2p", lambda sizes=None: {**figures, "p2p_notified": 150_000.0})
    older = dataclasses.replace(flat_profile(), **{k: {"gloo": v} for k, v in figures.items()})
    cached = save_profile(older, default_profile_path("cpu", validate.THREADS))
    said = []
    assert validate.ensure_profile(progress=said.append) == cached
    assert load_profile(cached).p2p_notify_ns() == 120_000.0 and "point-to-point" in said[0]


def test_cached_profile_without_the_pipeline_hand_over_gets_it_measured(tmp_path, monkeypatch):
    """A profile calibrated before ``p2p_handover`` existed is measured again by ``validate``,
    so that ``pipeline`` and ``tessel`` get the figure."""
    import daydream.calibrate as cal
    from daydream import validate
    from daydream.device import default_profile_path

    figures = {"p2p": (3e9, 50_000.0), "p2p_post": (40_000.0, 30_000.0), "p2p_handshake": 9_000.0,
               "p2p_preposted": 30_000.0, "p2p_collision": ((0.0, 2e6), (1e5, 0.0)),
               "p2p_hold": ((0.0, 1e6), (8e5, 0.0)), "p2p_late_hold": ((1e6, 0.1),), "p2p_land": ((16384.0, 1e5),)}
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    _fake_ddp_figures(monkeypatch)
    monkeypatch.setattr(cal, "gloo_p2p", lambda sizes=None: {**figures, "p2p_notified": 150_000.0,
                                                             "p2p_handover": 200_000.0})
    older = dataclasses.replace(flat_profile(), **{k: {"gloo": v} for k, v in figures.items()})
    cached = save_profile(older, default_profile_path("cpu", validate.THREADS))
    said = []
    assert validate.ensure_profile(progress=said.append) == cached
    assert load_profile(cached).p2p_handover == {"gloo": 200_000.0} and "point-to-point" in said[0]


def test_worker_processes_that_exit_without_a_result_are_an_error_not_a_hang():
    from daydream.calibrate_procs import first_result

    t0 = time.monotonic()
    with pytest.raises(DaydreamError, match=r"_exit: its 2 process\(es\) exited without a result \(exit codes 1, 1;"):
        first_result(os._exit, 2)          # os._exit(rank, port, q): a TypeError before any result
    assert time.monotonic() - t0 < 60      # the result's timeout is 120 s


def test_gloo_p2p_measures_two_processes(tmp_path):
    """Two spawned gloo processes, two sizes: a few seconds."""
    pytest.importorskip("torch")
    from daydream.calibrate_p2p import P2P_COLLIDE_GAPS_US, P2P_HOLD_GAPS_US, P2P_LAND_SIZES, P2P_LATE_HOLD_BEFORE_MS
    from daydream.calibrate_procs import gloo_p2p

    got = gloo_p2p([2 ** 10, 2 ** 16])
    (bw, lat), (send, recv), handshake = got["p2p"], got["p2p_post"], got["p2p_handshake"]
    collision, hold, late = got["p2p_collision"], got["p2p_hold"], got["p2p_late_hold"]
    assert bw > 1e6 and 0 <= lat < 1e9
    assert 0 < send < 1e8 and 0 < recv < 1e8     # a posting call returns in well under 0.1 s
    assert 0 <= handshake < 1e8
    median, stalled = got["p2p_sends"]
    assert 0 < median < 1e8 and 0 <= stalled <= 1
    gaps = [g for g, _ in collision]
    assert gaps == [g * 1e3 for g in P2P_COLLIDE_GAPS_US] and collision[-1][1] == 0.0
    assert all(0 <= extra < 1e8 for _, extra in collision)
    assert [g for g, _ in hold] == [g * 1e3 for g in P2P_HOLD_GAPS_US] and hold[-1][1] == 0.0
    assert all(0 <= extra < 1e8 for _, extra in hold)     # a held send leaves within 0.1 s
    assert [b for b, _ in late] == [b * 1e6 for b in P2P_LATE_HOLD_BEFORE_MS] and all(0 <= x <= 1 for _, x in late)
    land = got["p2p_land"]
    assert [b for b, _ in land] == list(P2P_LAND_SIZES) and all(0 <= x < 1e7 for _, x in land)    # < 10 ms a message
    assert 0 <= got["p2p_handover"] < 1e8       # a GPipe-like exchange's mean hand-over: under 0.1 s
    assert load_profile(save_profile(dataclasses.replace(flat_profile(), **{k: {"gloo": v} for k, v in got.items()}),
                                     str(tmp_path / "p.json"))).p2p_late_hold


def test_hydra_runtime_runs_the_first_task_whose_input_has_arrived():
    from daydream.workloads.hydra import Arrivals

    class Recv:                                   # a receive that arrives when told to
        def __init__(self):
            self.event = threading.Event()

        def wait(self):
            self.event.wait()

    a, b = Recv(), Recv()
    arrivals = Arrivals([a, b])
    needs = {0: a, 1: b, 2: None}
    assert arrivals.first_ready([0, 1, 2], needs.get) == 2          # needs nothing: runs at once
    picked = []
    t = threading.Thread(target=lambda: picked.append(arrivals.first_ready([0, 1], needs.get)))
    t.start()
    t.join(0.2)
    assert t.is_alive()                                              # nothing has arrived: it waits
    b.event.set()                                                    # model 1's input arrives first
    t.join(5)
    assert picked == [1]
    a.event.set()
    assert arrivals.first_ready([0], needs.get) == 0                  # waits for model 0's input


def test_calibrate_measures_and_reports_send_figures(tmp_path):
    """``daydream calibrate --quick``: about 10 s, two spawned gloo pairs."""
    pytest.importorskip("torch")
    from click.testing import CliRunner

    from daydream.cli import main

    out = tmp_path / "p.json"
    res = CliRunner().invoke(main, ["calibrate", "--quick", "-o", str(out)])
    assert res.exit_code == 0, res.output
    prof = load_profile(str(out))
    (bw, lat), = prof.p2p.values()
    assert bw > 0 and lat >= 0 and "send gloo" in res.output and "all-reduce gloo" in res.output
    assert prof.p2p_preposted["gloo"] > 0 and "a gloo send to a receive posted ahead" in res.output
    assert prof.p2p_handover["gloo"] >= 0 and "a gloo pipeline hand-over" in res.output
    assert prof.collective_wake["gloo"] >= 0 and "all-reduce reached from compute" in res.output
    assert prof.ddp_call_ns[1] > 0 and prof.ddp_tensor_ns[1] > 0 and "DDP's own time" in res.output
    # --quick still spans 1 KiB to 8 MiB, so the fits see the bandwidth, not only the latency
    # (a 1 KiB gloo all-reduce took 1.6-1.8 ms here, a 1 MiB one 1.9-2.4: too close to tell apart)
    assert bw < UNRESOLVED_BYTES_PER_S and prof.collective["gloo"][0] < UNRESOLVED_BYTES_PER_S
    assert "not resolved" not in res.output


def test_a_fit_that_cannot_see_the_bandwidth_says_so():
    from daydream.calibrate_procs import _fit_relative
    from daydream.cli_whatif import _bandwidth_text

    bw, lat = _fit_relative([(1024, 100_000.0), (65536, 99_000.0)])      # no growth with size
    assert bw == UNRESOLVED_BYTES_PER_S and _bandwidth_text(bw) == "bandwidth not resolved"
    assert _bandwidth_text(2.5e9) == "2.50 GB/s"


def test_a_profile_that_would_not_load_is_not_saved(tmp_path):
    from daydream.device import Curve

    bad = dataclasses.replace(flat_profile(), gconv={"float32x2": Curve(())})
    with pytest.raises(DaydreamError, match="gconv float32x2"):
        save_profile(bad, str(tmp_path / "bad.json"))
    assert not (tmp_path / "bad.json").exists()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to pin ranks to")
def test_gloo_all_reduce_calibration_pins_each_rank_to_a_core(monkeypatch):
    """All-reduces are timed with a core per rank, as ``--pin-cores`` runs are (a rank's gloo
    threads then share its core), not only sends."""
    import torch.distributed

    import daydream.collect.runner as runner
    from daydream.calibrate_procs import _gloo_worker

    class Pinned(Exception):
        pass

    def pin_rank(rank, ranks):
        raise Pinned((rank, ranks))

    def not_reached(*args, **kwargs):
        raise AssertionError("the process group was set up before the rank was pinned")

    monkeypatch.setattr(runner, "pin_rank", pin_rank)
    monkeypatch.setattr(torch.distributed, "init_process_group", not_reached)
    with pytest.raises(Pinned) as got:
        _gloo_worker(1, 0, [1024], "allreduce", None)
    assert got.value.args == ((1, 2),)


def test_allreduce_calibration_takes_each_size_median_over_rounds(monkeypatch):
    """Rounds time every size once; a round in a slow spell (10x here) does not move the result."""
    torch = pytest.importorskip("torch")
    from daydream import calibrate_procs as cp

    sizes, now, barriers = [1024, 4096], [0.0], [0]

    class Dist:
        @staticmethod
        def barrier():
            barriers[0] += 1

        @staticmethod
        def all_reduce(t):         # 1 ns a byte, ten times that in the fourth round
            slow = (barriers[0] - 1) // len(sizes) == 3
            now[0] += t.numel() * 4 * 1e-9 * (10 if slow else 1)

    monkeypatch.setattr(cp.time, "perf_counter", lambda: now[0])
    got = cp._allreduce_pts(torch, Dist, sizes)
    assert barriers[0] == cp.ALLREDUCE_ROUNDS * len(sizes)
    assert [n for n, _ in got] == sizes and [ns for _, ns in got] == pytest.approx([1024.0, 4096.0])


def test_profile_refuses_collision_points_out_of_order(tmp_path):
    path = save_profile(dataclasses.replace(flat_profile(), p2p_collision={"gloo": ((0.0, 9e5), (1e5, 0.0))}),
                        str(tmp_path / "p.json"))
    assert load_profile(path).p2p_collision_ns(5e4) == 4.5e5
    doc = json.loads(open(path).read())
    doc["p2p_collision"] = {"gloo": [[1e5, 0.0], [0.0, 9e5]]}
    open(path, "w").write(json.dumps(doc))
    with pytest.raises(DaydreamError, match="p2p_collision gloo: gaps must increase"):
        load_profile(path)


def test_profile_keeps_landing_points_and_refuses_them_out_of_order(tmp_path):
    path = save_profile(dataclasses.replace(flat_profile(), p2p_land={"gloo": ((16384.0, 1e5), (524288.0, 3e5))}),
                        str(tmp_path / "p.json"))
    assert [load_profile(path).p2p_land_ns(b) for b in (1e3, 270336.0, 1e8)] == [1e5, 2e5, 3e5]
    doc = json.loads(open(path).read())
    doc["p2p_land"] = {"gloo": [[524288.0, 3e5], [16384.0, 1e5]]}
    open(path, "w").write(json.dumps(doc))
    with pytest.raises(DaydreamError, match="p2p_land gloo: bytes must increase"):
        load_profile(path)


def test_profile_keeps_hold_points_and_refuses_negative_ones(tmp_path):
    path = save_profile(dataclasses.replace(flat_profile(), p2p_hold={"gloo": ((0.0, 1e6), (2e5, 0.0))}),
                        str(tmp_path / "p.json"))
    assert load_profile(path).p2p_hold_ns(-5e4) == 7.5e5 and load_profile(path).p2p_hold_window_ns() == 2e5
    doc = json.loads(open(path).read())
    doc["p2p_hold"] = {"gloo": [[0.0, -1.0], [2e5, 0.0]]}
    open(path, "w").write(json.dumps(doc))
    with pytest.raises(DaydreamError, match="p2p_hold gloo: needs"):
        load_profile(path)
    doc["p2p_hold"], doc["p2p_late_hold"] = {}, {"gloo": [[1e6, 1.5]]}
    open(path, "w").write(json.dumps(doc))
    with pytest.raises(DaydreamError, match="p2p_late_hold gloo: needs"):
        load_profile(path)


def test_the_two_posts_are_timed_apart_one_way_then_the_other(monkeypatch):
    """Posts two ranks make to each other at one moment collide (``p2p_collision``); ``p2p_post``
    is the post alone: the receive goes in ``P2P_POST_APART_S`` after the send, then as long before."""
    torch = pytest.importorskip("torch")
    import daydream.calibrate_p2p as cp

    class Dist:
        def barrier(self):
            pass

        def isend(self, t, peer):
            return Work()

        irecv = isend

        def send(self, t, peer):
            pass

        def recv(self, t, peer):
            t.fill_(1.0)

    class Work:
        def wait(self):
            pass

    computed = {}
    for rank in (0, 1):
        busy = computed[rank] = []
        monkeypatch.setattr(cp, "busy_matmuls", lambda torch, busy=busy: busy.append)
        cp._p2p_post_ns(torch, Dist(), rank, torch.zeros(4))
    later = [r - s for s, r in zip(computed[0], computed[1])]     # receive's post after the send's (s)
    assert len(later) == cp.P2P_TRIES + 3
    assert later[::2] == pytest.approx([cp.P2P_POST_APART_S] * len(later[::2]))
    assert later[1::2] == pytest.approx([-cp.P2P_POST_APART_S] * len(later[1::2]))
