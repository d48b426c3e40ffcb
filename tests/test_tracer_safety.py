"""Tracing never breaks the user's training: faults inside daydream are logged once and tracing stops.

Faults exercised: an exception in a module hook and at an iteration boundary,
a full disk (``OSError(ENOSPC)`` at the write), SIGINT and SIGTERM during
``daydream trace`` (real subprocesses), CUPTI buffer overflow (synthetic
records), interpreter exit after the CUPTI extension was used.
"""
from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import REPO, TRAIN_SCRIPT, daydream_cmd, run_daydream

torch = pytest.importorskip("torch")

import daydream  # noqa: E402
from daydream import cupti  # noqa: E402
from daydream.collect import hooks as hooks_mod  # noqa: E402
from daydream.collect import tracer as tracer_mod  # noqa: E402

PY = sys.executable
#: makes every fsync fail as on a full disk; put before TRAIN_SCRIPT
FULL_DISK = ("import errno, os\n"
             "def _full(fd):\n"
             "    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))\n"
             "os.fsync = _full\n")


def _train(steps=6):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = model(torch.ones(4, 8)).sum()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def _daydream_lines(err: str) -> list:
    return [ln for ln in err.splitlines() if ln.startswith("daydream:")]


@pytest.mark.parametrize("hook", ["_pre_hook", "_post_hook"])
def test_exception_in_a_module_hook_does_not_break_training(tmp_path, capfd, monkeypatch, hook):
    def broken(self, *args):
        raise RuntimeError("hook bug")

    monkeypatch.setattr(hooks_mod.LayerMarkers, hook, broken)
    expected = _train()
    out = tmp_path / "t.json"
    with daydream.trace(out, warmup=1, iterations=3) as session:
        got = _train()
    assert got == expected                       # the model trained exactly as without tracing
    err = capfd.readouterr().err
    lines = _daydream_lines(err)
    assert len(lines) == 1 and "tracing stopped after an error in a module hook" in lines[0], err
    assert "RuntimeError: hook bug" in lines[0] and "Traceback" not in err
    assert session.result.error and session.result.path is None
    assert not out.exists() and [p for p in os.listdir(tmp_path) if p.startswith(".")] == []
    assert daydream.collect.tracer.current_tracer() is None


def test_exception_at_an_iteration_boundary_does_not_break_training(tmp_path, capfd, monkeypatch):
    def broken(self, b):
        raise ValueError("boundary bug")

    monkeypatch.setattr(tracer_mod.Tracer, "_advance_to", broken)
    out = tmp_path / "t.json"
    with daydream.trace(out, warmup=0, iterations=2) as session:
        assert len(_train(3)) == 3
    assert session.result.error and "while starting: ValueError: boundary bug" in session.result.error
    monkeypatch.undo()
    monkeypatch.setattr(tracer_mod.Tracer, "_prepare", lambda self: (_ for _ in ()).throw(ValueError("prep bug")))
    with daydream.trace(out, warmup=2, iterations=2) as session:     # Kineto is prepared at boundary 1
        assert len(_train(5)) == 5
    lines = _daydream_lines(capfd.readouterr().err)
    assert any("at an iteration boundary: ValueError: prep bug" in ln for ln in lines)
    assert session.result.error and not out.exists()


def test_full_disk_in_process_is_one_clear_line(tmp_path, capfd, monkeypatch):
    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    out = tmp_path / "t.json"
    with daydream.trace(out, warmup=0, iterations=2) as session:
        assert len(_train(4)) == 4                # the write happens inside opt.step(): no exception there
    lines = _daydream_lines(capfd.readouterr().err)
    assert len(lines) == 1 and "could not write the trace" in lines[0] and "No space left on device" in lines[0]
    assert session.result.path is None and not out.exists()
    assert [p for p in os.listdir(tmp_path) if p.startswith(".")] == []   # no temporary file left


@pytest.mark.parametrize("status", [3])   # (status 0 gives 2: same code path, one subprocess is enough)
def test_full_disk_under_daydream_trace_keeps_the_script_running(tmp_path, status):
    script = tmp_path / "train.py"
    script.write_text(FULL_DISK + TRAIN_SCRIPT)
    out = tmp_path / "out.json"
    res = run_daydream("trace", "-o", str(out), "--warmup", "0", "-n", "2", "--", PY, str(script), "5", str(status))
    assert "script done" in res.stdout and "step 5" in res.stdout    # the script ran to its end
    assert res.returncode == (status or 2), res.stderr               # its own status; 2 if it succeeded
    assert "could not write the trace" in res.stderr and "No space left on device" in res.stderr
    assert "Traceback" not in res.stderr
    assert not out.exists() and [p for p in os.listdir(tmp_path) if p.startswith(".")] == []


