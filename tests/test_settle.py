"""settle_threads: a profiler session stops only once other threads have closed their ranges."""
from __future__ import annotations

import threading

import pytest

from daydream.collect import settle, tracer as tracer_mod
from daydream.collect.settle import busy_threads, settle_threads


def _task(tasks, tid: int, state: str, comm: str = "pt_worker") -> None:
    d = tasks / str(tid)
    d.mkdir(exist_ok=True)
    # a thread name may hold spaces and parentheses: the state follows the last ")"
    (d / "stat").write_text(f"{tid} ({comm}) {state} 1 2 3 4\n")


def test_busy_threads_reads_the_state_after_the_last_parenthesis(tmp_path):
    me = threading.get_native_id()
    _task(tmp_path, me, "R")              # the caller never counts
    _task(tmp_path, 101, "R", comm="gloo (io) R")
    _task(tmp_path, 102, "S", comm="odd) R (name")
    _task(tmp_path, 103, "D")
    assert busy_threads(str(tmp_path)) == [101]


def test_a_thread_that_exits_while_being_read_is_skipped(tmp_path):
    (tmp_path / "104").mkdir()            # its stat already gone
    _task(tmp_path, 105, "R")
    assert busy_threads(str(tmp_path)) == [105]


def test_no_proc_means_unknown(tmp_path):
    assert busy_threads(str(tmp_path / "absent")) is None
    assert settle_threads(timeout_s=0.0, tasks_dir=str(tmp_path / "absent")) is False


def test_settles_once_the_busy_thread_sleeps(tmp_path, monkeypatch):
    _task(tmp_path, 201, "R")
    looks = []

    def sleep(_s):
        looks.append(1)
        if len(looks) == 3:               # the worker closed its range and went to sleep
            _task(tmp_path, 201, "S")

    monkeypatch.setattr(settle.time, "sleep", sleep)
    assert settle_threads(timeout_s=10.0, tasks_dir=str(tmp_path)) is True
    assert len(looks) == 3


def test_gives_up_after_the_timeout(tmp_path):
    _task(tmp_path, 301, "R")             # a thread of the program's own that never stops
    assert settle_threads(timeout_s=0.003, tasks_dir=str(tmp_path)) is False


def test_real_sleeping_threads_are_settled():
    gate = threading.Event()
    t = threading.Thread(target=gate.wait)
    t.start()
    try:
        assert settle_threads(timeout_s=1.0) is True
    finally:
        gate.set()
        t.join()


@pytest.mark.parametrize("settled", [True, False])
def test_the_tracer_notes_a_session_stopped_unsettled(monkeypatch, settled):
    monkeypatch.setattr(tracer_mod, "settle_threads", lambda: settled)
    stops = []

    class Prof:
        def stop_trace(self):
            stops.append(1)

    t = tracer_mod.Tracer(tracer_mod.TraceOptions(path="unused.json", iterations=1))
    t._stop_session(Prof())
    t._stop_session(Prof())
    assert stops == [1, 1]
    assert len([n for n in t._notes if "still ran" in n]) == (0 if settled else 1)
