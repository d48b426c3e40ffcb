"""Taking turns (``daydream.collect.turns``) and cutting the waits out (``daydream.loader.pauses``)."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from daydream.collect.turns import TurnTaker, Turns
from daydream.loader.pauses import cut_pauses, shift_times
from daydream.model import StringTable

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="named pipes are POSIX")

_PARTICIPANT = textwrap.dedent("""
    import sys, time
    from daydream.collect.turns import Turns
    turns = Turns.from_env()
    log = open(sys.argv[1], "a")
    for k in range(int(sys.argv[2])):
        if k == 0 or turns.due():
            turns.wait()
        log.write(f"{time.monotonic_ns()} {sys.argv[3]} {k}\\n"); log.flush()
        time.sleep(0.01)
    turns.finish()
    log.write(f"{time.monotonic_ns()} {sys.argv[3]} end\\n"); log.flush()
    turns.leave()
""")


def _run_group(tmp_path, groups, iterations, quantum_s=0.0):
    log = tmp_path / "log"
    with TurnTaker(tmp_path / "turns", {g: n for g, n in groups.items()}, quantum_s) as tt:
        procs = [subprocess.Popen([sys.executable, "-c", _PARTICIPANT, str(log), str(iterations[g]), f"{g}{i}"],
                                  env={**__import__("os").environ, **tt.env(g)})
                 for g, n in groups.items() for i in range(n)]
        assert [p.wait(timeout=60) for p in procs] == [0] * len(procs)
    lines = sorted((ln.split() for ln in log.read_text().splitlines()), key=lambda x: int(x[0]))
    ends = [i for i, (_, _, k) in enumerate(lines) if k == "end"]
    assert ends == list(range(len(lines) - len(ends), len(lines)))   # nobody goes on while another records
    return [who for _, who, k in lines if k != "end"], tt


def test_groups_alternate_one_iteration_at_a_time(tmp_path):
    order, tt = _run_group(tmp_path, {"a": 1, "b": 1}, {"a": 3, "b": 3})
    assert order == ["a0", "b0", "a0", "b0", "a0", "b0"]
    assert tt.turns_given == 6


def test_the_processes_of_a_group_run_together_and_a_finished_group_is_skipped(tmp_path):
    order, _ = _run_group(tmp_path, {"a": 1, "b": 2}, {"a": 4, "b": 2})
    assert order[0] == "a0" and sorted(order[1:3]) == ["b0", "b1"] and order[3] == "a0"
    assert sorted(order[4:6]) == ["b0", "b1"] and order[6:] == ["a0", "a0"]


def test_a_longer_quantum_gives_several_iterations_per_turn(tmp_path):
    order, _ = _run_group(tmp_path, {"a": 1, "b": 1}, {"a": 8, "b": 8}, quantum_s=0.035)
    runs = [len(list(g)) for _, g in __import__("itertools").groupby(order)]
    assert runs[:2] == [1, 1] and max(runs) >= 3      # first turn one iteration, then ~35 ms of 10 ms ones


def test_a_participant_without_a_turn_taker_runs_freely(tmp_path):
    turns = Turns(tmp_path / "nobody-here", "a")
    assert turns.wait() is False and turns.active is False
    turns.leave()


def test_shift_times_cuts_spans_and_maps_inside_points_to_the_span_start():
    spans = np.array([[10, 20], [30, 35]])
    got = shift_times(np.array([0, 10, 15, 20, 25, 30, 40]), spans)
    assert got.tolist() == [0, 10, 10, 10, 15, 20, 25]


def test_cut_pauses_removes_the_ranges_and_moves_later_events_and_flows():
    names = StringTable(["ProfilerStep#1", "daydream: paused", "aten::mm"])
    cols = {"name": np.array([0, 2, 1, 0, 2]), "start_ns": np.array([0, 5, 100, 300, 310]),
            "dur_ns": np.array([100, 50, 200, 50, 20]), "kind": np.zeros(5, np.int8)}
    flows = np.array([[5, 0, 310, 0]], np.int64)
    assert cut_pauses(cols, names, flows).tolist() == [[100, 300]]
    assert cols["name"].tolist() == [0, 2, 0, 2]
    assert cols["start_ns"].tolist() == [0, 5, 100, 110] and cols["dur_ns"].tolist() == [100, 50, 50, 20]
    assert flows.tolist() == [[5, 0, 110, 0]]


def test_a_trace_without_pauses_is_untouched():
    names = StringTable(["aten::mm"])
    cols = {"name": np.array([0]), "start_ns": np.array([7]), "dur_ns": np.array([3])}
    assert len(cut_pauses(cols, names, np.zeros((0, 4), np.int64))) == 0
    assert cols["start_ns"].tolist() == [7]


def test_two_traced_workloads_in_turns_give_traces_without_the_waits(tmp_path):
    import gzip
    import json

    from daydream import validate
    from daydream.analysis import as_trace

    paths = validate.trace_in_turns([("mlp", tmp_path / "a.json.gz", (), 1),
                                     ("mlp", tmp_path / "b.json.gz", ("--optimizer", "adam"), 1)],
                                    iterations=4, quantum_s=0.0)
    for p in paths:
        raw = json.loads(gzip.decompress(p.read_bytes()))
        pauses = [e for e in raw["traceEvents"] if e.get("name") == "daydream: paused"]
        assert len(pauses) == 3                           # between the 4 recorded iterations
        rank = as_trace([p]).ranks[0]
        assert rank.n_iterations == 4 and "daydream: paused" not in {rank.names[i] for i in rank.cols["name"]}
        steps = sorted(e["ts"] for e in raw["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#"))
        waited_us = sum(e["dur"] for e in pauses)
        cut_us = (rank.boundaries_ns[-2] - rank.boundaries_ns[0]) / 1e3     # first to last iteration start
        assert abs(cut_us - (steps[-1] - steps[0] - waited_us)) < 5


_PINNED = textwrap.dedent("""
    import os, sys
    from daydream.collect.turns import Turns
    turns = Turns.from_env()
    before = sorted(os.sched_getaffinity(0))
    turns.wait()
    during = sorted(os.sched_getaffinity(0))
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                       # a DataLoader worker started during the turn
        os.write(w, repr(sorted(os.sched_getaffinity(0))).encode())
        os._exit(0)
    os.waitpid(pid, 0)
    child = os.read(r, 4096).decode()
    turns.finish()
    after = sorted(os.sched_getaffinity(0))
    turns.leave()
    print(before, during, child, after, sep="|")
