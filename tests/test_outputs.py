"""Output files: atomic, never overwritten without --force, and each records the command and versions."""
from __future__ import annotations

import errno
import gzip
import json
import os
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from daydream import fileio
from daydream.cli import main
from daydream.errors import DaydreamError

REPO = Path(__file__).resolve().parents[1]
MLP = REPO / "traces" / "mlp.trace.json.gz"


def run_cli(*args):
    return CliRunner().invoke(main, list(map(str, args)))


def _one_line_error(res, *needles):
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    for n in needles:
        assert n in lines[0]


def _assert_provenance(meta, kind):
    assert meta["tool"] == "daydream" and meta["kind"] == kind
    assert isinstance(meta["command"], list) and meta["command"]
    v = meta["versions"]
    assert v["python"] == ".".join(map(str, sys.version_info[:3])) and v["numpy"] and v["daydream"]


def _hidden(folder):
    return [p for p in os.listdir(folder) if p.startswith(".")]


@pytest.fixture
def results_csv(tmp_path):
    p = tmp_path / "results.csv"
    p.write_text("workload,optimization,predicted_ms,measured_ms,error_pct\n"
                 "mlp,amp,10.0,11.0,9.1\nmlp,fused-adam,5.0,5.2,3.8\n")
    return p


def test_replay_output_records_command_and_versions(tmp_path):
    out = tmp_path / "sim.json.gz"
    res = run_cli("replay", MLP, "-o", out)
    assert res.exit_code == 0, res.output
    meta = json.loads(gzip.decompress(out.read_bytes()))["daydream"]
    _assert_provenance(meta, "replay")
    assert _hidden(tmp_path) == []


def test_whatif_output_refuses_to_overwrite_then_records_provenance(tmp_path):
    from conftest import flat_profile
    from daydream.device import save_profile

    prof = save_profile(flat_profile(), str(tmp_path / "prof.json"))
    out = tmp_path / "pred.json"
    out.write_text("precious")
    _one_line_error(run_cli("whatif", MLP, "--opt", "fused-adam", "-o", out), "exists", "--force")
    assert out.read_text() == "precious"
    res = run_cli("whatif", MLP, "--opt", "fused-adam", "--profile", prof, "-o", out, "--force")
    assert res.exit_code == 0, res.output
    meta = json.loads(out.read_text())["daydream"]
    _assert_provenance(meta, "whatif")
    assert meta["optimizations"] and meta["optimizations"][0].startswith("fused-adam")


def test_plot_refuses_to_overwrite_and_embeds_provenance(tmp_path, results_csv):
    png, svg = tmp_path / "acc.png", tmp_path / "acc.svg"
    svg.write_text("mine")
    _one_line_error(run_cli("plot", "accuracy", results_csv, "-o", tmp_path / "acc"), "acc.svg", "--force")
    assert svg.read_text() == "mine" and not png.exists()        # nothing written when one target exists
    res = run_cli("plot", "accuracy", results_csv, "-o", tmp_path / "acc", "--force")
    assert res.exit_code == 0, res.output
    from PIL import Image

    text = Image.open(png).text
    _assert_provenance(json.loads(text["daydream"]), "plot")
    assert text["Software"].startswith("daydream")
    body = svg.read_text()
    assert "<dc:description>" in body and '"kind":"plot"' in body.replace("&quot;", '"')
    assert _hidden(tmp_path) == []


def test_calibrate_refuses_an_existing_output_before_measuring(tmp_path):
    out = tmp_path / "profile.json"
    out.write_text("{}")
    _one_line_error(run_cli("calibrate", "-o", out, "--quick"), "exists", "--force")
    assert out.read_text() == "{}"


def test_saved_profile_records_provenance_and_still_loads(tmp_path):
    from daydream.device import load_profile, save_profile
    from daydream.published import PUBLISHED

    p = save_profile(PUBLISHED["A100"], str(tmp_path / "a100.json"))
    doc = json.loads(Path(p).read_text())
    _assert_provenance(doc["daydream"], "calibrate")
    assert load_profile(p).name == PUBLISHED["A100"].name


def test_profile_keeps_the_checkpoint_and_compiled_call_costs_and_refuses_a_negative_one(tmp_path):
    import dataclasses

    from daydream.device import load_profile, save_profile
    from daydream.published import PUBLISHED

    p = save_profile(dataclasses.replace(PUBLISHED["A100"], checkpoint_call_ns=(120_000, 80_000),
                                         checkpoint_op_ns=(9_000, 4_000), compiled_call_ns=(250_000, 110_000),
                                         compiled_tensor_ns=(4_000, 700)), str(tmp_path / "c.json"))
    got = load_profile(p)
    assert got.checkpoint_call_ns == (120_000, 80_000)
    assert got.checkpoint_op_ns == (9_000, 4_000)
    assert (got.compiled_call_ns, got.compiled_tensor_ns) == ((250_000, 110_000), (4_000, 700))
    good = Path(p).read_text()
    old = json.loads(good)                 # a profile from before session 13: one number, no per tensor
    old["compiled_call_ns"] = 110_001
    del old["compiled_tensor_ns"]
    Path(p).write_text(json.dumps(old))
    assert (load_profile(p).compiled_call_ns, load_profile(p).compiled_tensor_ns) == ((55_000, 55_001), (0, 0))
    for key in ("checkpoint_call_ns", "checkpoint_op_ns", "compiled_call_ns", "compiled_tensor_ns"):
        doc = json.loads(good)
        doc[key] = [-1, 0]
        Path(p).write_text(json.dumps(doc))
        with pytest.raises(DaydreamError, match=f"{key} needs two numbers >= 0"):
            load_profile(p)


