"""``daydream validate``'s run protocol: baseline and variant traced in turns, every round kept."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from daydream import validate


def _record_runs(monkeypatch, calls, times):
    monkeypatch.setattr(validate, "trace_workload",
                        lambda name, p, args, iterations, nproc: calls.append(("alone", p.name, nproc)) or p)
    monkeypatch.setattr(validate, "trace_in_turns",
                        lambda configs, iterations: calls.append(("turns", [c[1].name for c in configs])) or
                        [c[1] for c in configs])
    monkeypatch.setattr(validate, "replay", lambda p: (SimpleNamespace(measured_ms=next(times)), None))
    monkeypatch.setattr(validate, "load_trace", lambda paths: SimpleNamespace(ranks=list(paths)))


def test_rounds_trace_single_process_configs_in_turns_and_keep_every_round(monkeypatch, tmp_path):
    calls = []
    _record_runs(monkeypatch, calls, iter([30.0, 12.0, 20.0, 15.0]))
    rounds = validate.paired_rounds(2, [("mlp", tmp_path / "a.json.gz", (), 1),
                                        ("mlp", tmp_path / "b.json.gz", ("--x",), 1)])
    assert calls == [("turns", ["a.r0.json.gz", "b.r0.json.gz"]), ("turns", ["a.r1.json.gz", "b.r1.json.gz"])]
    assert [[(Path(p).name, r.measured_ms) for p, r, _ in rnd] for rnd in rounds] == [
        [("a.r0.json.gz", 30.0), ("b.r0.json.gz", 12.0)], [("a.r1.json.gz", 20.0), ("b.r1.json.gz", 15.0)]]


def test_rounds_with_a_multi_process_config_run_one_after_the_other_twice_as_often(monkeypatch, tmp_path):
    calls = []
    _record_runs(monkeypatch, calls, iter([30.0, 12.0, 13.0, 31.0]))
    monkeypatch.setattr(validate, "SEQUENTIAL_ROUNDS", 2)
    rounds = validate.paired_rounds(1, [("mlp", tmp_path / "a.json.gz", (), 1),
                                        ("mlp", tmp_path / "b.json.gz", (), 2)])
    assert calls == [("alone", "a.r0.json.gz", 1), ("alone", "b.r0.json.gz", 2),
                     ("alone", "b.r1.json.gz", 2), ("alone", "a.r1.json.gz", 1)]
    assert [[r.measured_ms for _, r, _ in rnd] for rnd in rounds] == [[30.0, 12.0], [13.0, 31.0]]


def test_traced_runs_get_the_steady_malloc_settings(monkeypatch, tmp_path):
    seen = {}

    def run(cmd, **kw):
        seen.update(kw["env"])
        (tmp_path / "x.json.gz").write_bytes(b"")
        return SimpleNamespace(returncode=0, stderr="")

    monkeypatch.setattr(validate.subprocess, "run", run)
    validate.trace_workload("mlp", tmp_path / "x.json.gz")
    assert {k: seen.get(k) for k in validate.STEADY_MALLOC} == validate.STEADY_MALLOC


@pytest.mark.skipif(len(getattr(validate.os, "sched_getaffinity", lambda _: ())(0)) < 2, reason="needs 2 cores")
def test_a_trace_on_a_rank_s_core_starts_there_and_the_caller_gets_its_cores_back(monkeypatch, tmp_path):
    import subprocess
    import sys

    seen, before, real_run = [], validate.os.sched_getaffinity(0), subprocess.run

    def run(cmd, **kw):     # a child started here: which cores it may use
        seen.append(real_run([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                             capture_output=True, text=True).stdout.strip())
        (tmp_path / "x.json.gz").write_bytes(b"")
        return SimpleNamespace(returncode=0, stderr="")

    monkeypatch.setattr(validate.subprocess, "run", run)
    validate.trace_workload("mlp", tmp_path / "x.json.gz", core_of=(1, 2))
    validate.trace_workload("mlp", tmp_path / "x.json.gz")
    from daydream.collect.runner import cores_for_rank

    assert seen == [str(cores_for_rank(before, 1, 2)), str(sorted(before))]
    assert validate.os.sched_getaffinity(0) == before


def test_single_run_keeps_the_given_name(monkeypatch, tmp_path):
    monkeypatch.setattr(validate, "trace_workload", lambda name, p, args, iterations, nproc: p)
    monkeypatch.setattr(validate, "replay", lambda p: (SimpleNamespace(measured_ms=1.0), None))
    path, _ = validate.fastest_run(1, "mlp", tmp_path / "x.json.gz")
    assert Path(path).name == "x.json.gz"


def test_pipeline_rounds_are_bracketed_by_baseline_traces(monkeypatch, tmp_path):
    """A baseline trace before, between and after the rounds; each round's (before, after)
    traces; the median trace; every run's rounds; files named by tag."""
    import daydream.analysis as analysis
    from daydream.validation import pipeline

    traced_ms = iter([30.0, 50.0, 40.0, 45.0])
    paths = []

    def trace_workload(name, path, args, iterations):
        paths.append(Path(path).name)
        assert iterations == 12
        return path

    monkeypatch.setattr(validate, "trace_workload", trace_workload)
    measured = {}
    monkeypatch.setattr(analysis, "replay", lambda p: (SimpleNamespace(measured_ms=measured.setdefault(p, next(traced_ms))),))
    runs = iter([70.0, 90.0, 60.0])
    base, rounds, got = pipeline.alternate(3, tmp_path, {"gpipe": lambda: next(runs)}, progress=lambda m: None,
                                           tag="tessel", iterations=12)
    assert paths == [f"mlp.tessel-base.r{k}.json.gz" for k in range(4)]
    assert base.name == "mlp.tessel-base.r2.json.gz"       # 40 ms: the lower median of 30 / 50 / 40 / 45
    assert [(a.name, b.name) for a, b in rounds] == list(zip(paths[:-1], paths[1:]))
    assert got == {"gpipe": [70.0, 90.0, 60.0]}             # every round's, in order (callers take the median)


