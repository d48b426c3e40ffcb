"""Taking turns: traced processes that run their iterations alternately.

Two runs compared on a shared or virtual machine see it at different
speeds: on the 2-core VM this project is developed on, a fixed piece of work
runs 10-20 % faster or slower from one second to the next
(``benchmarks/machine_noise.py``), so a baseline and a variant traced one
after the other differ by more than most optimizations change.  Run
together *in turns* instead (the baseline's iteration, then the variant's,
then the baseline's ...), both see the same machine within a fraction of a
second of each other, and slow spells hit both alike.

A :class:`TurnTaker` (in the process that launches the runs) hands out the
turns; each traced process is a participant (:class:`Turns`, used by the
tracer at every iteration boundary while it records).  Participants are
grouped: every process of one group (the ranks of one data-parallel job)
runs at the same time; groups alternate.  The waits happen between two
``ProfilerStep`` ranges, inside a ``daydream: paused`` range that the
loader cuts out of the timeline (:mod:`daydream.loader.pauses`), so
iteration times and replays exclude them.

Turns alone do not make two processes see the same machine: each process
tends to be woken on the core it last ran on, and this VM's two cores differ
in speed by 5-20 % for seconds at a time.  With ``DAYDREAM_TURNS_CPU`` set,
every participant runs its recording thread on that one core while it takes
turns (the waits cost nothing: one process runs at a time).  In an A/A test
(the validation MLP traced twice in turns, 6 rounds, 20 iterations), the
spread of the two runs' ratio was 11-12 % with 0.1 s turns on free cores,
4-6 % pinned, 1.5 % pinned with 0.02 s turns
(``benchmarks/README.md``, issue 4, Session 19: "Turns on one core";
``python benchmarks/turns_aa.py``).

The rendezvous is a directory of named pipes named by ``DAYDREAM_TURNS``
(``DAYDREAM_TURNS_GROUP`` names the participant's group).  It is POSIX
only, stdlib only, and never blocks training for good: a participant that
hears nothing for ``timeout_s`` goes on without turns.

>>> TurnTaker.__name__
'TurnTaker'
"""
from __future__ import annotations

import os
import select
import threading
import time
from pathlib import Path

from ..loader.pauses import PAUSE_NAME

__all__ = ["ENV_CPU", "ENV_DIR", "ENV_GROUP", "PAUSE_RANGE", "Turns", "TurnTaker", "shared_core"]

#: Environment variable naming the rendezvous directory.
ENV_DIR = "DAYDREAM_TURNS"
#: Environment variable naming the participant's group.
ENV_GROUP = "DAYDREAM_TURNS_GROUP"
#: Environment variable naming the core every participant records on (optional).
ENV_CPU = "DAYDREAM_TURNS_CPU"

#: Name of the range that covers a wait for the turn (cut out by the loader).
PAUSE_RANGE = PAUSE_NAME
_CTL = "ctl"
#: Waits longer than this end the turns (a peer that hangs; torch.compile's
#: first compilation during another process's warm-up takes tens of seconds).
TIMEOUT_S = 300.0


def _read_ready(fd: int, timeout_s: float) -> bytes:
    """Bytes from ``fd`` once readable, or b"" after ``timeout_s``."""
    ready, _, _ = select.select([fd], [], [], timeout_s)
    return os.read(fd, 4096) if ready else b""


def shared_core() -> int | None:
    """The core participants share (:data:`ENV_CPU`): the highest one this process may use,
    away from core 0, which takes most interrupts; None with one core or no affinity control.

    >>> shared_core() is None or shared_core() in os.sched_getaffinity(0)
    True
    """
    if not hasattr(os, "sched_getaffinity"):
        return None
    cores = os.sched_getaffinity(0)
    return max(cores) if len(cores) > 1 else None


class _Pin:
    """The calling thread held on one core, and given its cores back; a process forked
    meanwhile (a DataLoader worker) gets the cores back at once."""

    _forks_hooked = False
    _saved = None    # cores before pinning, while pinned

    @classmethod
    def hold(cls, cpu: int) -> None:
        try:
            saved = os.sched_getaffinity(0)
            os.sched_setaffinity(0, {cpu})   # 0: the calling thread only (Linux)
        except (AttributeError, OSError, ValueError):
            return
        _Pin._saved = saved
        if not cls._forks_hooked:
            os.register_at_fork(after_in_child=cls.release)
            _Pin._forks_hooked = True

    @classmethod
    def release(cls) -> None:
        saved, _Pin._saved = cls._saved, None
        if saved is not None:
            try:
                os.sched_setaffinity(0, saved)
            except OSError:
                pass


