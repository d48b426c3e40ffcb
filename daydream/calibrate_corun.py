"""Calibration of processes that share a CPU host without talking (part of ``daydream calibrate``).

A matmul's throughput beside a second busy process (co-run), and how far
processes started together differ in speed for a whole run (process spread).
"""
from __future__ import annotations

import os
import statistics
import time

__all__ = ["corun_factor", "corun_sitting", "process_spread", "least_disturbed", "CORUN_SHAPE", "CORUN_SITTINGS",
           "PROCESS_SPREAD_PAIRS"]


#: Co-run measurement: a matmul whose weight (4 MiB) streams from the shared cache, timed alone
#: and while a second process runs the same loop (the cores' shared caches, memory bandwidth,
#: and on a virtual machine whatever the host does with two busy virtual CPUs).
CORUN_SHAPE = (16, 1024, 1024)


def _corun_spin(ready, stop) -> None:
    """The second process of :func:`corun_factor`: the same matmul loop until told to stop."""
    import torch

    torch.set_num_threads(1)
    m, k, n = CORUN_SHAPE
    a, b = torch.randn(m, k), torch.randn(k, n)
    ready.set()
    while not stop.is_set():
        for _ in range(20):
            torch.mm(a, b)


#: Pairs of processes :func:`process_spread` starts, and the seconds each pair works together.
PROCESS_SPREAD_PAIRS, PROCESS_SPREAD_S = 6, 1.0
#: A pair is measured again (up to :data:`PROCESS_SPREAD_RETRIES` times) when a side got less
#: than this share of its core: another program ran there (in session 20 a 2-second trace
#: beside a calibration made one pair read 0.63 / 1.37, and the straggler waits it implied
#: went into every all-reduce of a tensor-parallel prediction: +80 %).
PROCESS_SPREAD_MIN_SHARE, PROCESS_SPREAD_RETRIES = 0.9, 3


def _spread_worker(core, barrier, q, seconds) -> None:
    """One process of a :func:`process_spread` pair: on ``core``, one thread, after warm-up and
    the pair's barrier, the median time of a pass (matmuls and an elementwise add, as a training
    step mixes them) over ``seconds``; put ``(ns, share)`` on ``q``, ``share`` the
    thread's CPU time over the wall time of the window (below 1 when it had to share its core)."""
    import torch

    os.sched_setaffinity(0, {core})
    torch.set_num_threads(1)
    a, b = torch.randn(64, 1024), torch.randn(1024, 1024)
    x, y = torch.randn(2 ** 20), torch.randn(2 ** 20)

    def one():
        t0 = time.perf_counter_ns()
        for _ in range(4):
            torch.mm(a, b)
            x.add_(y)
        return time.perf_counter_ns() - t0

    for _ in range(10):
        one()
    barrier.wait(60)
    got, start, cpu0 = [], time.perf_counter(), time.thread_time()
    while time.perf_counter() < start + seconds:
        got.append(one())
    share = (time.thread_time() - cpu0) / max(time.perf_counter() - start, 1e-9)
    q.put((statistics.median(got), share))


def _spread_pair(ctx, cores, seconds) -> list:
    """One pair of fresh processes on ``cores``: ``[(pass ns, core share), ...]`` per side."""
    q, barrier = ctx.Queue(), ctx.Barrier(2)
    procs = [ctx.Process(target=_spread_worker, args=(c, barrier, q, seconds)) for c in cores]
    for p in procs:
        p.start()
    try:
        return [q.get(timeout=120) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=30)


def least_disturbed(tries, min_share: float = PROCESS_SPREAD_MIN_SHARE) -> tuple:
    """``(sides, clean)``: the first try of a pair whose every side had at least ``min_share`` of
    its core, else the try whose worst side had the most; ``clean`` says which.

    >>> least_disturbed([[(10, 0.55), (12, 0.99)], [(11, 0.97), (12, 0.98)]])
    ([(11, 0.97), (12, 0.98)], True)
    >>> least_disturbed([[(10, 0.55), (12, 0.99)], [(11, 0.7), (12, 0.98)]])
    ([(11, 0.7), (12, 0.98)], False)
    """
    for sides in tries:
        if _worst_share(sides) >= min_share:
            return sides, True
    return max(tries, key=_worst_share), False


def _worst_share(sides) -> float:
    return min(share for _, share in sides)


