"""A traced iteration's op sequence beside a twin process on another core (co-run).

Processes of one job on one host's cores share its last-level cache and memory
bandwidth.  :func:`sequence_corun` replays a sequence (as
:func:`daydream.opseq.sequence_ratios` builds it) pinned to one core while a twin
process pinned to another replays the same, and gives how much the twin slows it:
the median over rounds of alone / beside, the rounds spread over seconds
(:func:`corun_ratios`, :func:`pooled_rate`).  Needs torch.
"""
from __future__ import annotations

import json
import math
import statistics
import time

from .heapmode import STEADY_MALLOC
from .opseq import SEQUENCE_MAX_BYTES, _operand_bytes, _pass_ns, _pass_times, _sequence_calls

__all__ = ["sequence_corun", "corun_rounds", "corun_ratios", "pooled_rate", "CORUN_ROUNDS", "CORUN_SIDE_S",
           "CORUN_SPAN_S"]


def _twin_main() -> None:
    """The twin of :func:`sequence_corun`: read a sequence (JSON) on stdin, say ``ready``, replay it for ever."""
    import os
    import sys

    import torch

    torch.set_num_threads(int(os.environ.get("DAYDREAM_TWIN_THREADS", "1")))
    calls = _sequence_calls(json.loads(sys.stdin.readline()))
    _pass_ns(calls)
    print("ready", flush=True)
    while True:
        _pass_ns(calls)


#: Rounds of :func:`sequence_corun` (each: passes with the twin stopped, then running).
CORUN_ROUNDS = 9
#: Least time (s) each side of a round is timed for: passes of a short sequence add up to it.
CORUN_SIDE_S = 0.03
#: Least time (s) the rounds of a co-run measurement are spread over: this VM has spells of a
#: second or more in which two busy cores run at 0.55-0.7x each; rounds back to back (about
#: 0.6 s in all) fell inside one about one time in five, and its median read the spell.
CORUN_SPAN_S = 4.0


def _wait_stopped(pid: int, timeout_s: float = 0.05) -> None:
    """Wait (up to ``timeout_s``) until Linux reports ``pid`` stopped: a signal is delivered
    asynchronously, and the other process would otherwise run on into the 'alone' side."""
    end = time.perf_counter() + timeout_s
    while time.perf_counter() < end:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("T", "t"):
                    return
        except (OSError, IndexError):
            return
        time.sleep(0.0002)


def corun_ratios(pid: int, alone, beside, rounds: int = CORUN_ROUNDS, span_s: float = CORUN_SPAN_S,
                 warm=None) -> list:
    """Per round, ``alone() / beside()``: ``alone`` timed with process ``pid`` stopped
    (``SIGSTOP``), ``beside`` with it running.

    The rounds are spread over at least ``span_s`` seconds (the machine idle in between, ``pid``
    stopped), so that a slow spell of the machine falls on a minority of them.  ``alone`` and
    ``beside`` return a time (any unit, the same for both).

    ``warm``, where given, is called untimed before each side: this process has slept since
    the last round, and its first work after an idle gap runs slow.  Unwarmed, the 'alone'
    passes (the first after the gap) took the validation MLP's data-loader ops 2-3.5x and its
    forward ops 1.04-1.25x their time beside the twin, so the phases at a pass's start read
    faster beside the twin than alone, and their rate 1 (session 73: forward 1.00 in every
    sitting unwarmed, 0.91-0.96 warmed, where a peer really computing beside the Hydra
    runtime's shards cost them 0.945).
    """
    import os
    import signal

    gap_s = span_s / max(rounds, 1)
    ratios = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        os.kill(pid, signal.SIGSTOP)
        _wait_stopped(pid)
        if warm:
            warm()
        a = alone()
        os.kill(pid, signal.SIGCONT)
        if warm:
            warm()                          # and ``pid`` back in its loop
        b = beside()
        ratios.append(a / (b.clip(min=1) if hasattr(b, "clip") else max(b, 1)))
        rest = gap_s - (time.perf_counter() - t0)
        if rest > 0:
            os.kill(pid, signal.SIGSTOP)
            time.sleep(rest)
            os.kill(pid, signal.SIGCONT)
    return ratios


def pooled_rate(*sittings) -> float:
    """The median of every round's ratio of ``sittings`` (lists of :func:`corun_ratios`), at most 1.

    >>> pooled_rate([0.6, 0.61, 0.6], [0.99, 1.0, 0.98], [1.02, 0.97, 0.99])
    0.98
    """
    return min(statistics.median([r for s in sittings for r in s]), 1.0)