def test_each_baseline_trace_is_predicted_before_the_next_run(monkeypatch, tmp_path):
    """``on_trace`` sees every baseline trace right after it is taken, before the next real run."""
    import daydream.analysis as analysis
    from daydream.validation import pipeline

    log = []
    monkeypatch.setattr(validate, "trace_workload", lambda name, path, args, iterations: log.append(Path(path).name)
                        or path)
    monkeypatch.setattr(analysis, "replay", lambda p: (SimpleNamespace(measured_ms=1.0),))
    pipeline.alternate(2, tmp_path, {"gpipe": lambda: log.append("run") or 1.0}, progress=lambda m: None,
                       on_trace=lambda p: log.append(f"predict {p.name}"))
    names = [f"mlp.pipeline-base.r{k}.json.gz" for k in range(3)]
    assert log == [names[0], f"predict {names[0]}", "run", names[1], f"predict {names[1]}", "run",
                   names[2], f"predict {names[2]}"]


def test_predict_now_measures_the_corun_rate_afresh(monkeypatch):
    """Rates measured earlier in the process are forgotten first; every spec is predicted."""
    import daydream.optimizations._corun as corun

    monkeypatch.setitem(corun._MEASURED, ("seq", 1), 0.64)
    seen = []

    def predict(path, specs, profile_path=None):
        seen.append((path, specs, dict(corun._MEASURED)))
        return SimpleNamespace(predicted_ms=float(len(seen))), None

    monkeypatch.setattr(validate, "predict", predict)
    got = validate.predict_now("t0", ["a", "b"], "p.json")
    assert seen == [("t0", ["a"], {}), ("t0", ["b"], {})]
    assert {k: v.predicted_ms for k, v in got.items()} == {"a": 1.0, "b": 2.0}


def test_bracket_predictions_take_the_predictions_made_already(monkeypatch):
    """Traces predicted when they were taken are not predicted again; others are, once."""
    asked = []
    monkeypatch.setattr(validate, "predict", lambda path, specs, profile_path=None:
                        asked.append(path) or (SimpleNamespace(baseline_ms=10.0, predicted_ms=30.0), None))
    done = {"t0": {"s": SimpleNamespace(baseline_ms=10.0, predicted_ms=20.0)},
            "t1": {"other": SimpleNamespace(baseline_ms=0.0, predicted_ms=0.0)}}
    got = validate.bracket_predictions(validate.bracketed(["t0", "t1", "t2"]), "s", "p.json", done)
    assert asked == ["t1", "t2"] and [p for _, p, _ in got] == [25.0, 30.0]
    assert "s" not in done["t1"]                             # the caller's dict is left as it was


def test_a_pipeline_row_is_the_median_of_each_round_s_bracketed_prediction(monkeypatch):
    """Each round predicts from the traces before and after it (their mean; a shared trace
    predicted once); the row holds the measured median, the median round's prediction over its
    measurement at that level, and every round."""
    got = {"t0": (20.0, 24.0), "t1": (22.0, 28.0), "t2": (18.0, 26.0), "t3": (20.0, 36.0)}  # baseline, predicted
    asked = []

    def predict(path, specs, profile_path=None):
        assert specs == ["pipeline:stages=2"] and profile_path == "p.json"
        asked.append(path)
        return SimpleNamespace(baseline_ms=got[path][0], predicted_ms=got[path][1]), None

    monkeypatch.setattr(validate, "predict", predict)
    rounds = validate.bracketed(["t0", "t1", "t2", "t3"])
    row = validate.median_row("mlp", "label", rounds, "pipeline:stages=2", [25.0, 28.0, 27.0], "p.json")
    assert sorted(asked) == ["t0", "t1", "t2", "t3"]
    assert row.predicted_rounds_ms == (26.0, 27.0, 31.0) and row.measured_rounds_ms == (25.0, 28.0, 27.0)
    # rounds 26 / 25, 27 / 28, 31 / 27: the median ratio is the first round's (the sides' medians,
    # 27 and 27, are the second round's prediction and the third round's measurement)
    assert (row.optimization, row.baseline_ms, row.measured_ms) == ("label", 20.0, 27.0)
    assert row.predicted_ms == pytest.approx(27.0 * 26.0 / 25.0)


