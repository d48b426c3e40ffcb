"""The validation runners' rounds in turns (``daydream.validation.turns``)."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

import daydream.validate as validate
from daydream.corelink import CoreLinkLog, note_placement
from daydream.errors import DaydreamError
from daydream.validation.turns import drain, run_rounds, started


def _runner(name, rounds, log, rows=None, fail_at=None):
    """A runner of ``rounds`` rounds that logs each round and what it was sent back."""
    for k in range(rounds):
        if k == fail_at:
            raise DaydreamError(f"{name} failed")
        log.append(f"{name}{k}")
        if k < rounds - 1:
            log.append((yield (k + 1) / rounds))
    return rows if rows is not None else [name]


def test_the_runner_least_far_along_goes_next_and_hears_whether_others_ran():
    log = []
    got = run_rounds({"a": _runner("a", 2, log), "b": _runner("b", 4, log), "c": _runner("c", 1, log)})
    assert got == {"a": ["a"], "b": ["b"], "c": ["c"]}
    # a at 1/2, b at 1/4 then 2/4 (b ran last: False), c done at once; then a (1/2 < 3/4 ...)
    assert log == ["a0", "b0", "c0", True, "b1", True, "a1", True, "b2", False, "b3"]


def test_without_interleaving_each_runner_runs_to_its_end_in_order():
    log = []
    got = run_rounds({"a": _runner("a", 2, log), "b": _runner("b", 3, log)}, interleave=False)
    assert got == {"a": ["a"], "b": ["b"]}
    assert log == ["a0", False, "a1", "b0", False, "b1", False, "b2"]


def test_progress_after_each_turn_tells_the_share_done_and_the_minutes_left(monkeypatch):
    ticks = iter(60.0 * k for k in range(100))           # a minute a reading
    monkeypatch.setattr("daydream.validation.turns.time.monotonic", lambda: next(ticks))
    lines = []
    run_rounds({"a": _runner("a", 2, []), "b": _runner("b", 4, [])}, progress=lines.append)
    assert [line.split(" of the rounds")[0] for line in lines] == [
        f"validate: {p} %" for p in (25, 38, 50, 75, 88, 100)]
    assert lines[0].endswith("done in 1 min, about 3 min left")     # 1 min for 25 %: 3 more
    assert lines[-1] == "validate: 100 % of the rounds done in 6 min"


def test_a_failing_runner_stops_alone_and_without_on_error_the_error_propagates():
    log, errors = [], []
    got = run_rounds({"a": _runner("a", 3, log, fail_at=1), "b": _runner("b", 3, log)},
                       on_error=lambda name, exc: errors.append((name, str(exc))))
    assert got == {"a": [], "b": ["b"]} and errors == [("a", "a failed")]
    assert [x for x in log if isinstance(x, str)] == ["a0", "b0", "b1", "b2"]
    with pytest.raises(DaydreamError, match="a failed"):
        run_rounds({"a": _runner("a", 3, [], fail_at=1)})


def test_each_runner_s_probes_go_to_its_own_logs_even_one_kept_open_across_turns():
    inner = CoreLinkLog()

    def probing(value, rounds, keep_open=False):
        if keep_open:
            inner.__enter__()
        for k in range(rounds):
            note_placement(probe=lambda: value)
            if k < rounds - 1:
                yield (k + 1) / rounds
        if keep_open:
            inner.__exit__(None, None, None)
        return []

    logs = {"a": CoreLinkLog(), "b": CoreLinkLog()}
    outside = CoreLinkLog()
    with outside:
        run_rounds({"a": probing(1.0, 3, keep_open=True), "b": probing(2.0, 3)}, logs)
    assert logs["a"].values_ns == (1.0, 1.0, 1.0) and inner.values_ns == (1.0, 1.0, 1.0)
    assert logs["b"].values_ns == (2.0, 2.0, 2.0) and outside.values_ns == ()


def test_a_runner_without_rounds_returns_its_rows_when_first_advanced():
    calls = []
    gen = started(lambda x: calls.append(x) or [x], "row")
    assert calls == []                          # nothing runs before its first turn
    assert drain(gen) == ["row"] and calls == ["row"]


def _fake_traces(monkeypatch):
    import daydream.analysis as analysis

    paths = []
    monkeypatch.setattr(validate, "trace_workload", lambda name, path, args, iterations: paths.append(Path(path).name)
                        or path)
    monkeypatch.setattr(analysis, "replay", lambda p: (SimpleNamespace(measured_ms=1.0),))
    return paths


def test_a_pipeline_round_after_other_work_takes_a_fresh_trace_before_its_runs(monkeypatch, tmp_path):
    """Told that others ran, the next round does not take the last round's after-trace as its
    before-trace (minutes old by then): each round stays between two traces of its own minute."""
    from daydream.validation import pipeline

    paths, log = _fake_traces(monkeypatch), []
    gen = pipeline.alternating(3, tmp_path, {"gpipe": lambda: log.append(len(paths)) or 1.0}, progress=lambda m: None)
    assert next(gen) == pytest.approx(1 / 3)
    assert gen.send(True) == pytest.approx(2 / 3)      # others ran: a fresh trace before round 2
    with pytest.raises(StopIteration) as stop:
        gen.send(False)                                # none ran: round 2's after-trace serves round 3
    _, rounds, got = stop.value.value
    names = [f"mlp.pipeline-base.r{k}.json.gz" for k in range(5)]
    assert paths == names and log == [1, 3, 4]          # each round's runs right after a trace
    assert [(a.name, b.name) for a, b in rounds] == [(names[0], names[1]), (names[2], names[3]),
                                                     (names[3], names[4])]


def test_a_hydra_round_after_other_work_takes_a_fresh_trace_before_its_first_k(monkeypatch, tmp_path):
    import daydream.validation.hydra as vh

    traced, runs = [], []
    monkeypatch.setattr(vh, "trace_workload", lambda w, p, args, iterations: traced.append(p) or p)
    monkeypatch.setattr(vh, "_split", lambda path, profile: (3, 6))
    monkeypatch.setattr(vh, "predict_now", lambda path, specs, profile: {})
    monkeypatch.setattr(vh, "run_real", lambda k, shard0, processes: runs.append((k, len(traced)))
                        or {s: 1.0 for s in vh.SCHEDULES})
    pairs = []
    monkeypatch.setattr(vh, "median_row", lambda workload, label, rounds, *a, **kw: pairs.append(rounds)
                        or validate.ValidationRow(workload, "x", 1.0, 1.0, 1.0))
    gen = vh.validation_rounds(tmp_path, "prof.json", progress=lambda m: None, repeat=2)
    assert next(gen) == pytest.approx(0.5)
    with pytest.raises(StopIteration):
        gen.send(True)
    # round 1: trace 0, K = 2, trace 1, K = 4, trace 2; round 2 after others: trace 3 fresh, K = 2, ...
    assert runs == [(2, 1), (4, 2), (2, 4), (4, 5)]
    names = [Path(p).name for p in traced]
    assert names == [f"hydra.mlp.base.r{k}.json.gz" for k in range(6)]
    assert [[(Path(a).name[-10:-8], Path(b).name[-10:-8]) for a, b in p] for p in pairs[::2]] == [
        [("r0", "r1"), ("r3", "r4")], [("r1", "r2"), ("r4", "r5")]]


def test_validate_runs_the_runners_rounds_in_turns_unless_told_not_to(monkeypatch, tmp_path):
    from click.testing import CliRunner

    from daydream.cli import main

    log = []

    def fake(name):
        def fn(out, prof, progress, repeat, iterations):
            return _runner(name, repeat, log, rows=[validate.ValidationRow("mlp", f"{name}:x=1", 1.0, 1.0, 1.0)])
        return fn

    monkeypatch.setattr(validate, "runner", lambda name: fake(name))
    monkeypatch.setattr(validate, "ensure_profile", lambda path=None, progress=print: "profile.json")
    args = ["validate", "--workload", "", "--opt", "hfta,hydra", "--no-public", "--no-calibrate", "--repeat", "2",
            "-o", str(tmp_path)]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert "the rounds of hfta, hydra in turns" in res.output
    assert "validate: 50 % of the rounds done" in res.output and "validate: 100 % of the rounds done" in res.output
    assert log == ["hfta0", "hydra0", True, "hfta1", True, "hydra1"]
    log.clear()
    res = CliRunner().invoke(main, [*args, "--no-interleave", "--force"])
    assert res.exit_code == 0, res.output
    assert log == ["hfta0", False, "hfta1", "hydra0", False, "hydra1"]
    rows = (tmp_path / "results.csv").read_text().splitlines()
    assert [r.split(",")[1] for r in rows if r.startswith("mlp,")] == ["hfta:x=1", "hydra:x=1"]


def test_hfta_yields_between_all_its_rounds_of_both_workloads(monkeypatch, tmp_path):
    """Both workloads' rounds count toward the fraction done; each row takes its workload's rounds."""
    import daydream.validation.hfta as vhfta

    monkeypatch.setattr(vhfta, "iter_paired_rounds", lambda repeat, configs, iterations: iter(
        [[(f"{configs[0][0]}{k}", None, None)] for k in range(repeat)]))
    made = []
    monkeypatch.setattr(vhfta, "rounds_row", lambda w, label, rounds, spec, profile, variant:
                        (made.append((w, [r[0][0] for r in rounds])) or validate.ValidationRow(w, label, 1.0, 1.0, 1.0),
                         [SimpleNamespace(measured_ms=1.0, metrics={"throughput_gain": 1.0})]))
    gen = vhfta.validation_rounds(tmp_path, "prof.json", progress=lambda m: None, repeat=2)
    fractions = [next(gen)] + [gen.send(True) for _ in range(2)]
    assert fractions == [0.25, 0.5, 0.75]
    with pytest.raises(StopIteration) as stop:
        gen.send(True)
    assert len(stop.value.value) == sum(len(n) for n in vhfta.MODELS.values())
    assert made == [(w, [f"{w}0", f"{w}1"]) for w, ns in vhfta.MODELS.items() for _ in ns]