def corun_rounds(pid: int, alone, beside, rounds: int = CORUN_ROUNDS, span_s: float = CORUN_SPAN_S,
                 warm=None) -> float:
    """Median over ``rounds`` of ``alone() / beside()`` (:func:`corun_ratios`), at most 1."""
    return pooled_rate(corun_ratios(pid, alone, beside, rounds, span_s, warm))


def sequence_corun(sequence, threads: int | None = None, rounds: int = CORUN_ROUNDS,
                   labels=None) -> float | dict | None:
    """Speed of a traced iteration's op sequence beside a twin replaying it on another core, relative to alone.

    Processes of one job on one host's cores (pipeline stages, data-parallel
    workers) share its last-level cache and memory bandwidth; a job that
    streams weights slows down beside another that does the same, which a
    probe of other work does not show (a 1-thread matmul beside a matmul
    read 0.99 here while the pipeline validation's micro-batch sequence ran
    at 0.81-0.93 beside its twin).  This process, pinned to one core,
    replays ``sequence`` (as :func:`daydream.opseq.sequence_ratios` builds it); a twin
    process pinned to another core replays the same.  Each round times
    passes for at least :data:`CORUN_SIDE_S` with the twin stopped
    (``SIGSTOP``), then as many with it running, each side after an untimed
    pass (:func:`corun_ratios`' ``warm``); the result is the median
    over rounds of alone / beside, at most 1, the rounds spread over
    :data:`CORUN_SPAN_S` (:func:`corun_rounds`).  (Three passes of the bundled
    MLP's 2 ms sequence per side gave rounds from 0.66 to 1.38, and once a
    median of 0.56.)  ``None`` where this process has a single core, the
    operands exceed :data:`daydream.opseq.SEQUENCE_MAX_BYTES`, or the twin does not start.

    ``labels``: one label per element of ``sequence`` (its training phase, say); then the
    result is ``{label: rate}``, each over its label's calls timed within the same passes,
    and ``{None: rate}`` over the whole pass: memory-bound work (an optimizer step's
    element-wise updates) can slow beside a twin more than matmuls do.
    """
    import os
    import subprocess
    import sys

    import torch

    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2 or not sequence or 2 * sum(_operand_bytes(s) for s in sequence) > SEQUENCE_MAX_BYTES:
        return None
    if threads:
        torch.set_num_threads(threads)
    calls, kept = _sequence_calls(sequence, kept=True)
    env = {**os.environ, **STEADY_MALLOC, "DAYDREAM_TWIN_THREADS": str(torch.get_num_threads())}
    twin = subprocess.Popen([sys.executable, "-c", "from daydream.opcorun import _twin_main; _twin_main()"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=env)
    try:
        os.sched_setaffinity(twin.pid, {cores[1]})
        os.sched_setaffinity(0, {cores[0]})
        twin.stdin.write(json.dumps(list(sequence)) + "\n")
        twin.stdin.flush()
        if twin.stdout.readline().strip() != "ready":
            return None
        passes = math.ceil(CORUN_SIDE_S * 1e9 / max(_pass_ns(calls), 1))
        index, names = _label_slots([labels[i] for i in kept]) if labels is not None else (None, [None])

        def side():
            if index is None:
                return sum(_pass_ns(calls) for _ in range(passes))
            return sum(_labelled_pass_ns(calls, index, len(names)) for _ in range(passes))

        ratios = corun_ratios(twin.pid, side, side, rounds, warm=lambda: _pass_ns(calls))
        if index is None:
            return pooled_rate(ratios)
        return {name: pooled_rate([float(r[i]) for r in ratios]) for i, name in enumerate(names)}
    except (OSError, BrokenPipeError):
        return None
    finally:
        os.sched_setaffinity(0, cores)
        twin.kill()
        twin.wait()


def _label_slots(labels) -> tuple:
    """``(slot of each call, names)``: each distinct label a slot in first-seen order, and a last
    slot, ``None``, for the whole pass.

    >>> _label_slots(["fwd", "bwd", "fwd"])
    ([0, 1, 0], ['fwd', 'bwd', None])
    """
    names = list(dict.fromkeys(labels))
    return [names.index(x) for x in labels], [*names, None]


def _labelled_pass_ns(calls, index, n: int):
    """One pass of ``calls`` (:func:`_pass_times`): an array of the ns of each slot's calls
    (:func:`_label_slots`) and, in the last, of them all."""
    import numpy as np

    row = np.bincount(index, weights=_pass_times(calls), minlength=n).astype(np.float64)
    row[-1] = row[:-1].sum()
    return row