def test_a_row_per_trace_is_the_median_of_each_trace_s_own_prediction(monkeypatch, tmp_path):
    """``per_trace``: the prediction side is the median over the distinct traces (each once), so
    one slow trace shared by two rounds moves neither; the rounds' means stay in the row and
    both lists reach the CSV."""
    got = {"t0": (20.0, 24.0), "t1": (22.0, 40.0), "t2": (18.0, 26.0), "t3": (20.0, 28.0)}  # baseline, predicted
    monkeypatch.setattr(validate, "predict", lambda path, specs, profile_path=None:
                        (SimpleNamespace(baseline_ms=got[path][0], predicted_ms=got[path][1],
                                         optimizations=specs), None))
    rounds = validate.bracketed(["t0", "t1", "t2", "t3"])
    plain = validate.median_row("mlp", "label", rounds, "hydra:models=2", [25.0, 28.0, 27.0], "p.json")
    row = validate.median_row("mlp", "label", rounds, "hydra:models=2", [25.0, 28.0, 27.0], "p.json",
                              per_trace=True)
    assert plain.predicted_rounds_ms == row.predicted_rounds_ms == (32.0, 33.0, 27.0)
    # rounds' means over their measurements 32 / 25, 33 / 28, 27 / 27: the median is the second's
    assert plain.predicted_ms == pytest.approx(27.0 * 33.0 / 28.0) and plain.predicted_traces_ms == ()
    assert row.predicted_traces_ms == (24.0, 40.0, 26.0, 28.0)
    # each trace over the round it brackets: 24 / 25, 40 / 25, 40 / 28, 26 / 28, 26 / 27, 28 / 27;
    # the slow trace t1 (40) lands in the two highest of six, the median is (26 / 27 + 28 / 27) / 2
    assert (row.baseline_ms, row.measured_ms) == (20.0, 27.0) and row.predicted_ms == pytest.approx(27.0)
    text = validate.write_results([row], tmp_path).read_text().splitlines()
    assert text[1].endswith(",predicted_rounds_ms,predicted_traces_ms")
    assert text[2].endswith(",32.0000 33.0000 27.0000,24.0000 40.0000 26.0000 28.0000")