def _start_forever(tmp_path, out):
    script = tmp_path / "train.py"
    script.write_text(TRAIN_SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen(
        daydream_cmd("trace", "-o", str(out), "--warmup", "0", "-n", "1000", "--", PY, str(script), "-1"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _valid_or_absent(tmp_path, out):
    assert [p for p in os.listdir(tmp_path) if p.startswith(".")] == []     # no partial temp file
    if not out.exists():
        return None
    from daydream.loader import load_trace

    doc = json.loads(out.read_text())                                      # complete JSON
    trace = load_trace(out)
    assert trace.ranks[0].n_iterations == doc["daydream"]["iterations"]["recorded"]
    return doc


# SIGINT after 6 steps: tests/test_collect_cli.py::test_sigint_leaves_valid_trace_or_none
@pytest.mark.parametrize("sig,after_steps", [(signal.SIGTERM, 6)])
def test_signals_leave_a_valid_trace_or_none(tmp_path, sig, after_steps):
    out = tmp_path / "out.json"
    proc = _start_forever(tmp_path, out)
    try:
        deadline = time.time() + 90
        for line in proc.stdout:
            if (after_steps == 0 or line.startswith(f"step {after_steps}")) or time.time() > deadline:
                break
        os.killpg(proc.pid, sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode != 0
    if sig == signal.SIGTERM:
        assert proc.returncode == 128 + signal.SIGTERM and "Traceback" not in err
    doc = _valid_or_absent(tmp_path, out)
    if after_steps >= 6:
        assert doc is not None, err                       # finished iterations are kept
        assert doc["daydream"]["iterations"]["complete"] is False


def test_cupti_overflow_is_counted_in_metadata_and_reported(tmp_path, capfd, monkeypatch):
    """Dropped CUPTI records (buffers full) reach the trace metadata, a warning, and the loader's repairs."""
    class Overflowing:
        dropped_records = 0

        def start(self):
            pass

        def stop(self):
            self.dropped_records = 1234

        def chrome_events(self, doc):
            return []

    from daydream.collect import activities

    real_plan = activities.plan_activities

    def plan(requested, use_cupti=False):
        p, _ = real_plan(requested, False)
        return p, Overflowing()

    monkeypatch.setattr(tracer_mod, "plan_activities", plan)
    out = tmp_path / "t.json"
    with daydream.trace(out, warmup=0, iterations=2, activities="cpu"):
        _train(4)
    assert "1234 GPU activity records were dropped" in capfd.readouterr().err
    meta = json.loads(out.read_text())["daydream"]["activities"]
    assert meta["dropped_records"] == 1234
    from daydream.loader import load_trace

    r = load_trace(out).ranks[0]
    assert r.repairs["GPU activity records dropped while tracing (CUPTI buffers full; missing)"] == 1234


def test_cupti_collector_reports_the_decoders_drop_count():
    from daydream import cupti

    ext, why = cupti.load_extension()
    if ext is None:
        pytest.skip(f"daydream._cupti not available: {why}")
    buf = ext.SyntheticBuffer()
    for i in range(5):
        buf.add_kernel(start_ns=i, end_ns=i + 1, correlation_id=i + 1, name="k")
    col = cupti.CuptiKernelCollector()
    assert col.dropped_records == 0
    col.records = cupti.decode(buf, max_rows=2)
    assert col.dropped_records == 3 and len(col.chrome_events()) == 2


def test_interpreter_exit_after_the_extension_never_hangs():
    """Import, a failed start from the main thread and from another thread, then exit (atexit shutdown)."""
    code = textwrap.dedent("""
        import threading
        from daydream import cupti
        try:
            cupti.CuptiTracer().start()
        except cupti.CuptiError:
            pass
        def other():
            try:
                cupti.make_collector().start()
            except Exception:
                pass
        t = threading.Thread(target=other); t.start(); t.join()
        print('exited')
    """)
    res = subprocess.run([PY, "-c", code], capture_output=True,
                         text=True, timeout=60, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert res.returncode == 0 and res.stdout.strip() == "exited", res.stderr


@pytest.mark.skipif(cupti.available()[0], reason="CUPTI tracing is usable here")
def test_cupti_requested_without_gpu_traces_cpu_with_a_note(tmp_path):
    """``--cupti`` / ``use_cupti=True`` where CUPTI cannot run: the trace is written and says why."""
    out = tmp_path / "o.json"
    with daydream.trace(out, warmup=0, iterations=2, use_cupti=True):
        _train(4)
    acts = json.loads(out.read_text())["daydream"]["activities"]
    assert acts["notes"] and acts.get("dropped_records", 0) == 0


def test_a_hook_failure_inside_backward_is_told_after_it():
    """Told inside backward, the owner would stop the profiler there, and the autograd engine would
    switch it back on when it restores the thread's state: the failure is told afterwards."""
    from torch.profiler import ProfilerActivity, profile

    m = hooks_mod.LayerMarkers()
    prof = profile(activities=[ProfilerActivity.CPU])
    prof.start()
    told = []
    m.on_error = lambda exc: (told.append(exc), prof.stop())

    def broken(grads):
        raise RuntimeError("hook bug")

    x = torch.ones(3, requires_grad=True)
    y = (x * 2).sin()
    y.grad_fn.register_prehook(m._guard(broken))
    y.sum().backward()                       # the model never sees the failure
    assert m.failed and told == [] and x.grad is not None
    m.report_pending()
    assert [str(e) for e in told] == ["hook bug"]
    assert not torch._C._autograd._profiler_enabled()     # stopped for good
    m.report_pending()
    assert len(told) == 1