""")


@pytest.mark.skipif(not hasattr(__import__("os"), "sched_getaffinity")
                    or len(__import__("os").sched_getaffinity(0)) < 2, reason="needs two cores")
def test_participants_record_on_the_shared_core_and_what_they_fork_keeps_every_core(tmp_path):
    import os

    from daydream.collect.turns import shared_core

    cpu = shared_core()
    cores = sorted(os.sched_getaffinity(0))
    with TurnTaker(tmp_path / "turns", {"a": 1}, cpu=cpu) as tt:
        out = subprocess.run([sys.executable, "-c", _PINNED], env={**os.environ, **tt.env("a")},
                             capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    before, during, child, after = out.stdout.strip().split("|")
    assert cpu == max(cores) != min(cores)
    assert eval(before) == cores and eval(during) == [cpu]
    assert eval(child) == cores and eval(after) == cores


def test_a_turn_taker_without_a_core_leaves_the_environment_without_one(tmp_path):
    from daydream.collect.turns import ENV_CPU

    assert ENV_CPU not in TurnTaker(tmp_path, {"a": 1}).env("a")
    assert TurnTaker(tmp_path, {"a": 1}, cpu=1).env("a")[ENV_CPU] == "1"


@pytest.mark.skipif(not hasattr(__import__("os"), "sched_getaffinity")
                    or len(__import__("os").sched_getaffinity(0)) < 2, reason="needs two cores")
def test_a_participant_that_gives_up_on_turns_runs_on_every_core_again(tmp_path):
    import os

    script = textwrap.dedent("""
        import os
        from daydream.collect.turns import Turns
        turns = Turns(os.environ["DAYDREAM_TURNS"], "a", timeout_s=0.3, cpu=max(os.sched_getaffinity(0)))
        before = os.sched_getaffinity(0)
        print(turns.wait(), os.sched_getaffinity(0) == before)
        turns.leave()
    """)
    with TurnTaker(tmp_path / "turns", {"a": 1, "b": 1}) as tt:    # "b" never comes
        out = subprocess.run([sys.executable, "-c", script], env={**os.environ, **tt.env("a")},
                             capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True"]


def test_a_pipeline_job_joins_the_turns_at_its_first_measured_step_and_waits_when_due():
    from daydream.workloads.pipeline import _take_turn

    class Fake:
        def __init__(self):
            self.log, self.left = [], 0

        def due(self):
            self.left -= 1
            return self.left <= 0

        def wait(self):
            self.log.append(step)
            self.left = 2                      # turns of two steps

    fake = Fake()
    for step in range(8):
        _take_turn(fake, step, warmup=3)
    assert fake.log == [3, 5, 7]               # warm-up free; joined at step 3; every second step after
    _take_turn(None, 0, 0)                     # no turns: nothing to do


@pytest.mark.skipif(not hasattr(__import__("os"), "sched_getaffinity"), reason="needs CPU affinity")
def test_a_traced_baseline_and_an_untraced_pipeline_job_take_turns(tmp_path):
    """The job's measured steps alternate with the trace's iterations: the trace holds a pause
    between each two recorded iterations, and the job reports its steps."""
    import gzip
    import json

    from daydream import validate
    from daydream.validation.pipeline import TINY_ARGS

    cmd = [sys.executable, "-m", "daydream.workloads.pipeline", "--schedule", "gpipe", "--nproc", "1",
           "--microbatches", "2", "--steps", "6", "--warmup", "2", *TINY_ARGS]
    path, (code, out, err) = validate.trace_beside(("mlp", tmp_path / "base.json.gz", TINY_ARGS, 1), cmd,
                                                   iterations=4, quantum_s=0.0)     # turns of one iteration
    assert code == 0, err
    summary = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    assert len(summary["step_ms"]) == 6 and summary["world"] == 1
    raw = json.loads(gzip.decompress(path.read_bytes()))
    assert sum(e.get("name") == "daydream: paused" for e in raw["traceEvents"]) == 3