def _alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except (OSError, ValueError):
        return False
    return True


class Turns:
    """A participant: wait for the turn before each recorded iteration.

    Parameters
    ----------
    directory : path
        The :class:`TurnTaker`'s rendezvous directory.
    group : str
        Processes of one group run together.
    timeout_s : float
        Give up on turns (run freely) after this long without a turn.
    cpu : int, optional
        Run the thread that takes turns on this core from joining until
        :meth:`finish` (processes forked meanwhile get every core back).

    A turn lasts as many iterations as the :class:`TurnTaker` says with it
    (the same for every process of the group, so that ranks which
    synchronise with each other stop at the same boundary).
    """

    def __init__(self, directory, group: str, timeout_s: float = TIMEOUT_S, cpu: int | None = None):
        self.dir = Path(directory)
        self.group = group
        self.timeout_s = timeout_s
        self.cpu = cpu
        self._left = 0
        self.active = False
        self._ctl = self._go = None

    @classmethod
    def from_env(cls) -> "Turns | None":
        """The participant the environment asks for (``DAYDREAM_TURNS``), or None."""
        d, cpu = os.environ.get(ENV_DIR), os.environ.get(ENV_CPU, "")
        return cls(d, os.environ.get(ENV_GROUP, "default"), cpu=int(cpu) if cpu.isdigit() else None) if d else None

    def due(self) -> bool:
        """Called at each iteration boundary: whether the turn ends here."""
        self._left -= 1
        return self.active and self._left <= 0

    def _say(self, word: str) -> None:
        os.write(self._ctl, f"{word} {self.group} {os.getpid()}\n".encode())

    def wait(self) -> bool:
        """End this process's turn (if it held one) and wait for the next.

        Returns True when the turn came, False when turns are off (never
        joined, or given up after a timeout or an error).
        """
        try:
            if self._ctl is None:
                return self._join()
            if not self.active:
                return False
            self._say("done")
            return self._await_go()
        except OSError:
            self.active = False
            _Pin.release()
            return False

    def _join(self) -> bool:
        go = self.dir / f"go.{os.getpid()}"
        os.mkfifo(go)
        self._go = os.open(go, os.O_RDWR | os.O_NONBLOCK)
        self._ctl = os.open(self.dir / _CTL, os.O_WRONLY | os.O_NONBLOCK)
        self.active = True
        if self.cpu is not None:
            _Pin.hold(self.cpu)
        self._say("ready")
        return self._await_go()

    def _await_go(self) -> bool:
        msg = _read_ready(self._go, self.timeout_s)
        self.active = bool(msg)
        if not self.active:
            _Pin.release()            # running freely: on every core again
        self._left = int(msg[1:]) if msg[1:].isdigit() else 1
        return self.active

    def finish(self) -> None:
        """Out of iterations: wait, idle, until every participant is.

        Writing a trace and exiting take a core for a second or more; done
        while another participant still records, they would slow its last
        iterations (a 2-rank job on 2 cores lost a third of its speed).
        """
        if self._ctl is None or not self.active:
            return
        try:
            self._say("last")
            _read_ready(self._go, self.timeout_s)
        except OSError:
            pass
        self.active = False
        _Pin.release()   # the trace is written on every core

    def leave(self) -> None:
        """Give the turn back for good (after the trace is written)."""
        if self._ctl is None:
            return
        try:
            if self.active:
                self._say("bye")
        except OSError:
            pass
        for fd in (self._ctl, self._go):
            try:
                os.close(fd)
            except OSError:
                pass
        self._ctl = self._go = None
        self.active = False
        _Pin.release()