def test_a_failing_runner_loses_no_other_rows(monkeypatch, tmp_path):
    from click.testing import CliRunner

    from daydream.cli import main
    from daydream.errors import DaydreamError

    def broken(*a):
        raise DaydreamError("the real run failed")

    fns = {"hfta": lambda *a: [validate.ValidationRow("mlp", "hfta:models=2", 10.0, 11.0, 12.0)], "hydra": broken}
    monkeypatch.setattr(validate, "runner", fns.get)
    monkeypatch.setattr(validate, "ensure_profile", lambda path=None, progress=print: "profile.json")
    res = CliRunner().invoke(main, ["validate", "--workload", "", "--opt", "hydra,hfta", "--no-public",
                                    "--no-calibrate", "-o", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "hydra: skipped (the real run failed)" in res.output
    rows = (tmp_path / "results.csv").read_text().splitlines()
    assert any(r.startswith("mlp,hfta:models=2,") for r in rows)


def test_a_runner_s_bug_loses_no_other_rows_and_exits_as_an_internal_error(monkeypatch, tmp_path):
    """A runner that fails by a bug after minutes of measuring others: their rows are written,
    the bug is named on one line, and the exit status says internal error (3), not success."""
    from click.testing import CliRunner

    from daydream._cli_util import DEBUG_ENV, INTERNAL_ERROR_STATUS
    from daydream.cli import main

    def buggy(*a):
        raise ValueError("list.remove(x): x not in list")

    fns = {"hfta": lambda *a: [validate.ValidationRow("mlp", "hfta:models=2", 10.0, 11.0, 12.0)], "hydra": buggy}
    monkeypatch.setattr(validate, "runner", fns.get)
    monkeypatch.setattr(validate, "ensure_profile", lambda path=None, progress=print: "profile.json")
    monkeypatch.delenv(DEBUG_ENV, raising=False)
    res = CliRunner().invoke(main, ["validate", "--workload", "", "--opt", "hydra,hfta", "--no-public",
                                    "--no-calibrate", "-o", str(tmp_path)])
    assert res.exit_code == INTERNAL_ERROR_STATUS, res.output
    assert "hydra: internal error (ValueError: list.remove(x): x not in list)" in res.output
    assert "Traceback" not in res.output
    rows = (tmp_path / "results.csv").read_text().splitlines()
    assert any(r.startswith("mlp,hfta:models=2,") for r in rows)


def test_validate_calibrates_into_its_output_and_predicts_with_that(monkeypatch, tmp_path):
    from click.testing import CliRunner

    import daydream.calibrate as cal
    from daydream.cli import main
    from daydream.device import load_profile

    from conftest import flat_profile

    used = []
    monkeypatch.setattr(cal, "calibrate", lambda kind, threads=None, progress=print: flat_profile())

    def fake_runner(out, prof, progress, repeat, iterations):
        assert iterations == 7    # the runner gets --iterations
        used.append(prof)
        return []

    monkeypatch.setattr(validate, "runner", lambda name: fake_runner)
    args = ["validate", "--workload", "", "--opt", "hfta", "--no-public", "--iterations", "7", "-o", str(tmp_path)]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    fresh = tmp_path / f"device-cpu-{validate.THREADS}t.json"
    assert used == [str(fresh)] and load_profile(str(fresh)).name == flat_profile().name
    again = CliRunner().invoke(main, args)          # the profile of the earlier run is kept
    assert again.exit_code != 0 and "--force" in again.output and used == [str(fresh)]


def test_pipeline_action_cost_is_the_median_over_probes_measured_once(monkeypatch):
    from daydream.validation import pipeline as vp

    # median steps (ms) of the 2 x repeat = 4 probe processes, one of them disturbed
    probes = iter([{"gpipe_1": 1.0, "gpipe_M": 2.4, "plain_1": 1.0, "plain_M": 1.0},
                   {"gpipe_1": 1.0, "gpipe_M": 2.4, "plain_1": 1.0, "plain_M": 1.0},
                   {"gpipe_1": 9.0, "gpipe_M": 2.4, "plain_1": 1.0, "plain_M": 1.0},     # -> 0, not negative
                   {"gpipe_1": 2.0, "gpipe_M": 4.8, "plain_1": 1.5, "plain_M": 2.9}])    # 2.8 - 1.4 ms
    calls = []

    def run(sched, extra=(), steps=None, warmup=None, microbatches=None, model=None):
        calls.append((sched, microbatches, model))
        return next(probes)

    monkeypatch.setattr(vp, "_run", run)
    vp.action_overhead_us.cache_clear()
    say = [].append
    # per probe: 1.4 / 1.4 / 0 / 1.4 ms over 2 x 7 extra actions -> median 100 us
    assert vp.action_overhead_us(2, say) == pytest.approx(100.0)
    assert vp.action_overhead_us(2, say) == pytest.approx(100.0) and len(calls) == 4      # measured once
    assert {c[:2] for c in calls} == {("probe", vp.OVERHEAD_MB)} and calls[0][2] == vp.TINY_ARGS
    vp.action_overhead_us.cache_clear()


def test_a_pipeline_round_measures_the_mean_of_runs_in_fresh_processes(monkeypatch):
    from daydream.validation import pipeline as vp

    means = iter([30.0, 42.0, 33.0])
    calls = []

    def run(sched, extra=(), steps=None, warmup=None, microbatches=None, model=None):
        calls.append((sched, extra, steps, warmup))
        return {"mean_ms": next(means)}

    monkeypatch.setattr(vp, "_run", run)
    assert vp.measure_pipeline("1f1b", steps=10, processes=3) == pytest.approx(35.0)
    assert calls == [("1f1b", (), vp.WARMUP_STEPS + 10, vp.WARMUP_STEPS)] * 3
    means = iter([29.0])
    assert vp.measure_pipeline("gpipe") == 29.0 and len(calls) == 4           # one run by default


def test_a_hydra_round_measures_each_schedule_s_mean_over_runs_in_fresh_processes(monkeypatch):
    from daydream.validation import hydra as vh

    runs = iter([{"model-parallel": 20.0, "shard-parallel": 14.0}, {"model-parallel": 26.0, "shard-parallel": 15.0},
                 {"model-parallel": 23.0, "shard-parallel": 19.0}])
    calls = []
    monkeypatch.setattr(vh, "_run_real_once", lambda k, shard0, rounds: calls.append((k, shard0, rounds)) or next(runs))
    got = vh.run_real(4, 3, processes=3)
    assert got == {"model-parallel": pytest.approx(23.0), "shard-parallel": pytest.approx(16.0)}
    assert calls == [(4, 3, 6)] * 3


def test_the_probe_runs_and_reports_four_medians():
    from daydream.validation import pipeline as vp

    out = vp._run("probe", steps=4, warmup=1, microbatches=2, model=vp.TINY_ARGS)
    assert set(out) == {"gpipe_1", "gpipe_M", "plain_1", "plain_M"} and all(v > 0 for v in out.values())


def test_failed_trace_names_the_exit_status_and_the_last_other_line(tmp_path):
    from daydream.errors import DaydreamError
    from daydream.validate import _traced

    (tmp_path / "x.rank0.json.gz").write_bytes(b"")
    err = "Traceback ...\nRuntimeError: gloo: connection reset\ndaydream: wrote x.rank1.json.gz (20 iterations)\n"
    with pytest.raises(DaydreamError, match=r"failed \(exit status -11\): RuntimeError: gloo: connection reset$"):
        _traced("mlp", tmp_path / "x.json.gz", (), 2, -11, err)
    with pytest.raises(DaydreamError, match=r"failed \(no y.json.gz\): \(no other output\)"):
        _traced("mlp", tmp_path / "y.json.gz", (), 1, 0, "daydream: wrote y.json.gz\n")
    assert _traced("mlp", tmp_path / "x.json.gz", (), 2, 0, "") == tmp_path / "x.rank0.json.gz"


def test_the_median_round_is_each_round_s_prediction_over_its_own_measurement():
    """Not the ratio of the sides' medians (other rounds' once the rounds lie in different
    states), but the median round's ratio, at the measured median; two predictions to a round
    (a row made of its traces' own) each count against that round."""
    # ratios 0.8, 1.2, 1.25: the median round's is 1.2, at the measured median 25 (the sides'
    # medians, 30 / 25, are the third round's prediction over the first round's measurement)
    assert validate.median_round([20.0, 36.0, 30.0], [25.0, 30.0, 24.0]) == pytest.approx((30.0, 25.0))
    assert validate.median_round([20.0, 36.0, 24.0], [25.0, 30.0, 24.0]) == pytest.approx((25.0, 25.0))
    # two to a round: 1.0, 3.0 | 1.1, 5.0, the median (1.1 + 3.0) / 2 at the measured 10
    assert validate.median_round([10.0, 30.0, 11.0, 50.0], [10.0, 10.0]) == pytest.approx((20.5, 10.0))


def test_a_row_from_paired_rounds_means_each_rounds_prediction_and_measurement(monkeypatch):
    """Each round's prediction comes from that round's baseline (its first run) and is compared
    with the chosen run of the same round; the row holds the means over the rounds."""
    from types import SimpleNamespace

    seen = []

    def fake_predict(base, specs, profile_path=None):
        seen.append((base, tuple(specs), profile_path))
        return SimpleNamespace(baseline_ms={"b0": 10.0, "b1": 12.0}[base],
                               predicted_ms={"b0": 20.0, "b1": 26.0}[base]), None

    monkeypatch.setattr(validate, "predict", fake_predict)
    run = lambda path, ms: (path, SimpleNamespace(measured_ms=ms), None)     # noqa: E731
    rounds = [[run("b0", 9.0), run("v0", 21.0), run("w0", 40.0)],
              [run("b1", 11.0), run("v1", 25.0), run("w1", 44.0)]]
    row, reports = validate.rounds_row("mlp", "label", rounds, "opt:k=1", "p.json", variant=2)
    assert seen == [("b0", ("opt:k=1",), "p.json"), ("b1", ("opt:k=1",), "p.json")] and len(reports) == 2
    assert (row.workload, row.optimization, row.baseline_ms, row.predicted_ms, row.measured_ms) == (
        "mlp", "label", 11.0, 23.0, 42.0)


def test_a_row_takes_the_predictions_made_already(monkeypatch):
    """``predicted``: the rounds' predictions made during the runs; none is made again."""
    monkeypatch.setattr(validate, "predict", lambda *a, **k: pytest.fail("predicted again"))
    run = lambda path, ms: (path, SimpleNamespace(measured_ms=ms), None)     # noqa: E731
    made = [(SimpleNamespace(baseline_ms=b, predicted_ms=p), None) for b, p in ((10.0, 20.0), (12.0, 24.0))]
    row, reports = validate.rounds_row("mlp", "label", [[run("b0", 9.0), run("v0", 21.0)],
                                                        [run("b1", 11.0), run("v1", 25.0)]], "opt", "p.json",
                                       predicted=made)
    assert (row.baseline_ms, row.predicted_ms, row.measured_ms) == (11.0, 22.0, 23.0)
    assert reports == [m[0] for m in made]


def test_untouched_ratio_compares_the_ops_the_prediction_left_alone(monkeypatch):
    """Ops whose predicted time is their baseline time (within the tolerance) and that the real
    run also has: their real time over their baseline time; changed or missing ops left out."""
    times = {"b": {("mm", 0): 4.0, ("add", 0): 1.0, ("relu", 0): 2.0, ("gone", 1): 3.0},
             "p": {("mm", 0): 4.01, ("add", 0): 0.5, ("relu", 0): 2.0, ("gone", 1): 3.0},
             "r": {("mm", 0): 4.4, ("add", 0): 0.6, ("relu", 0): 2.6}}
    monkeypatch.setattr(validate, "op_times_ms", times.get)
    assert validate.untouched_ratio("b", "p", "r") == pytest.approx((4.4 + 2.6) / (4.0 + 2.0))
    times["p"] = {k: 2 * v for k, v in times["b"].items()}            # the prediction changed everything
    assert validate.untouched_ratio("b", "p", "r") != validate.untouched_ratio("b", "p", "r")   # NaN


def test_a_row_carries_the_mean_untouched_ratio_and_the_rounds_and_the_csv_writes_them(monkeypatch, tmp_path):
    from types import SimpleNamespace

    monkeypatch.setattr(validate, "predict", lambda base, specs, profile_path=None: (
        SimpleNamespace(baseline_ms=10.0, predicted_ms=20.0), f"pred-{base}"))
    monkeypatch.setattr(validate, "untouched_ratio", lambda b, p, r: {"b0": 1.1, "b1": 0.9}[b] if p == "pred-" + b else 0)
    run = lambda path, ms: (path, SimpleNamespace(measured_ms=ms), path)     # noqa: E731
    rounds = [[run("b0", 9.0), run("v0", 21.0)], [run("b1", 11.0), run("v1", 25.0)]]
    row, _ = validate.rounds_row("mlp", "label", rounds, "opt", "p.json")
    assert row.untouched_ratio == pytest.approx(1.0) and row.measured_ms == 23.0
    assert row.measured_rounds_ms == (21.0, 25.0) and row.measured_spread_pct == pytest.approx(4 / 23 * 100)
    assert row.predicted_rounds_ms == (20.0, 20.0)
    row = validate.with_placement([row], SimpleNamespace(values_ns=(331.6, 58.2, 340.4)))[0]
    text = validate.write_results([row, validate.ValidationRow("cnn", "x", 1.0, 2.0, 2.0)], tmp_path).read_text()
    lines = text.splitlines()
    assert lines[1].endswith(",measured_spread_pct,measured_rounds_ms,core_to_core_min_ns,core_to_core_max_ns,"
                             "core_to_core_ns,predicted_rounds_ms,predicted_traces_ms")
    assert lines[2].endswith(",1.0000,17.39,21.0000 25.0000,58,340,332 58 340,20.0000 20.0000,")
    assert lines[3].endswith(",0.000,,,,,,,,")


def test_device_validation_predicts_with_two_profiles_measured_now(monkeypatch, tmp_path):
    """The device rows scale by the ratio of a 1- and a 2-thread profile calibrated back to back in
    this run (saved in the output directory), not by a cached 2-thread profile from another hour;
    the two runs of a round are not taken in turns."""
    from types import SimpleNamespace

    import daydream.calibrate as calibrate_mod
    import daydream.device as device_mod
    from daydream.validation import device as dv

    calibrated, used = [], []
    monkeypatch.setattr(calibrate_mod, "calibrate",
                        lambda kind, threads, collectives, progress: calibrated.append((threads, collectives))
                        or f"profile {threads}t")
    monkeypatch.setattr(device_mod, "save_profile", lambda prof, path: Path(path).write_text(prof))
    turns, events = [], []

    def fake_paired_rounds(repeat, configs, iterations, turns_, after_round):
        turns.append(turns_)
        for k in range(2):
            events.append(("round", k))
            after_round([(f"base{k}", None, None), (f"two{k}", None, None)])
        return ["rounds"]

    monkeypatch.setattr(dv, "paired_rounds", fake_paired_rounds)
    monkeypatch.setattr(dv, "predict", lambda path, specs, profile_path: events.append(("predict", path))
                        or f"prediction of {path}")

    def fake_rounds_row(workload, opt_label, rounds, spec, profile_path, predicted):
        used.append((spec, Path(profile_path).read_text(), tuple(predicted)))
        return validate.ValidationRow(workload, opt_label, 1.0, 2.0, 2.0), None

    monkeypatch.setattr(dv, "rounds_row", fake_rounds_row)
    rows = dv.validate_rows(tmp_path, "/cached/device-cpu-1t.json", progress=lambda m: None, repeat=1)
    assert calibrated == [(1, False), (2, False)] and len(rows) == len(dv.DEVICE_WORKLOADS)
    target = tmp_path / "device-cpu-2t-nocomm.json"
    assert used == [(f"device:target={target}", "profile 1t",
                     ("prediction of base0", "prediction of base1"))] * len(dv.DEVICE_WORKLOADS)
    assert target.read_text() == "profile 2t"
    assert turns == [False] * len(dv.DEVICE_WORKLOADS)   # a 2-thread process stalls after each pause
    # each round's baseline is predicted as soon as the round is done, before the next round
    assert events[:4] == [("round", 0), ("predict", "base0"), ("round", 1), ("predict", "base1")]


def test_paired_rounds_without_turns_trace_the_configs_one_after_the_other(monkeypatch, tmp_path):
    """``turns=False``: each round traces its 1-process configs one after the other, never in
    turns, every second round in reverse order; the rounds list them in config order."""
    calls = []
    monkeypatch.setattr(validate, "trace_in_turns", lambda cfgs, iterations: calls.append("turns"))
    monkeypatch.setattr(validate, "trace_workload",
                        lambda name, path, args, iterations, nproc: calls.append((Path(path).name, iterations)) or path)
    monkeypatch.setattr(validate, "replay", lambda p: ("report", "schedule"))
    configs = [("mlp", tmp_path / "a.json.gz", (), 1), ("mlp", tmp_path / "b.json.gz", ("--threads", "2"), 1)]
    monkeypatch.setattr(validate, "SEQUENTIAL_ROUNDS", 1)
    rounds = validate.paired_rounds(2, configs, 9, turns=False, after_round=lambda runs: calls.append(
        ("done", [r[0].name for r in runs])))
    assert calls == [("a.r0.json.gz", 9), ("b.r0.json.gz", 9), ("done", ["a.r0.json.gz", "b.r0.json.gz"]),
                     ("b.r1.json.gz", 9), ("a.r1.json.gz", 9), ("done", ["a.r1.json.gz", "b.r1.json.gz"])]
    assert [[r[0].name for r in rnd] for rnd in rounds] == [["a.r0.json.gz", "b.r0.json.gz"],
                                                             ["a.r1.json.gz", "b.r1.json.gz"]]


def test_the_one_stage_row_is_predicted_from_the_two_traces_around_its_job(monkeypatch, tmp_path):
    """GPipe and 1F1B from the bracketing baselines; the 1-stage row from each round's own two
    traces, taken alone before and after its job, each predicted with the 1-stage spec only, the
    round's prediction their mean."""
    from daydream.validation import pipeline

    monkeypatch.setattr(pipeline, "action_overhead_us", lambda repeat, progress: 70.0)
    monkeypatch.setattr(pipeline, "recording_us", lambda progress: 1.0)
    monkeypatch.setattr(pipeline, "measure_pipeline",
                        lambda s, steps, processes: {"gpipe": 40.0, "1f1b": 38.0}[s] + processes - validate.REAL_PROCESSES)
    paired = iter([((tmp_path / "one0a", tmp_path / "one0b"), 50.0), ((tmp_path / "one1a", tmp_path / "one1b"), 54.0)])
    monkeypatch.setattr(pipeline, "one_stage_alone", lambda tdir, k, iterations: next(paired))
    brackets = [tmp_path / f"base{k}" for k in range(3)]

    def alternating(repeat, tdir, runs, progress, iterations, on_trace):
        got = {name: [] for name in runs}
        for k in range(repeat):
            on_trace(brackets[k])
            for name, fn in runs.items():
                got[name].append(fn())
            yield (k + 1) / repeat
        on_trace(brackets[repeat])
        return brackets[1], validate.bracketed(brackets), got

    monkeypatch.setattr(pipeline, "alternating", alternating)
    asked = []

    def predict_now(path, specs, profile_path):
        specs = list(specs)
        asked.append((path.name, len(specs)))
        return {s: SimpleNamespace(baseline_ms=25.0, predicted_ms=(44.0 if "stages=1" in s else 41.0) +
                                   {"one1a": 2.0, "one1b": 4.0}.get(path.name, 0.0), optimizations=[s]) for s in specs}

    monkeypatch.setattr(pipeline, "predict_now", predict_now)
    rows = pipeline.validate_rows(tmp_path, "p.json", progress=lambda m: None, repeat=2)
    assert asked == [("base0", 2), ("one0a", 1), ("one0b", 1), ("base1", 2), ("one1a", 1), ("one1b", 1), ("base2", 2)]
    one = rows[2]
    assert one.optimization.startswith("pipeline:stages=1,microbatches=4")
    assert one.predicted_rounds_ms == (44.0, 47.0) and one.measured_rounds_ms == (50.0, 54.0)
    assert [r.measured_rounds_ms for r in rows[:2]] == [(40.0, 40.0), (38.0, 38.0)]
    assert rows[0].predicted_rounds_ms == (41.0, 41.0)


def test_the_one_stage_job_runs_alone_between_its_two_traces_on_one_core(monkeypatch, tmp_path):
    """Trace, job, trace, one after the other, each started on the core turns would share;
    the caller's cores are given back."""
    import os

    from daydream import validate as V
    from daydream.collect.turns import shared_core
    from daydream.validation import pipeline

    cores = os.sched_getaffinity(0)
    calls = []

    def trace_workload(name, path, args, iterations):
        calls.append((path.name, os.sched_getaffinity(0), iterations))
        return path

    def run(schedule, extra, steps, warmup, microbatches):
        calls.append((schedule, extra, os.sched_getaffinity(0), steps - warmup))
        return {"mean_ms": 36.5}

    monkeypatch.setattr(V, "trace_workload", trace_workload)
    monkeypatch.setattr(pipeline, "_run", run)
    paths, ms = pipeline.one_stage_alone(tmp_path, 3, iterations=7)
    one = {shared_core()} if shared_core() is not None else cores
    assert ms == 36.5 and [p.name for p in paths] == ["mlp.pipeline-1stage.r3.before.json.gz",
                                                      "mlp.pipeline-1stage.r3.after.json.gz"]
    assert calls == [("mlp.pipeline-1stage.r3.before.json.gz", one, 7), ("gpipe", ("--nproc", "1"), one, 7),
                     ("mlp.pipeline-1stage.r3.after.json.gz", one, 7)]
    assert os.sched_getaffinity(0) == cores


def test_the_row_pairing_benchmark_centres_each_runs_rounds(tmp_path, monkeypatch, capsys):
    """``benchmarks/row_pairing.py``: per row over its rounds, each run centred on its mean, the
    prediction's correlation with the real runs (+1 where it follows them at another level, -1
    where it moves against them) and the spread of their difference; rows without as many
    predicted rounds as real ones are left out, and files without any are refused."""
    import importlib

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    bench = importlib.import_module("row_pairing")
    head = "workload,optimization,measured_rounds_ms,predicted_rounds_ms\n"
    files = []
    for i, (real, follows, against) in enumerate([("10 12 11", "20 24 22", "12 10 11"),
                                                  ("30 33 27", "15 16.5 13.5", "9 8.1 9.9")]):
        f = tmp_path / f"run{i}.csv"
        f.write_text(head + f"mlp,hfta:models=2,{real},{follows}\n"
                     f'mlp,"pipeline:stages=2,microbatches=4,schedule=gpipe",{real},{against}\n'
                     "cnn,hfta:models=2,1 2 3,\n")
        files.append(str(f))
    got = bench.pooled_rows(files)
    assert list(got) == ["mlp / hfta:models=2", "mlp / pipeline:stages=2,schedule=gpipe"]
    assert got["mlp / hfta:models=2"][0] == pytest.approx(got["mlp / hfta:models=2"][1])
    bench.main(files)
    out = capsys.readouterr().out
    assert "mlp / hfta:models=2" in out and "n    6  r +1.00" in out and "difference  0.0" in out
    assert "r -1.00" in out and "cnn" not in out
    empty = tmp_path / "empty.csv"
    empty.write_text(head + "cnn,hfta:models=2,1 2 3,\n")
    with pytest.raises(SystemExit, match="no rows with per-round figures"):
        bench.main([str(empty)])


def test_the_cycle_drift_benchmark_prints_each_probe_and_the_spread(monkeypatch, capsys):
    """``benchmarks/cycle_drift.py``: one line per probe (its time, every point of the curve, the
    one-copy step) and per point its least, median and greatest factor; the curve's first point
    is x1 by construction."""
    import doctest
    import importlib

    pytest.importorskip("torch")
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    bench = importlib.import_module("cycle_drift")
    assert doctest.testmod(bench).failed == 0
    bench.main(["--probes", "2", "--rounds", "1"])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 + 4
    assert all(" s  x1.000 / " in ln and "one copy" in ln for ln in lines[:2])
    assert lines[2].startswith("  4.2 MB: x1.000-1.000") and lines[5].startswith(" 33.6 MB: x")


def test_the_rounds_subsample_benchmark_reads_any_window_of_rounds(tmp_path, monkeypatch, capsys):
    """``benchmarks/rounds_subsample.py``: a row from rounds ``skip + 1`` to ``skip + k`` of each
    side, as the row is made (pipeline rows the median, device rows the mean of twice as many
    sequential rounds), and a window past a row's rounds refused."""
    import importlib

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    bench = importlib.import_module("rounds_subsample")
    f = tmp_path / "results.csv"
    f.write_text("# daydream: {}\nworkload,optimization,measured_rounds_ms,predicted_rounds_ms\n"
                 'mlp,"pipeline:stages=2,schedule=gpipe",10 10 20 20,11 11 30 30\n'
                 "mlp,device:target=cpu-2t,10 10 10 10 20 20 20 20,10 10 10 10 10 10 10 10\n")
    assert bench.rows_at(f, 2) == pytest.approx([10.0, 0.0])
    assert bench.rows_at(f, 2, skip=2) == pytest.approx([50.0, -50.0])
    assert bench.rows_at(f, 3, skip=1) == pytest.approx([50.0, -40.0])
    bench.main([str(f), "--rounds", "2", "--skip", "0", "2"])
    out = capsys.readouterr().out
    assert "first 2 rounds" in out and "rounds 3-4" in out and "+50.0 -50.0" in out
    with pytest.raises(SystemExit, match="has 4 rounds, not 5"):
        bench.rows_at(f, 3, skip=2)
    # a row made from its traces' own predictions (Hydra): two a round, the rounds' means beside them
    g = tmp_path / "traces.csv"
    g.write_text("workload,optimization,measured_rounds_ms,predicted_rounds_ms,predicted_traces_ms\n"
                 'mlp,"hydra:models=2",10 10 20,50 50 50,11 12 13 90 30 30\n')
    assert bench.rows_at(g, 2) == pytest.approx([25.0])          # median of 11 12 13 90 over 10
    assert bench.rows_at(g, 1, skip=2) == pytest.approx([50.0])  # 30 30 over 20
    g.write_text("workload,optimization,measured_rounds_ms,predicted_rounds_ms,predicted_traces_ms\n"
                 'mlp,"hydra:models=2",10 10,50 50,11 12 13\n')
    with pytest.raises(SystemExit, match="3 trace predictions for 2 rounds"):
        bench.rows_at(g, 1)
    # pooled runs: the traces' column where every run has it, the rounds' where one lacks it
    pool = importlib.import_module("pool_runs")
    h = tmp_path / "rounds.csv"
    h.write_text("workload,optimization,measured_rounds_ms,predicted_rounds_ms\n"
                 'mlp,"hydra:models=2",10 10,12 12\n')
    assert pool.pooled_errors([g, g]) == pytest.approx([20.0])        # median of 11 12 13 11 12 13 over 10
    assert pool.pooled_errors([g, h]) == pytest.approx([210.0])       # rounds: median of 50 50 12 12 over 10


def test_the_benchmarks_read_median_rows_paired_and_runner_spells_compares_runners(tmp_path, monkeypatch, capsys):
    """``--paired``: a median row is the median round's error, each trace's prediction over the
    round it brackets; ``runner_spells.py`` correlates rows of one runner apart from the others'."""
    import importlib

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    bench = importlib.import_module("rounds_subsample")
    g = tmp_path / "traces.csv"
    g.write_text("workload,optimization,measured_rounds_ms,predicted_rounds_ms,predicted_traces_ms\n"
                 'mlp,"hydra:models=2",10 20,10 20,11 13 22 60\n')
    # 1.1 1.3 | 1.1 3.0: the median (1.1 + 1.3) / 2; each side's median (17.5 over 15) reads +16.7
    assert bench.rows_at(g, 2, paired=True) == pytest.approx([20.0])
    assert bench.rows_at(g, 2) == pytest.approx([100.0 * (17.5 / 15.0 - 1.0)])
    spells = importlib.import_module("runner_spells")
    files = []
    for k, (a, b, c) in enumerate([(11, 12, 10), (9, 8, 12), (12, 13, 9)]):
        f = tmp_path / f"r{k}.csv"
        f.write_text("workload,optimization,measured_rounds_ms,predicted_rounds_ms\n"
                     f'mlp,"tessel:stages=2",10,{a}\nmlp,"tessel:placement=v",10,{b}\nmlp,hfta:models=2,10,{c}\n')
        files.append(str(f))
    spells.main([*files, "--rounds", "1", "--draws", "50"])
    out = capsys.readouterr().out.splitlines()
    # errors +10 -10 +20 (chain), +20 -20 +30 (V), 0 +20 -10 (hfta): r +0.99 and -1.00
    assert "within +0.99 across -1.00" in out[1] and "missed 0.67" in out[1] and "within  +nan across" in out[3]
    with pytest.raises(SystemExit, match="at least three"):
        spells.main(files[:2])
