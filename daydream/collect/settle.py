"""Let other threads finish their profiler ranges before a Kineto session stops.

A collective's profiler range (``gloo:all_reduce``) is opened on the
training thread and closed on the process group's worker thread, *after*
the worker has completed the work's future (``ProcessGroupGloo``'s
``finishWorkGloo``: ``markCompleted`` first, ``finish()`` with the range's
end second).  DDP waits on that future, so the training thread can be
running again, and reach an iteration boundary that stops the session,
while the worker has yet to close the range.  The late end then writes its
time into the stopped session's records, which the session's stop may have
freed: heap corruption (``malloc(): unsorted double linked list corrupted``
in a 2-rank traced DDP run).  ``python benchmarks/late_range_end.py``
measures how often the end comes after the training thread went on.

:func:`settle_threads` closes that window: it waits, for a few milliseconds
at most, until no other thread of the process is running or waiting for a
CPU.  A worker between its future and the range's end is runnable; one that
has closed the range sleeps on its queue.
"""
from __future__ import annotations

import os
import threading
import time

__all__ = ["settle_threads", "busy_threads", "SETTLE_TIMEOUT_S"]

#: most time :func:`settle_threads` waits (a spinning thread of the program's own never settles)
SETTLE_TIMEOUT_S = 0.02
_POLL_S = 0.0002
_TASKS = "/proc/self/task"


def busy_threads(tasks_dir: str = _TASKS) -> list[int] | None:
    """Thread ids of this process, other than the caller, that are running or runnable.

    None where ``/proc`` cannot tell (not Linux).

    Examples
    --------
    >>> busy = busy_threads()
    >>> busy is None or threading.get_native_id() not in busy
    True
    """
    me = threading.get_native_id()
    try:
        tids = os.listdir(tasks_dir)
    except OSError:
        return None
    busy = []
    for tid in tids:
        if int(tid) == me:
            continue
        try:
            with open(f"{tasks_dir}/{tid}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:      # the thread exited meanwhile
            continue
        end = stat.rfind(b")")          # "pid (comm) S ...": a name may hold ")"
        if stat[end + 2:end + 3] == b"R":
            busy.append(int(tid))
    return busy


def settle_threads(timeout_s: float = SETTLE_TIMEOUT_S, tasks_dir: str = _TASKS) -> bool:
    """Wait until no other thread of this process runs (at most ``timeout_s``); True if none did.

    The caller sleeps between looks, so a runnable thread sharing its CPU
    gets to run.

    Examples
    --------
    >>> settle_threads(timeout_s=0.001) in (True, False)
    True
    """
    deadline = time.perf_counter() + timeout_s
    while True:
        busy = busy_threads(tasks_dir)
        if busy is None:
            return False
        if not busy:
            return True
        if time.perf_counter() >= deadline:
            return False
        time.sleep(_POLL_S)