class TurnTaker:
    """Hand out turns to groups of participants, alternating in a fixed order.

    Parameters
    ----------
    directory : path
        An empty directory for the named pipes (created if missing).
    groups : dict of str to int
        Group name -> number of processes in it, in turn order.
    quantum_s : float
        A turn lasts whole iterations, as many as make about this long
        (estimated from the group's last turn; the first turn is one
        iteration).  A process that comes back to a core after another
        ran there starts on cold caches; longer turns make that a smaller
        share of its time, shorter ones follow the machine's drift closer.
    timeout_s : float
        Stop handing out turns when nothing is heard for this long.  A
        process that dies counts as gone.
    cpu : int, optional
        The core every participant records on (:data:`ENV_CPU`); None: wherever
        the system puts them.  Only for groups of one process each: the
        ranks of a group run at the same time.

    Use as a context manager around launching the participants, with
    ``DAYDREAM_TURNS=<directory>`` and ``DAYDREAM_TURNS_GROUP=<name>`` in
    their environment (:meth:`env`).  Turns begin once every process of
    every group is ready; a group whose processes all left is skipped.
    Processes out of iterations (``last``) wait until all are, then all are
    released together.
    """

    def __init__(self, directory, groups: dict, quantum_s: float = 0.0, timeout_s: float = TIMEOUT_S,
                 cpu: int | None = None):
        self.dir = Path(directory)
        self.cpu = cpu
        self.groups = dict(groups)
        self.quantum_s = quantum_s
        self.timeout_s = timeout_s
        self.turns_given = 0
        self._stop = threading.Event()
        self._thread = None

    def env(self, group: str) -> dict:
        """Environment entries that make a traced process a participant of ``group``."""
        env = {ENV_DIR: str(self.dir), ENV_GROUP: group}
        return env if self.cpu is None else {**env, ENV_CPU: str(self.cpu)}

    def __enter__(self) -> "TurnTaker":
        self.dir.mkdir(parents=True, exist_ok=True)
        ctl = self.dir / _CTL
        if not ctl.exists():
            os.mkfifo(ctl)
        self._fd = os.open(ctl, os.O_RDWR | os.O_NONBLOCK)
        self._thread = threading.Thread(target=self._run, name="daydream-turns", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        os.close(self._fd)

    # -- the hand-out loop ----------------------------------------------------
    def _messages(self, buf: bytearray):
        """Complete lines received so far: (word, group, pid)."""
        data = _read_ready(self._fd, 0.2)
        buf.extend(data)
        *lines, rest = bytes(buf).split(b"\n")
        buf[:] = rest
        return [tuple(ln.decode().split()) for ln in lines if ln.count(b" ") == 2]

    def _run(self) -> None:
        members = {g: set() for g in self.groups}     # ready and not left
        left = {g: 0 for g in self.groups}
        running: set = set()                          # pids in their turn
        finished: set = set()                         # out of iterations, held until all are
        order = list(self.groups)
        current = -1
        plan = {g: [1, 0.0] for g in self.groups}    # iterations per turn, when the turn began
        buf = bytearray()
        heard = time.monotonic()
        started = False
        while not self._stop.is_set():
            msgs = self._messages(buf)
            if msgs:
                heard = time.monotonic()
            elif time.monotonic() - heard > self.timeout_s:
                self._release([*members.values(), finished])
                return
            msgs += [("bye", g, pid) for g, pids in members.items() for pid in pids if not _alive(pid)]
            for word, group, pid in msgs:
                if group not in members:
                    continue
                if word == "ready":
                    members[group].add(pid)
                elif word == "done":
                    running.discard(pid)
                elif word in ("bye", "last") and pid in members[group]:
                    members[group].discard(pid)
                    running.discard(pid)
                    left[group] += 1
                    if word == "last":
                        finished.add(pid)
            if not started:
                started = all(len(members[g]) + left[g] >= n for g, n in self.groups.items())
            if not started or running:
                continue
            live = [i for i, g in enumerate(order) if members[order[i]]]
            if not live:
                if all(left[g] >= n for g, n in self.groups.items()):
                    self._release([finished])
                    return
                continue
            if current >= 0 and plan[order[current]][1]:
                self._replan(plan[order[current]])
            current = next((i for i in live if i > current), live[0])
            n = plan[order[current]]
            n[1] = time.monotonic()
            for pid in members[order[current]]:
                self._go(pid, n[0])
                running.add(pid)
            self.turns_given += 1

    def _replan(self, n: list) -> None:
        """Iterations for the group's next turn from how long its last one took."""
        per_iteration = (time.monotonic() - n[1]) / n[0]
        n[0] = max(1, round(self.quantum_s / per_iteration)) if per_iteration > 0 else 1

    def _go(self, pid: str, iterations: int = 1) -> None:
        try:
            fd = os.open(self.dir / f"go.{pid}", os.O_WRONLY | os.O_NONBLOCK)
            os.write(fd, b"g%d" % iterations)
            os.close(fd)
        except OSError:
            pass

    def _release(self, pid_sets) -> None:
        for pids in pid_sets:
            for pid in pids:
                self._go(pid)
