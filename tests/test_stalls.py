"""Stalled ops (daydream.graph.stalls): exact settling, what counts as a peer, and invariants."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daydream.graph.stalls import MIN_PEERS, STALL_MIN_NS, settle_stalls
from daydream.model import LaneKind, Phase


def _iterations(maker, durs, name="aten::addmm", phase=Phase.FORWARD, lane=None, per_iteration=1, **cols):
    """One op per iteration (``per_iteration`` copies of it), durations ``durs`` in iteration order."""
    lane = maker.lane() if lane is None else lane
    ids = []
    for i, d in enumerate(durs):
        for _ in range(per_iteration):
            ids.append(maker.task(lane, d, name=name, iteration=i, phase=int(phase), event=len(ids), **cols))
    return lane, ids


def test_a_stalled_op_takes_its_peers_median_and_is_reported(maker):
    _, ids = _iterations(maker, [300_000, 310_000, 33_000_000, 290_000, 320_000, 305_000])
    report = settle_stalls(maker.g)      # the lower median of six: 305 us; the rest before the next op
    assert maker.g.tasks["dur_ns"][ids].tolist() == [300_000, 310_000, 305_000, 290_000, 320_000, 305_000]
    assert maker.g.tasks["gap_ns"][ids].tolist() == [0, 0, 0, 32_695_000, 0, 0]
    assert (report.tasks, report.excess_ns) == (1, 32_695_000)
    assert report.worst == ("aten::addmm", 2, 33_000_000, 305_000)
    assert "aten::addmm in iteration 2: 33.00 ms against 0.305" in report.note(6)
    assert "5.45 ms an iteration" in report.note(6)


def test_slow_but_not_stalled_ops_are_left_alone(maker):
    # 2.9x the median, and 3.5x but only 0.45 ms over it: neither is a stall
    _, a = _iterations(maker, [1_000_000, 1_000_000, 2_900_000, 1_000_000], name="a")
    _, b = _iterations(maker, [180_000, 180_000, 630_000, 180_000], name="b")
    before = maker.g.tasks["dur_ns"].copy()
    assert settle_stalls(maker.g).tasks == 0
    assert (maker.g.tasks["dur_ns"] == before).all()


def test_peers_are_the_same_op_at_the_same_occurrence_with_the_same_work(maker):
    lane = maker.lane()
    # the second addmm of each iteration is a different matmul (other FLOPs): not a peer of the first
    ids = []
    for i in range(4):
        ids.append(maker.task(lane, 100_000, name="aten::addmm", iteration=i, phase=0, event=2 * i, flops=10))
        ids.append(maker.task(lane, 5_000_000, name="aten::addmm", iteration=i, phase=0, event=2 * i + 1, flops=99))
    assert settle_stalls(maker.g).tasks == 0
    # same op, same work, second occurrence of the iteration: compared with the other second ones
    maker2 = type(maker)()
    lane2, ids2 = _iterations(maker2, [100_000, 100_000, 100_000, 100_000], per_iteration=2)
    maker2.g.tasks["dur_ns"][ids2[5]] = 4_000_000          # iteration 2, second occurrence
    assert settle_stalls(maker2.g).tasks == 1 and maker2.g.tasks["dur_ns"][ids2[5]] == 100_000


def test_the_same_op_twice_an_iteration_is_compared_occurrence_by_occurrence(maker):
    # the first call of each iteration takes 0.1 ms, the second 2 ms: neither is a stall of the other
    lane = maker.lane()
    for i in range(5):
        for d in (100_000, 2_000_000):
            maker.task(lane, d, name="aten::addmm", iteration=i, phase=0, event=len(maker.g.lane_tasks[lane]))
    assert settle_stalls(maker.g).tasks == 0


def test_a_settled_graph_replays_as_before(maker):
    from daydream.sim import simulate

    _, ids = _iterations(maker, [300_000, 310_000, 33_000_000, 290_000, 320_000])
    before = simulate(maker.g).end_ns.copy()
    assert settle_stalls(maker.g).tasks == 1
    after = simulate(maker.g).end_ns
    assert after[ids].tolist() == before[ids].tolist()[:2] + [before[ids[2]] - 32_690_000] + before[ids].tolist()[3:]


def test_data_loading_gpu_lanes_and_small_groups_are_not_looked_at(maker):
    _, dl = _iterations(maker, [100_000, 100_000, 9_000_000, 100_000], phase=Phase.DATALOADER)
    _, few = _iterations(maker, [100_000, 9_000_000][:MIN_PEERS - 1], name="few")
    gpu = maker.lane(LaneKind.GPU_STREAM)
    _, k = _iterations(maker, [100_000, 100_000, 9_000_000, 100_000], lane=gpu, name="kernel")
    assert settle_stalls(maker.g).tasks == 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1_000, 50_000_000), min_size=1, max_size=12), st.integers(1, 3))
def test_settling_only_shortens_and_is_idempotent(durs, per_iteration):
    from conftest import GraphMaker

    m = GraphMaker()
    _, ids = _iterations(m, durs, per_iteration=per_iteration)
    before = m.g.tasks["dur_ns"][ids].copy()
    report = settle_stalls(m.g)
    after = m.g.tasks["dur_ns"][ids]
    assert (after <= before).all()
    assert int((before - after).sum()) == report.excess_ns == int(m.g.tasks["gap_ns"][ids].sum())
    assert after[-1] == before[-1]                # the thread's last op has no gap after it
    assert ((before - after) > STALL_MIN_NS).sum() == report.tasks
    assert settle_stalls(m.g).tasks == 0          # the medians do not move: nothing new stalls


def _with_stall(src, dst, extra_us: float, step: int = 2) -> None:
    """``src`` with its first ``aten::addmm`` of the ``step``-th recorded iteration ``extra_us`` longer.

    Every later event moves by ``extra_us`` and the ranges around the op grow
    by it, as when the OS takes the CPU for that long inside the op.
    """
    import gzip
    import json

    doc = json.loads(gzip.open(src, "rt").read())
    ev = doc["traceEvents"]
    steps = sorted((e for e in ev if str(e.get("name", "")).startswith("ProfilerStep#")), key=lambda e: e["ts"])
    s = steps[step]
    op = min((e for e in ev if e.get("name") == "aten::addmm" and s["ts"] <= e["ts"] <= s["ts"] + s["dur"]),
             key=lambda e: e["ts"])
    end = op["ts"] + op["dur"]
    for e in ev:
        if not isinstance(e.get("ts"), (int, float)):
            continue
        if e["ts"] >= end:
            e["ts"] += extra_us
        elif e.get("ph") == "X" and e["ts"] <= op["ts"] and e["ts"] + e.get("dur", 0) >= end \
                and e.get("tid") == op["tid"]:
            e["dur"] += extra_us
    with gzip.open(dst, "wt") as fh:
        json.dump(doc, fh)


def test_predictions_keep_a_stall_unscaled_and_say_so(tmp_path):
    from conftest import REPO, flat_profile

    from daydream.whatif import predict

    src = REPO / "traces" / "mlp.trace.json.gz"
    stalled = tmp_path / "stalled.json.gz"
    _with_stall(src, stalled, 30_000.0)
    fast = flat_profile(matmul=1e10, bf16_matmul=2e10)      # amp halves every matmul
    opt = ["amp:dtype=bfloat16,cast_overhead=false,remeasure=false"]
    plain, _ = predict(src, opt, device=fast)
    report, _ = predict(stalled, opt, device=fast)
    # one of the 4 iterations averaged is 30 ms longer, measured and replayed ...
    assert report.measured_ms - plain.measured_ms == pytest.approx(7.5, abs=0.01)
    assert report.baseline_ms - plain.baseline_ms == pytest.approx(7.5, abs=0.01)
    # ... and predicted: the stall is not halved with the matmul it hit (that would give +3.75 ms);
    # the op's own time above its peers' median (d - m, not a stall by itself) leaves the halving too
    from daydream.analysis import trace_and_graph

    name, it, dur, med = settle_stalls(trace_and_graph(stalled)[1]).worst
    assert (name, it) == ("aten::addmm", 2)
    own_excess_ms = (dur - med) / 1e6 - 30.0
    assert report.predicted_ms - plain.predicted_ms == pytest.approx((30.0 + 0.5 * own_excess_ms) / 4, abs=0.01)
    assert any("aten::addmm in iteration" in n and "machine's stalls" in n for n in report.notes)


def test_info_reports_the_traces_stalls(tmp_path):
    import json

    from click.testing import CliRunner
    from conftest import REPO

    from daydream.cli import main

    stalled = tmp_path / "stalled.json.gz"
    _with_stall(REPO / "traces" / "mlp.trace.json.gz", stalled, 30_000.0)
    plain = json.loads(CliRunner().invoke(main, ["info", "--json", str(REPO / "traces" / "mlp.trace.json.gz")]).stdout)
    res = CliRunner().invoke(main, ["info", "--json", str(stalled)])
    assert res.exit_code == 0
    got = json.loads(res.stdout)["stalls"]
    assert got["worst"][:2] == ["aten::addmm", 2]
    # the 30 ms added, and the op's own excess over its peers, over 5 iterations
    own_ms = (got["worst"][2] - got["worst"][3]) / 1e6 - 30.0
    assert got["ms_per_iteration"] - plain["stalls"]["ms_per_iteration"] == pytest.approx((30.0 + own_ms) / 5, abs=1e-6)
    text = CliRunner().invoke(main, ["info", str(stalled)]).output
    assert "stalls: " in text and "aten::addmm in iteration 2" in text



@pytest.mark.parametrize("name", ["kineto/worker0.1623212756351.pt.trace.json.gz",
                                  "HolisticTraceAnalysis/control.json.gz", "own:transformer"])
def test_settling_real_traces_leaves_their_replay_exactly_as_it_was(name, shared_dir):
    from conftest import REPO

    from daydream.analysis import trace_and_graph
    from daydream.sim import simulate

    path = REPO / "traces" / f"{name[4:]}.trace.json.gz" if name.startswith("own:") else shared_dir / name
    _, g = trace_and_graph(path)
    before = simulate(g)
    report = settle_stalls(g)
    after = simulate(g)
    assert report.tasks > 0                 # each of these has stalls to settle
    assert np.array_equal(after.start_ns, before.start_ns)           # every task starts where it did
    assert (after.end_ns != before.end_ns).sum() == report.tasks       # the settled ones end sooner
    for a, b in zip(before.iterations(), after.iterations()):
        assert np.array_equal(a.simulated_ns, b.simulated_ns)


def test_the_stalls_benchmark_reports_each_trace_and_pools_its_group(capsys):
    """``benchmarks/trace_stalls.py``: per trace, the stall time an iteration that settling takes
    out (the bundled transformer's trace has some), and per group the share of the traced time."""
    from conftest import REPO, bench_module

    from daydream.analysis import trace_and_graph
    from daydream.sim import simulate

    bench = bench_module("trace_stalls")
    path = str(REPO / "traces" / "transformer.trace.json.gz")
    n, mean_ms, stall_ms, ops = bench.trace_stalls(path)
    _, g = trace_and_graph(path)
    base = simulate(g)
    report = settle_stalls(g)
    assert (n, ops) == (len(base.iterations()[0].measured_ns), report.tasks) and ops > 0
    assert stall_ms == pytest.approx(report.excess_ns / n / 1e6) and mean_ms == pytest.approx(
        base.mean_iteration_ns()[0] / 1e6)
    bench.main([path, path])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.split()[:2] == ["transformer.trace", "2"] and f"{100 * stall_ms / mean_ms:4.1f} %" in last
