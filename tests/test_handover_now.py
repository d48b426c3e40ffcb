"""``handover=now``: the pipeline and Tessel hand-over figures from a sitting measured when predicting."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from daydream.calibrate_handover import P2P_HANDOVER_BYTES, HandoverSitting
from daydream.errors import DaydreamError
from daydream.optimizations import WhatIfContext
from daydream.optimizations._corun import forget_measured
from daydream.optimizations._handover_now import NOW_STEPS, handover_now
from daydream.whatif import predict

from conftest import bench_module, flat_profile

REPO = Path(__file__).resolve().parent.parent
#: Two hand-overs of 100 and 300 us, one send's post of 50 us, one receive's of 30 us.
SITTING = HandoverSitting((100_000, 300_000), (50_000,), (30_000,))


@pytest.fixture
def sittings(monkeypatch):
    """Fake sittings: each call of ``handover_sitting`` logs its steps and returns :data:`SITTING`."""
    import daydream.calibrate_handover as ch

    calls = []
    monkeypatch.setattr(ch, "handover_sitting", lambda steps: calls.append(steps) or SITTING)
    forget_measured()
    yield calls
    forget_measured()


def _ctx(**fields):
    dev = dataclasses.replace(flat_profile(), p2p={"gloo": (1e9, 50_000.0)}, p2p_handover={"gloo": 400_000.0},
                              **fields)
    return WhatIfContext(graph=None, trace=None, device=dev)


def test_now_replaces_the_hand_over_and_post_figures_once_per_process_until_forgotten(sittings):
    ctx = _ctx()
    handover_now(ctx, "now", 2)
    # the mean hand-over less its bytes at the fitted 1 GB/s; the posts' medians
    assert ctx.device.p2p_handover == {"gloo": 200_000.0 - P2P_HANDOVER_BYTES}
    assert ctx.device.p2p_post == {"gloo": (50_000, 30_000)}
    assert sittings == [NOW_STEPS] and "measured now over 2 (the profile's 400 us)" in ctx.notes[-1]
    again = _ctx()
    handover_now(again, "now", 3)
    assert sittings == [NOW_STEPS] and again.device.p2p_handover == ctx.device.p2p_handover
    forget_measured()
    handover_now(_ctx(), "now", 2)
    assert sittings == [NOW_STEPS, NOW_STEPS]


@pytest.mark.parametrize("source, ranks", [("profile", 2), ("now", 1)])
def test_the_profile_s_figures_stay_without_now_or_without_a_second_rank(sittings, source, ranks):
    ctx = _ctx()
    before = ctx.device
    handover_now(ctx, source, ranks)
    assert ctx.device is before and ctx.notes == [] and sittings == []


def test_a_sitting_that_fails_or_counts_nothing_leaves_the_profile_s_figures_and_says_why(monkeypatch):
    import daydream.calibrate_handover as ch

    def fail(steps):
        raise DaydreamError("calibration worker _handover_worker: its 2 process(es) exited without a result")

    for fake, why in [(fail, "not measured: calibration worker"), (lambda steps: HandoverSitting(), "counted no")]:
        monkeypatch.setattr(ch, "handover_sitting", fake)
        forget_measured()
        ctx = _ctx()
        before = ctx.device
        handover_now(ctx, "now", 2)
        assert ctx.device is before and why in ctx.notes[-1]
    forget_measured()


def test_pipeline_and_tessel_cost_their_hand_overs_with_the_figures_measured_now(sittings):
    trace = REPO / "traces" / "mlp.trace.json.gz"
    base = dataclasses.replace(flat_profile(), p2p={"gloo": (1e9, 50_000.0)}, p2p_handover={"gloo": 400_000.0})
    measured = dataclasses.replace(base, p2p_handover={"gloo": 200_000.0 - P2P_HANDOVER_BYTES},
                                   p2p_post={"gloo": (50_000, 30_000)})
    for spec in ("pipeline:stages=2,microbatches=4,schedule=gpipe,corun=off,recording_us=0",
                 "tessel:stages=2,microbatches=2,max_lag=3,corun=off,recording_us=0"):
        now, _ = predict(trace, [f"{spec},handover=now"], device=base)
        same, _ = predict(trace, [spec], device=measured)
        other, _ = predict(trace, [spec], device=base)
        assert now.predicted_ms == pytest.approx(same.predicted_ms) and now.predicted_ms != other.predicted_ms
        assert any(n.startswith("handover=now: hand-overs") for n in now.notes)
    assert sittings == [NOW_STEPS]          # one sitting for both, until forgotten


def test_a_bad_handover_source_is_refused():
    from daydream.optimizations.base import OptionError

    with pytest.raises(OptionError, match="handover must be one of profile, now"):
        predict(REPO / "traces" / "mlp.trace.json.gz", ["pipeline:stages=2,handover=later"], device=flat_profile())


def test_the_calibration_vs_rows_benchmark_tells_a_figure_that_follows_from_one_that_misleads(tmp_path, capsys):
    """Three fake runs whose ``p2p_handover`` grows with the Tessel V row's error but not with its
    real time over the baseline: error r +1, real / baseline r 0 (the other rows constant: nan)."""
    import doctest
    import json

    bench = bench_module("calibration_vs_rows")
    assert doctest.testmod(bench).failed == 0 and doctest.testmod(bench_module("handover_drift")).failed == 0
    head = "workload,optimization,baseline_ms,predicted_ms,measured_ms\n"
    dirs = []
    for i, (handover, v_pred, v_real) in enumerate([(300e3, 30.0, 30.0), (400e3, 33.0, 30.0), (500e3, 36.0, 30.0)]):
        d = tmp_path / f"v{i}"
        d.mkdir()
        (d / "device-cpu-1t.json").write_text(json.dumps({"p2p_handover": {"gloo": handover}}))
        (d / "results.csv").write_text(
            head + 'mlp,"pipeline:stages=2,schedule=gpipe",20,30,30\nmlp,"pipeline:stages=2,schedule=1f1b",20,28,28\n'
            'mlp,"tessel:stages=2,partition=MLP.blocks.2",20,29,29\n'
            f'mlp,"tessel:stages=2,placement=0:1:1:0",20,{v_pred},{v_real}\n')
        dirs.append(str(d))
    (tmp_path / "bad").mkdir()
    bench.main([*dirs, str(tmp_path / "bad")])
    out = capsys.readouterr().out
    assert "bad: passed over" in out and "3 runs;" in out
    assert "tessel V: error r +1.00, real / baseline r +nan" in out
    with pytest.raises(SystemExit, match="fewer than three"):
        bench.main(dirs[:2])