@pytest.mark.parametrize("fail_at", ["fsync", "replace"])
def test_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch, fail_at):
    out = tmp_path / "o.json"
    out.write_text("old")

    def boom(*a):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, fail_at, boom)
    with pytest.raises(fileio.OutputError, match="No space left on device") as info:
        fileio.write_json(out, {"a": 1})
    assert "\n" not in str(info.value)
    monkeypatch.undo()
    assert out.read_text() == "old" and _hidden(tmp_path) == []


def test_interrupted_write_leaves_no_temporary(tmp_path, monkeypatch):
    out = tmp_path / "o.json"

    def interrupted(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        fileio.write_json(out, {"a": 1})
    monkeypatch.undo()
    assert not out.exists() and _hidden(tmp_path) == []


def test_replay_to_a_full_disk_is_one_line(tmp_path, monkeypatch):
    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    out = tmp_path / "sim.json"
    _one_line_error(run_cli("replay", MLP, "-o", out), str(out), "No space left on device")
    assert not out.exists() and _hidden(tmp_path) == []


def test_unexpected_errors_are_one_line_unless_debugging(monkeypatch):
    """A bug (not a DaydreamError) still gives one line and exit 3; DAYDREAM_DEBUG=1 shows the traceback."""
    import daydream.cli_core as core

    def bug(*a, **k):
        raise KeyError("oops")

    monkeypatch.setattr(core, "run_replay", bug)
    res = run_cli("replay", MLP)
    assert res.exit_code == 3 and "Traceback" not in res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "internal error (KeyError: 'oops')" in lines[0] and "DAYDREAM_DEBUG=1" in lines[0]
    monkeypatch.setenv("DAYDREAM_DEBUG", "1")
    res = run_cli("replay", MLP)
    assert isinstance(res.exception, KeyError)


def test_a_closed_output_pipe_ends_the_command_quietly(capsys, monkeypatch):
    from daydream import _cli_util
    from daydream._cli_util import handle_errors

    quieted = []
    monkeypatch.setattr(_cli_util, "_quiet_stdout", lambda: quieted.append(True))   # not this process's fd 1

    @handle_errors
    def writes_to_a_closed_pipe():
        raise BrokenPipeError(32, "Broken pipe")

    with pytest.raises(SystemExit) as exit_info:
        writes_to_a_closed_pipe()
    assert exit_info.value.code == 141 and quieted == [True]
    assert capsys.readouterr().err == ""


def test_results_csv_records_provenance_and_reads_back(tmp_path):
    from daydream.plots import read_accuracy_csv
    from daydream.validate import ValidationRow, write_results

    rows = [ValidationRow("mlp", "fused-adam", 10.0, 8.0, 9.0)]
    path = write_results(rows, tmp_path)
    first = path.read_text().splitlines()[0]
    assert first.startswith("# daydream: ")
    _assert_provenance(json.loads(first[len("# daydream: "):]), "validate")
    (pt,) = read_accuracy_csv(path)
    assert (pt.measured_ms, pt.predicted_ms) == (9.0, 8.0)
    with pytest.raises(fileio.OutputError, match="--force"):
        write_results(rows, tmp_path, force=False)


def test_validate_refuses_existing_results_before_measuring(tmp_path):
    (tmp_path / "results.csv").write_text("mine\n")
    res = run_cli("validate", "--workload", "mlp", "--opt", "fused-adam", "--no-public", "-o", tmp_path)
    _one_line_error(res, "results.csv", "--force")
    assert (tmp_path / "results.csv").read_text() == "mine\n"


@pytest.mark.parametrize("args, quiet", [(["optimizations"], True), (["trace", "--help"], False)])
def test_kineto_s_log_is_silenced_except_around_the_user_s_own_script(monkeypatch, args, quiet):
    """torch 2.13's Kineto prints a line at every profiler start and stop; daydream's own profiler
    sessions (calibration) should not flood the output, the user's traced script keeps its own."""
    from daydream._cli_util import KINETO_QUIET_LEVEL

    monkeypatch.delenv("KINETO_LOG_LEVEL", raising=False)
    assert CliRunner().invoke(main, args).exit_code == 0
    assert os.environ.get("KINETO_LOG_LEVEL") == (KINETO_QUIET_LEVEL if quiet else None)
    monkeypatch.setenv("KINETO_LOG_LEVEL", "1")                      # a user's own choice stays
    CliRunner().invoke(main, ["optimizations"])
    assert os.environ["KINETO_LOG_LEVEL"] == "1"