def process_spread(pairs: int = PROCESS_SPREAD_PAIRS, seconds: float = PROCESS_SPREAD_S, warn=None,
                   min_share: float = PROCESS_SPREAD_MIN_SHARE, retries: int = PROCESS_SPREAD_RETRIES) -> tuple:
    """Per process of ``pairs`` pairs started together on the first two cores, its pass time over
    its pair's mean: how far processes of one job differ in speed for a whole run (a data-parallel
    or tensor-parallel job goes at its slowest rank's).  ``()`` on a single core.

    Each pair is two fresh processes (a process keeps its speed: the bundled CNN's ranks, started
    together, took 6-19 % apart for whole runs here, either rank the slower).  A pair where a side
    got less than ``min_share`` of its core (another program ran on it) is measured again, up to
    ``retries`` times; if every try was disturbed, the least disturbed is kept and ``warn`` (if
    given) is called with a line saying so."""
    import torch.multiprocessing as mp

    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return ()
    ctx = mp.get_context("forkserver")     # a fresh process per side, forked from a server that imported torch
    ctx.set_forkserver_preload(["torch"])
    out = []
    for i in range(pairs):
        tries = []
        for _ in range(1 + max(retries, 0)):
            tries.append(_spread_pair(ctx, cores[:2], seconds))
            if _worst_share(tries[-1]) >= min_share:
                break
        sides, clean = least_disturbed(tries, min_share)
        if not clean and warn is not None:
            warn(f"process spread: pair {i + 1} shared a core with another program in all {len(tries)} tries "
                 f"(a side got {_worst_share(sides):.0%} of its core); its figures are kept, and waits for "
                 "stragglers predicted from this profile may be too long: calibrate again on an idle machine")
        mean = sum(ns for ns, _ in sides) / len(sides)
        out += [ns / mean for ns, _ in sides]
    return tuple(out)


#: Sittings of the profile's co-run measurement, spread over a calibration (``daydream calibrate``
#: takes one before its throughput curves, one after them and one at its co-run step), and the
#: rounds and least span (s) of each.  This VM has spells of a few seconds in which two busy cores
#: run at 0.5-0.7x each (the vCPUs on one physical core's two hardware threads: core-to-core round
#: trip 62-73 ns): one sitting of 9 rounds over 4 s read 0.60 in 1 of 20 back-to-back sittings
#: (the others 0.977-1.000, 18:17-18:19 on 2026-11-28), and one calibration's read 0.46, which
#: put a tensor-parallel prediction 65 % high (validation-log.md, session 38); pooled over
#: sittings minutes apart, a spell moves a minority of the rounds.
CORUN_SITTINGS, CORUN_SITTING_ROUNDS, CORUN_SITTING_SPAN_S = 3, 5, 2.0


def corun_sitting(torch, rounds: int = CORUN_SITTING_ROUNDS, span_s: float = CORUN_SITTING_SPAN_S) -> list:
    """One sitting of the co-run measurement: per round, a 1-thread matmul's time with a second
    such process stopped over its time with that process busy on another core
    (:func:`daydream.opcorun.corun_ratios`); ``[]`` on one core or if the second process does not start."""
    import torch.multiprocessing as mp

    from .calibrate import time_call_ns
    from .opcorun import corun_ratios

    if len(os.sched_getaffinity(0)) < 2:
        return []
    m, k, n = CORUN_SHAPE
    a, b = torch.randn(m, k), torch.randn(k, n)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ctx = mp.get_context("spawn")
        ready, stop = ctx.Event(), ctx.Event()
        proc = ctx.Process(target=_corun_spin, args=(ready, stop), daemon=True)
        proc.start()
        try:
            if not ready.wait(60):
                return []
            mm = lambda: time_call_ns(lambda: torch.mm(a, b), torch.device("cpu"), 0.05, typical=True)  # noqa: E731
            return corun_ratios(proc.pid, mm, mm, rounds, span_s)
        finally:
            stop.set()
            proc.join(10)
    finally:
        torch.set_num_threads(threads)


def corun_factor(torch, earlier=()) -> float:
    """Throughput of one 1-thread process's matmul with another such process busy on another
    core, relative to alone (typical batch of each; 1.0 where there is one core or no slow-down):
    the median of the rounds of a sitting now (:func:`corun_sitting`) and of the ``earlier``
    sittings' (:data:`CORUN_SITTINGS`), at most 1."""
    from .opcorun import pooled_rate

    sittings = [*earlier, corun_sitting(torch)]
    return pooled_rate(*sittings) if any(sittings) else 1.0
