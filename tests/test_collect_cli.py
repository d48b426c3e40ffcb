"""``daydream trace -- COMMAND``: pass-through, bad input, atomicity, multi-rank."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO, daydream_cmd, run_daydream
from daydream.collect.runner import cores_for_rank

pytest.importorskip("torch")

PY = sys.executable


def _steps(path):
    with open(path) as fh:
        doc = json.load(fh)
    names = sorted(e["name"] for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#"))
    return doc, names


def test_passes_output_and_status_through(tmp_path, train_script):
    out = tmp_path / "out.json"
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import os\nif 'DAYDREAM_TRACE_CONFIG' in os.environ: print('user sitecustomize ran', flush=True)\n")
    res = run_daydream("trace", "-o", str(out), "--warmup", "1", "-n", "2", "--", PY, str(train_script), "6", "3",
                       pythonpath=[site])
    assert res.returncode == 3, res.stderr
    assert "step 6" in res.stdout and "script done" in res.stdout
    assert "user sitecustomize ran" in res.stdout  # an existing sitecustomize still runs
    assert "wrote" in res.stderr
    doc, names = _steps(out)
    # the setup before the first step is skipped, then 1 warm-up iteration
    assert names == ["ProfilerStep#2", "ProfilerStep#3"]
    meta = doc["daydream"]
    assert meta["iterations"]["skipped_prelude"] is True and meta["command"][-2:] == ["6", "3"]
    assert any(r["path"] == "Sequential.0" for r in meta["modules"])


def test_prints_what_recording_cost_given_enough_warmup(tmp_path, train_script):
    out = tmp_path / "out.json"
    res = run_daydream("trace", "-o", str(out), "--warmup", "6", "-n", "2", "--", PY, str(train_script), "12")
    assert res.returncode == 0, res.stderr
    its = json.loads(out.read_text())["daydream"]["iterations"]
    assert its["untraced_steps"] == [0, 1, 2, 3, 4]   # the prelude, then up to the shape iteration
    line = next(ln for ln in res.stderr.splitlines() if "recording cost" in ln)
    assert "for 3 untraced warm-up iterations" in line   # the least --warmup that says


def _trace_in_process(*args):
    """Invoke the click command in this process (for errors raised before the child starts)."""
    from click.testing import CliRunner

    import daydream.cli  # noqa: F401  (registers the commands; avoids a circular import)
    from daydream.cli_collect import trace

    return CliRunner().invoke(trace, list(args))


def test_missing_script(tmp_path):
    res = _trace_in_process("-o", str(tmp_path / "o.json"), "--", PY, str(tmp_path / "nope.py"))
    assert res.exit_code == 2
    assert "script not found" in res.output
    assert not (tmp_path / "o.json").exists()


def test_missing_command(tmp_path):
    res = _trace_in_process("-o", str(tmp_path / "o.json"), "--", "no-such-command-xyz")
    assert res.exit_code == 2 and "command not found" in res.output


def test_existing_output_without_force_fails_before_running(tmp_path):
    out = tmp_path / "out.json"
    out.write_text("{}")
    marker = tmp_path / "ran"
    res = _trace_in_process("-o", str(out), "--", PY, "-c", f"open({str(marker)!r}, 'w')")
    assert res.exit_code == 2 and "already exists" in res.output and "--force" in res.output
    assert not marker.exists()  # the command did not run
    assert out.read_text() == "{}"


def test_unwritable_output_fails_before_running(tmp_path):
    marker = tmp_path / "ran"
    res = _trace_in_process("-o", str(tmp_path / "missing" / "o.json"), "--", PY, "-c",
                            f"open({str(marker)!r}, 'w')")
    assert res.exit_code == 2 and "does not exist" in res.output
    assert not marker.exists()


def test_nproc_rewrites_python_command():
    from daydream.collect.launch import with_nproc

    cmd = with_nproc(("python", "-u", "-m", "pkg.train", "--lr", "1"), 2)
    assert cmd == ("python", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                   "-m", "pkg.train", "--lr", "1")
    assert with_nproc(("python", "t.py", "a"), 3)[-2:] == ("t.py", "a")


def test_script_that_never_steps(tmp_path):
    script = tmp_path / "idle.py"
    script.write_text("import torch\nprint('idle', torch.ones(2).sum().item())\n")
    res = run_daydream("trace", "-o", str(tmp_path / "o.json"), "--", PY, str(script))
    assert "idle 2.0" in res.stdout
    assert res.returncode == 2
    assert "daydream.step()" in res.stderr and "optimizer.step()" in res.stderr
    assert not (tmp_path / "o.json").exists()


def test_script_failing_before_first_iteration(tmp_path):
    script = tmp_path / "bad.py"
    script.write_text("import sys, torch\nsys.exit(5)\n")
    res = run_daydream("trace", "-o", str(tmp_path / "o.json"), "--", PY, str(script))
    assert res.returncode == 5
    assert "status 5 before its first iteration" in res.stderr


def test_user_profiler_step_marks_iterations(tmp_path):
    script = tmp_path / "prof.py"
    script.write_text(
        "import torch\n"
        "m = torch.nn.Linear(4, 4)\n"
        "with torch.profiler.profile(schedule=torch.profiler.schedule(wait=0, warmup=1, active=2)) as prof:\n"
        "    for _ in range(6):\n"
        "        m(torch.randn(2, 4)).sum().backward()\n"
        "        prof.step()\n"
        "print('done')\n"
    )
    out = tmp_path / "o.json"
    res = run_daydream("trace", "-o", str(out), "--warmup", "0", "-n", "2", "--", PY, str(script))
    assert res.returncode == 0, res.stderr
    doc, names = _steps(out)
    assert names == ["ProfilerStep#1", "ProfilerStep#2"]
    assert doc["daydream"]["iterations"]["marker"] == "torch.profiler.step"


def test_sigint_leaves_valid_trace_or_none(tmp_path, train_script):
    out = tmp_path / "out.json"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        daydream_cmd("trace", "-o", str(out), "--warmup", "0", "-n", "1000", "--", PY, str(train_script), "-1"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
        # a shell without job control starts background jobs with SIGINT ignored; a terminal does not
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.time() + 60
    for line in proc.stdout:
        if line.startswith("step 6") or time.time() > deadline:
            break
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    leftovers = [p for p in os.listdir(tmp_path) if p.startswith(".")]
    assert leftovers == []
    assert out.exists(), err  # iterations finished before Ctrl-C are kept
    doc, names = _steps(out)
    meta = doc["daydream"]["iterations"]
    assert meta["complete"] is False and len(names) == meta["recorded"] >= 4


def test_two_ranks_write_two_files(tmp_path):
    out = tmp_path / "ddp.json"
    res = run_daydream(
        "trace", "-o", str(out), "--warmup", "1", "-n", "2", "--nproc", "2", "--pin-cores", "--",
        PY, "-m", "daydream.workloads.mlp", "--steps", "4", "--quiet", "--threads", "1",
        "--in-features", "16", "--hidden", "32", "--layers", "1", "--batch-size", "8",
        timeout=180,
    )
    assert res.returncode == 0, res.stderr
    cores = sorted(os.sched_getaffinity(0))
    for rank in (0, 1):
        doc, names = _steps(tmp_path / f"ddp.rank{rank}.json")
        meta = doc["daydream"]
        assert (meta["rank"], meta["world_size"]) == (rank, 2)
        assert meta["distributed"]["backend"] == "gloo"
        assert len(names) == 2
        assert meta["device"]["cpu"]["affinity"] == cores_for_rank(cores, rank, 2)   # --pin-cores
    assert not out.exists()


def test_pin_rank_restricts_a_process_to_its_share_of_the_cores():
    """What ``--pin-cores`` of the pipeline and Hydra workloads calls in each process."""
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no CPU affinity on this platform")
    cores = os.sched_getaffinity(0)
    code = ("import os, sys; from daydream.collect.runner import pin_rank; "
            "pin_rank(int(sys.argv[1]), 2); print(sorted(os.sched_getaffinity(0)))")
    for rank in (0, 1):
        res = subprocess.run([PY, "-c", code, str(rank)], capture_output=True, text=True, timeout=60,
                             env=dict(os.environ, PYTHONPATH=str(REPO)))
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout) == sorted(cores_for_rank(cores, rank, 2))


@pytest.mark.parametrize("flag, source", [((), "warm-up iteration 1"),
                                          (("--shapes-every-iteration",), "every iteration")])
def test_trace_says_where_op_shapes_come_from(tmp_path, train_script, flag, source):
    pytest.importorskip("torch")
    out = tmp_path / "t.json"
    res = run_daydream("trace", "-o", str(out), "-n", "2", *flag, "--", PY, str(train_script), "6")
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    assert doc["daydream"]["shapes"]["source"] == source
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op"]
    assert any("Input Dims" in e.get("args", {}) for e in ops)


@pytest.mark.parametrize("flags, expected", [((), True), (("--cupti",), True), (("--no-cupti",), False)])
def test_cupti_is_the_default_gpu_source_and_can_be_turned_off(monkeypatch, tmp_path, flags, expected):
    """The extension is asked for unless ``--no-cupti``; where it cannot run, the tracer falls back
    (tests/test_tracer_safety.py); the runner reads the same default from its configuration."""
    from click.testing import CliRunner

    from daydream.cli import main
    from daydream.collect import launch

    seen = []

    def run_traced(req):            # nothing is run: the request is what is tested
        seen.append(req)
        raise SystemExit(0)

    monkeypatch.setattr(launch, "run_traced", run_traced)
    CliRunner().invoke(main, ["trace", "-o", str(tmp_path / "t.json"), *flags, "--", PY, "train.py"])
    assert len(seen) == 1 and seen[0].use_cupti is expected
    assert launch.TraceRequest(command=("x",), output=tmp_path / "t.json").use_cupti is True
