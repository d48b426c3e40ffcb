"""Calibration measurements that start other processes (part of ``daydream calibrate``).

gloo between two local processes, each pinned to a core of its own where
there are two (as ``--pin-cores`` runs are): all-reduce bandwidth and
latency; one send's transfer, the host cost of posting a send and a
receive and the hand-overs of a pipeline exchange, a late receive's handshake, the extra cost of posts that
collide and the data's delay then, and what data landing on a busy core
costs it.  Processes sharing a CPU host without talking (co-run, process
spread) are measured in :mod:`daydream.calibrate_corun`.
"""
from __future__ import annotations

import os
import socket
import statistics
import time
from dataclasses import dataclass

from .errors import DaydreamError

__all__ = ["gloo_fit", "gloo_p2p", "p2p_handshake_ns", "free_port", "first_result", "timed_post", "GLOO_SIZES",
           "MIN_SLOPE_NS_PER_BYTE", "UNRESOLVED_BYTES_PER_S", "handover_sitting", "handover_times_ns",
           "handover_latency_ns", "HandoverSitting", "pipeline_post_ns", "pool_p2p", "P2P_FIELDS"]

#: The device profile's fields one point-to-point sitting (:func:`gloo_fit` ``(..., "p2p")``) measures.
P2P_FIELDS = ("p2p", "p2p_handshake", "p2p_sends", "p2p_preposted", "p2p_notified", "p2p_collision", "p2p_hold",
              "p2p_late_hold", "p2p_land")
#: Message sizes (bytes) of the all-reduce and point-to-point measurements.
GLOO_SIZES = [2 ** 10, 2 ** 16, 2 ** 20, 2 ** 23]
#: Floor of a fitted ``t = latency + bytes / bw`` slope (ns a byte): where the times do not grow
#: with size (sizes too small to see the bandwidth) the fit keeps this and the bandwidth reads
#: :data:`UNRESOLVED_BYTES_PER_S`, transfers then costing their latency only.
MIN_SLOPE_NS_PER_BYTE = 1e-6
UNRESOLVED_BYTES_PER_S = 1e9 / MIN_SLOPE_NS_PER_BYTE


def free_port() -> int:
    """A TCP port of 127.0.0.1 that is free now (a gloo rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def first_result(target, ranks: int, args=(), timeout_s: float = 120.0):
    """Spawn ``ranks`` processes ``target(rank, port, *args, q)`` (a free ``port`` for their
    rendezvous) and return the first object one of them puts on ``q``; all are joined.

    Raises
    ------
    DaydreamError
        If every process exits without a result, or none comes within ``timeout_s``.
    """
    import queue

    import torch.multiprocessing as mp

    port = free_port()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=target, args=(r, port, *args, q)) for r in range(ranks)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            exited = not any(p.is_alive() for p in procs)     # read before the queue: a result put
            try:                                              # before exiting is there by then
                return q.get(timeout=0.5)
            except queue.Empty:
                if exited:
                    codes = ", ".join(str(p.exitcode) for p in procs)
                    raise DaydreamError(f"{_name(target)}: its {ranks} process(es) exited without a result "
                                        f"(exit codes {codes}; their errors are above)") from None
                if time.monotonic() > deadline:
                    raise DaydreamError(f"{_name(target)}: no result from its {ranks} process(es) within "
                                        f"{timeout_s:.0f} s") from None
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.terminate()


def _name(target) -> str:
    return f"calibration worker {getattr(target, '__name__', target)!s}"

#: Point-to-point calibration: transfers timed per size, and the sender's busy time before each
#: (the receiver is already waiting, as a pipeline stage waiting for its input is).  Some sends
#: stall for milliseconds, in spells; their mean cost is part of what a real hand-over costs
#: (the trimmed mean is kept), but 30 tries caught from none to several of them: the fitted
#: latency read 40 / 245 / 323 / 890 us in four calibrations within a minute, and 69 / 173 / 192
#: / 281 us with 150 tries (session 28; the median one-way send 34-81 us meanwhile), and 241-822
#: us with 120 (session 29).  The stalled sends wait for their rank's socket thread, which holds
#: the shared core until the scheduler's tick; real hand-overs stall too, at a rate of their own
#: (docs/validation-log.md, "Session 29").
P2P_TRIES, P2P_BUSY_S = 120, 0.001
#: A timed send counts as stalled when it took more than this many times the median send (the
#: stalled ones wait for the rank's socket thread, which holds the shared core until the
#: scheduler's tick: ``benchmarks/p2p_start.py --demote``; session 29).
P2P_STALL_FACTOR = 10
#: Sizes up to which a send's host cost (posting it) is taken as fixed; above, the
#: posting thread may write part of the data itself and its cost is in the transfer.
P2P_POST_MAX_BYTES = 2 ** 18
#: How far apart (s) the two ranks' posts are timed (:func:`_p2p_post_ns`): past the window in
#: which posts to each other collide (``p2p_collision`` read no extra cost from 200 us apart on
#: the Zen 1 host of session 45).
P2P_POST_APART_S = 0.0005


def _pinned_gloo_rank(rank: int, port: int):
    """Join a 2-rank gloo group as ``rank``, pinned to a core of its own where there are two (as
    the multi-process runs are with ``--pin-cores``), one intra-op thread; returns (torch, dist)."""
    import torch
    import torch.distributed as dist

    if len(os.sched_getaffinity(0)) >= 2:
        from .collect.runner import pin_rank

        pin_rank(rank, 2)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    return torch, dist


def _gloo_worker(rank, port, sizes, kind, q):
    """Per size, the time of one all-reduce (``kind="allreduce"``: :func:`_allreduce_pts`)
    or one send (``"p2p"``: from the send's start on rank 0 to the receive's end on rank 1,
    the receiver waiting; both read the same monotonic clock; trimmed mean)."""
    torch, dist = _pinned_gloo_rank(rank, port)
    if kind == "allreduce":
        out = _allreduce_pts(torch, dist, sizes)
    else:
        out = []
        for nbytes in sizes:
            t = torch.zeros(nbytes // 4)
            mean, median, stalled = _p2p_one_way_ns(torch, dist, rank, t)
            out.append((nbytes, mean, *_p2p_post_ns(torch, dist, rank, t), _p2p_late_recv_ns(torch, dist, rank, t),
                        median, stalled))
    if kind == "p2p":
        held = torch.zeros(P2P_HOLD_ELEMENTS)
        small = torch.zeros(min(sizes) // 4)
        out = (out, *_p2p_notified_ns(torch, dist, rank, small),
               _p2p_collision_pts(torch, dist, rank, torch.zeros(P2P_COLLIDE_ELEMENTS)),
               _p2p_hold_pts(torch, dist, rank, held), _p2p_late_hold_pts(torch, dist, rank, held),
               _p2p_land_pts(torch, dist, rank))
    if rank == 0:
        q.put(out)
    dist.destroy_process_group()


#: Rounds of the all-reduce sweep over the sizes; each size's time is the median of its rounds.
ALLREDUCE_ROUNDS = 7


def _allreduce_pts(torch, dist, sizes) -> list:
    """``[(bytes, ns), ...]``: per size, the median over :data:`ALLREDUCE_ROUNDS` rounds of the mean
    of back-to-back all-reduces (a round times every size once, so each size's rounds fall in
    different spells of the machine: one sweep's fitted bandwidth read 0.85-1.91 GB/s in four
    calibrations within a minute here)."""
    bufs = [torch.zeros(n // 4) for n in sizes]
    for t in bufs:
        for _ in range(3):
            dist.all_reduce(t)
    got = [[] for _ in sizes]
    for _ in range(ALLREDUCE_ROUNDS):
        for n, t, times in zip(sizes, bufs, got):
            reps = max(3, min(50, int(2e7 // max(n, 1))))
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(reps):
                dist.all_reduce(t)
            times.append((time.perf_counter() - t0) / reps * 1e9)
    return [(n, statistics.median(times)) for n, times in zip(sizes, got)]


#: The wake-up of a collective after compute: bytes all-reduced, the compute before each timed
#: call, calls per round (after compute, then back to back), rounds.
WAKE_BYTES = 4096
WAKE_BUSY_S = 0.005
WAKE_CALLS = 60
WAKE_ROUNDS = 12


def _wake_worker(rank, port, q):
    """Rank 0 puts, per round, ``(mean after compute ns, mean back to back ns)`` of a small
    all-reduce, :data:`WAKE_CALLS` calls each, the two in turns."""
    torch, dist = _pinned_gloo_rank(rank, port)
    t = torch.zeros(WAKE_BYTES // 4)
    for _ in range(5):
        dist.all_reduce(t)
    rounds = []
    for _ in range(WAKE_ROUNDS):
        after = []
        for _ in range(WAKE_CALLS):
            _spin(WAKE_BUSY_S)
            t0 = time.perf_counter_ns()
            dist.all_reduce(t)
            after.append(time.perf_counter_ns() - t0)
        dist.barrier()
        t0 = time.perf_counter_ns()
        for _ in range(WAKE_CALLS):
            dist.all_reduce(t)
        rounds.append((statistics.fmean(after), (time.perf_counter_ns() - t0) / WAKE_CALLS))
    if rank == 0:
        q.put(rounds)
    dist.destroy_process_group()


def gloo_wake_ns() -> float:
    """How much longer a small gloo all-reduce takes when both ranks come to it from
    :data:`WAKE_BUSY_S` of compute than back to back, each rank pinned to a core as
    ``--pin-cores`` runs are, so that gloo's threads share it: the median over
    :data:`WAKE_ROUNDS` rounds of the difference of the two means in the round (the machine's
    spells of speed then move both sides of a difference alike), at least 0.

    Back to back, gloo's threads are awake; after compute they have slept behind the training
    thread and the call pays their wake-up, a scheduler slice at times (on the development VM:
    after compute 1.9-2.8 ms mean for 4-300 KiB, back to back 1.1-1.8 ms;
    ``python benchmarks/gloo_allreduce_gap.py``).  A data-parallel step meets it at each point
    where the ranks synchronise after computing."""
    rounds = first_result(_wake_worker, 2)
    return max(statistics.median(a - b for a, b in rounds), 0.0)


def _matmuls(torch):
    """``compute(seconds)``: keep this thread running torch matmuls (64 x 512 by 512 x 512) that long,
    as a rank between its posts computes."""
    a, b = torch.randn(64, 512), torch.randn(512, 512)
    return lambda seconds: _spin(seconds, lambda: torch.mm(a, b))


def _spin(seconds: float, work=None) -> None:
    """Keep this thread busy (not asleep) for ``seconds``: a sender that has been computing, in a
    Python loop or running ``work()`` (torch ops) again and again."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        if work is not None:
            work()


def _p2p_one_way_ns(torch, dist, rank, t, preposted: bool = False) -> tuple:
    """Rank 0: ``(trimmed mean, median, stalled share)`` of :data:`P2P_TRIES` sends of ``t``
    (:func:`_p2p_tries`): the mean of the fastest 95 %, in ns, and the share of sends over
    :data:`P2P_STALL_FACTOR` times the median. Rank 1: zeros.

    Each send is started by a barrier; rank 1 posts its receive after it, or with ``preposted``
    before it, as a runtime that posts a step's receives up front has them (the Hydra runtime).
    Those do not wait for their rank's socket thread until the scheduler's tick, as 20-40 % of
    the others did here (``python benchmarks/p2p_start.py``: posted-barrier mean 30-44 us, 0-0.5 %
    over 0.5 ms; barrier 545-985 us, 20-39 %)."""
    one_way = _p2p_tries(torch, dist, rank, t, [(preposted, False)] * P2P_TRIES)
    if one_way is None:
        return 0.0, 0.0, 0.0
    one_way.sort()
    median = statistics.median(one_way)
    stalled = sum(x > P2P_STALL_FACTOR * median for x in one_way) / len(one_way)
    return statistics.fmean(one_way[:max(1, int(len(one_way) * 0.95))]), median, stalled


def _p2p_notified_ns(torch, dist, rank, t) -> tuple:
    """Rank 0: ``(preposted, notified)`` ns of a send of ``t`` to a receive posted before the
    barrier that starts it, its arrival learnt by waiting on the receive (``preposted``, a
    trimmed mean as :func:`_p2p_one_way_ns` takes it) or as the Hydra runtime's shard-parallel
    scheduler learns it (``notified``): a waiter thread blocks on the receive and wakes the
    scheduler, waiting on a condition variable, when it returns
    (:class:`daydream.workloads.hydra.Arrivals`). Rank 1: zeros.

    The two kinds of try alternate, in pairs whose order alternates too, and ``notified`` is
    ``preposted`` plus the median of the pairs' differences: the figure wanted is the gap, and
    two separate sittings' means scattered more than it (``p2p_notified - p2p_preposted``
    read 282, 143 and 61 us in three calibrations of the Zen 1 host of session 51)."""
    order = notify_pairs(P2P_TRIES)           # each pair's tries: notified?
    one_way = _p2p_tries(torch, dist, rank, t, [(True, n) for pair in order for n in pair])
    if one_way is None:
        return 0.0, 0.0
    plain, gaps = paired_gaps(one_way, order)
    plain.sort()
    preposted = statistics.fmean(plain[:max(1, int(len(plain) * 0.95))])
    return preposted, preposted + statistics.median(gaps)


def notify_pairs(pairs: int) -> list:
    """``pairs`` pairs of tries, ``(notified?, notified?)``, whose order alternates.

    >>> notify_pairs(3)
    [(False, True), (True, False), (False, True)]
    """
    return [(False, True), (True, False)] * (pairs // 2) + [(False, True)] * (pairs % 2)


def paired_gaps(one_way, order) -> tuple:
    """``(waited, gaps)`` from the one-way times of the tries of ``order`` (:func:`notify_pairs`),
    in order: per pair the waited try's time and the notified one's excess over it.

    >>> paired_gaps([10, 25, 32, 11], notify_pairs(2))
    ([10, 11], [15, 21])
    """
    waited, gaps = [], []
    for k, (first, _) in enumerate(order):
        a, b = one_way[2 * k], one_way[2 * k + 1]
        w, n = (b, a) if first else (a, b)
        waited.append(w)
        gaps.append(n - w)
    return waited, gaps


def _p2p_tries(torch, dist, rank, t, modes) -> list | None:
    """Rank 0: the one-way ns of a send of ``t`` per ``(preposted, notified)`` of ``modes``
    (after 3 warm-up sends of the first), each from its start on rank 0 to the receive's end
    on rank 1 (both stamp the same monotonic clock; rank 1 sends its stamps over at the end);
    rank 1: None. Each send is started by a barrier after rank 0 has computed for
    :data:`P2P_BUSY_S`; rank 1 posts its receive before the barrier where ``preposted`` and
    learns of its arrival through :class:`~daydream.workloads.hydra.Arrivals` where
    ``notified``."""
    from .workloads.hydra import Arrivals

    modes = [modes[0]] * 3 + list(modes)
    stamps = torch.zeros(len(modes), dtype=torch.int64)
    for i, (preposted, notified) in enumerate(modes):
        posted = dist.irecv(t, 0) if preposted and rank == 1 else None
        arrivals = Arrivals([posted]) if notified and posted is not None else None
        dist.barrier()
        if rank == 0:
            _spin(P2P_BUSY_S)
            stamps[i] = time.perf_counter_ns()
            dist.send(t, 1)
            continue
        if arrivals is not None:
            arrivals.first_ready([0], lambda _: posted)
        elif posted is not None:
            posted.wait()
        else:
            dist.recv(t, 0)
        stamps[i] = time.perf_counter_ns()
    peer = torch.zeros_like(stamps)
    if rank == 0:
        dist.recv(peer, 1)
        return (peer - stamps)[3:].tolist()
    dist.send(stamps, 0)
    return None


def timed_post(dist, rank: int, t, compute, busy_s: float) -> int:
    """One timed post: after a barrier and ``busy_s`` of ``compute``, rank 0 posts a send of ``t``
    to rank 1 and rank 1 a receive of it from rank 0; the ns the post took (until it returned;
    it is waited for after)."""
    dist.barrier()
    compute(busy_s)
    t0 = time.perf_counter_ns()
    work = dist.isend(t, 1) if rank == 0 else dist.irecv(t, 0)
    took = time.perf_counter_ns() - t0
    work.wait()
    return took


def _p2p_post_ns(torch, dist, rank, t) -> tuple:
    """Rank 0: the median host time of posting a send (``isend`` until it returns) and, from
    rank 1, of posting a receive (``irecv``), in ns, over :data:`P2P_TRIES` tries after 3
    warm-up ones, each rank running torch ops (matmuls) for :data:`P2P_BUSY_S` before its post,
    as a pipeline stage or a Hydra shard posts right after its compute: the posts of the late
    receive's handshake (:func:`p2p_handshake_ns`), whose other times are barrier-started too
    (``p2p_post`` itself is timed within a pipeline exchange: :func:`pipeline_post_ns`).  The receive is posted
    :data:`P2P_POST_APART_S` after the send in even tries and as long before it in odd ones:
    posts the two ranks make to each other at one moment collide, which
    ``p2p_collision`` measures apart (:func:`_p2p_collision_pts`).  Rank 1: ``(0, 0)``.

    (Until session 36 only the sender was busy, in a Python loop: 14-22 us a post, against
    34-128 us for the posts of torch's pipelining runtime and about 80 us for the Hydra
    runtime's sends; after matmuls on both ranks 23-39 us in eleven calibrations.  Until session
    45 the two posts started together: on the Zen 1 host of session 45 most such posts
    collided, and the median read 1.0 and 4.7 ms in two calibrations; 16 KiB posts 0.5 ms
    apart read 87-193 us, the posts of torch's pipelining runtime 100-184 us.  Apart, one
    calibration of that host still read 4.69 ms: its posts stall at times whether or not they
    collide, and the median flips with the stalled share; docs/validation-log.md, "Session 45".
    Session 46 found spells of the host in which nearly all such posts take 2.5-5.2 ms.)"""
    compute = _matmuls(torch)
    took = [timed_post(dist, rank, t, compute,
                       P2P_BUSY_S + (P2P_POST_APART_S if (rank == 1) == (i % 2 == 0) else 0.0))
            for i in range(P2P_TRIES + 3)]
    mine = torch.tensor([statistics.median(took[3:])], dtype=torch.float64)
    if rank == 0:
        peer = torch.zeros_like(mine)
        dist.recv(peer, 1)
        return float(mine), float(peer)
    dist.send(mine, 0)
    return 0.0, 0.0


#: The GPipe-like exchange of :func:`_p2p_handover_times`: micro-batches a step, measured steps (after
#: 2 more) in all, each stage's compute (matmuls) per forward and per backward (s), bytes a hand-over.
#: The hand-overs' mean is heavy-tailed (10-17 % of them stall for about 2.3 ms, the rest take
#: 6-20 us): 30 steps read 131-540 us in ten 2-process groups within 22 s, and 178-1083 us ten
#: times in a row in one group (session 40); 240 steps in one group read 455-956 us in five
#: calibrations within two hours (session 42), so a calibration pools the hand-overs of
#: exchanges spread over it (:func:`handover_sitting`, :func:`handover_latency_ns`).
P2P_HANDOVER_MB, P2P_HANDOVER_STEPS, P2P_HANDOVER_FWD_S, P2P_HANDOVER_BWD_S = 4, 240, 0.001, 0.002
P2P_HANDOVER_BYTES = 2 ** 16


@dataclass(frozen=True)
class HandoverSitting:
    """What one sitting of the GPipe-like exchange of :func:`_p2p_handover_times` measured, in ns:
    its hand-overs (:func:`handover_times_ns`) and the host time of each send's and each receive's
    post (both ranks'), every one posted right after the compute before it, as torch's pipelining
    runtime posts them."""

    handovers_ns: tuple = ()
    send_posts_ns: tuple = ()
    recv_posts_ns: tuple = ()


def _notify_gap_worker(rank, port, sizes, q):
    """:func:`_p2p_notified_ns` per size of ``sizes`` (bytes); rank 0 puts the list of pairs
    (``benchmarks/p2p_notify_gap.py``)."""
    torch, dist = _pinned_gloo_rank(rank, port)
    got = [_p2p_notified_ns(torch, dist, rank, torch.zeros(n // 4)) for n in sizes]
    if rank == 0:
        q.put(got)
    dist.destroy_process_group()


def _handover_worker(rank, port, steps, q):
    torch, dist = _pinned_gloo_rank(rank, port)
    got = _p2p_handover_times(torch, dist, rank, steps)
    if rank == 0:
        q.put(got)
    dist.destroy_process_group()


def handover_sitting(steps: int = P2P_HANDOVER_STEPS) -> HandoverSitting:
    """The :class:`HandoverSitting` of ``steps`` steps of the GPipe-like exchange of
    :func:`_p2p_handover_times` between two fresh pinned gloo processes."""
    return first_result(_handover_worker, 2, (steps,))


def pipeline_post_ns(sittings) -> tuple:
    """The ``p2p_post`` figure, ``(send ns, receive ns)``: the medians of the posts of the
    :class:`HandoverSitting` s ``sittings`` pooled; ``()`` where none was timed.

    The posts are timed within the exchange rather than one at a time after a barrier
    (:func:`_p2p_post_ns`): on the Zen 1 host of session 46 the host had spells of some 10-20 s
    in which nearly every barrier-started post took 2.5-5.2 ms while the exchange's posts kept
    medians of 135-200 us (the share over 1 ms rising from 2 % to 15 %), as the posts of torch's
    pipelining runtime did (160-206 us a 3 s stretch over 70 s); two calibrations of
    session 45 had read 4.69-4.73 ms (docs/validation-log.md, "Session 46").

    >>> pipeline_post_ns([HandoverSitting((5,), (100, 300), (50,)), HandoverSitting((), (200,), (70, 90))])
    (200, 70)
    >>> pipeline_post_ns([HandoverSitting()])
    ()
    """
    sends = [x for s in sittings for x in s.send_posts_ns]
    recvs = [x for s in sittings for x in s.recv_posts_ns]
    return (statistics.median(sends), statistics.median(recvs)) if sends and recvs else ()


def handover_latency_ns(times, bandwidth: float) -> float:
    """The ``p2p_handover`` figure: the mean of the pooled hand-overs ``times`` (ns), less the
    time of their :data:`P2P_HANDOVER_BYTES` at ``bandwidth`` (bytes/s); 0 where none counted.

    >>> handover_latency_ns([30_000, 2_330_000, 10_000, 20_000], 2 ** 16 / 10e-6)   # 10 us of bytes
    587500.0
    """
    return max(statistics.fmean(times) - P2P_HANDOVER_BYTES / bandwidth * 1e9, 0.0) if times else 0.0


def _p2p_handover_times(torch, dist, rank, steps: int = P2P_HANDOVER_STEPS) -> HandoverSitting | None:
    """Rank 0: the :class:`HandoverSitting` of a pipeline's sends; rank 1: ``None``.

    The two ranks run ``steps`` steps of a 2-stage GPipe
    schedule with matmuls for compute, as torch's pipelining runtime runs
    it: rank 0 computes each micro-batch's forward and posts its activation,
    then waits for each gradient and computes that backward; rank 1 waits
    for each activation and computes its forward, then computes each
    backward and posts its gradient; every send is posted right after the
    compute that made it, and its sender goes on computing.  A hand-over is
    the time from a send's post returning to the end of its receiver's wait,
    counted where the receiver was already waiting (both ranks stamp one
    monotonic clock).  Their mean keeps the sends that wait for a busy
    rank's socket thread until the scheduler's tick, at the rate such an
    exchange has them: 184-300 us in four calibrations here (05:00), where
    torch's pipelining runtime's own hand-overs averaged 325 us in a logged
    GPipe run of the validation's model (04:55, ``benchmarks/pipeline_timeline.py``)
    and the barrier-started sends of :func:`_p2p_one_way_ns` fitted 40-1231
    us over the calibrations of sessions 35-37 (docs/validation-log.md, "Session 37").
    """
    compute = _matmuls(torch)
    peer, log = 1 - rank, []            # rows: (kind: a send's post 0, a wait 1, a receive's post 2, tag, start, end ns)
    bufs = [torch.zeros(P2P_HANDOVER_BYTES // 4) for _ in range(P2P_HANDOVER_MB)]

    def send(m, tag):
        t0 = time.perf_counter_ns()
        work = dist.isend(bufs[m], peer, tag=tag)
        log.append((0, tag, t0, time.perf_counter_ns()))
        return work

    def recv(m, tag):
        t0 = time.perf_counter_ns()
        work = dist.irecv(bufs[m], peer, tag=tag)
        t1 = time.perf_counter_ns()
        work.wait()
        log.extend([(2, tag, t0, t1), (1, tag, t1, time.perf_counter_ns())])

    for step in range(steps + 2):
        dist.barrier()
        if step == 2:
            log.clear()
        fwd = [2 * (P2P_HANDOVER_MB * step + m) for m in range(P2P_HANDOVER_MB)]   # tags: a gradient's is +1
        bwd, sends = [t + 1 for t in fwd], []
        for m in range(P2P_HANDOVER_MB):
            if rank == 0:
                compute(P2P_HANDOVER_FWD_S)
                sends.append(send(m, fwd[m]))
            else:
                recv(m, fwd[m])
                compute(P2P_HANDOVER_FWD_S)
        for m in range(P2P_HANDOVER_MB):
            if rank == 0:
                recv(m, bwd[m])
                compute(P2P_HANDOVER_BWD_S)
            else:
                compute(P2P_HANDOVER_BWD_S)
                sends.append(send(m, bwd[m]))
        for work in sends:
            work.wait()
    return _handover_times(torch, dist, rank, log)


def _handover_times(torch, dist, rank, log) -> HandoverSitting | None:
    """Rank 0: the :class:`HandoverSitting` of both ranks' ``log`` rows (rank 1's sent over); rank 1: ``None``."""
    mine = torch.tensor(log, dtype=torch.int64).reshape(-1, 4)
    if rank == 1:
        dist.send(torch.tensor([mine.shape[0]]), 0)
        dist.send(mine, 0)
        return None
    n = torch.zeros(1, dtype=torch.int64)
    dist.recv(n, 1)
    theirs = torch.zeros((int(n), 4), dtype=torch.int64)
    dist.recv(theirs, 1)
    rows = [[tuple(r) for r in mine.tolist()], [tuple(r) for r in theirs.tolist()]]
    posts = [tuple(end - start for r in rows for kind, _, start, end in r if kind == k) for k in (0, 2)]
    return HandoverSitting(tuple(handover_times_ns(*rows)), *posts)


def handover_times_ns(rows0, rows1) -> list:
    """Per receive that began waiting before its send's post returned, the time from that return
    to the end of the wait, in ns; rows ``(kind, tag, start ns, end ns)`` of ranks 0 and 1
    (kind 0: a send's post, 1: a receive's wait, 2: a receive's post, not used here), a send and
    its receive sharing a tag.

    >>> handover_times_ns([(0, 7, 100, 150), (1, 8, 100, 900)], [(1, 7, 120, 400), (0, 8, 300, 700)])
    [200, 250]
    >>> handover_times_ns([(0, 7, 100, 150)], [(1, 7, 200, 400)])     # the receiver came late
    []
    """
    posted = {(r, tag): end for r, rows in enumerate((rows0, rows1)) for kind, tag, _, end in rows if kind == 0}
    return [end - posted[(1 - r, tag)] for r, rows in enumerate((rows0, rows1)) for kind, tag, start, end in rows
            if kind == 1 and (1 - r, tag) in posted and start <= posted[(1 - r, tag)]]


#: A late receive: posted this long after its send, so that the send waits for it.
P2P_LATE_S = 0.002


def _p2p_late_recv_ns(torch, dist, rank, t) -> float:
    """Rank 1: the median wait, from the ``irecv`` call to the data, of a receive posted
    :data:`P2P_LATE_S` after its send (gloo moves the data only once both sides have posted:
    the receiver's notice goes to the sender, whose thread then writes), over
    :data:`P2P_TRIES` tries after 3 warm-up ones, sent to rank 0.  Rank 0: that median."""
    took = []
    for _ in range(P2P_TRIES + 3):
        dist.barrier()
        if rank == 0:
            work = dist.isend(t, 1)
            _spin(2 * P2P_LATE_S)
            work.wait()
        else:
            _spin(P2P_LATE_S)
            t0 = time.perf_counter_ns()
            dist.irecv(t, 0).wait()
            took.append(time.perf_counter_ns() - t0)
    mine = torch.tensor([statistics.median(took[3:]) if took else 0.0], dtype=torch.float64)
    if rank == 1:
        dist.send(mine, 0)
        return 0.0
    dist.recv(mine, 1)
    return float(mine)


#: Gaps (us) between two posts to each other, rank 0's and rank 1's, at which a post's extra cost is
#: measured (:func:`_p2p_collision_pts`); the last is taken as far enough apart to cost nothing extra.
P2P_COLLIDE_GAPS_US = (0, 25, 50, 100, 200, 400)
#: Tries per gap, half with each rank posting first; the tensor posted (its size does not matter:
#: the collision is over the pair's lock, before any data moves).
P2P_COLLIDE_TRIES, P2P_COLLIDE_ELEMENTS = 60, 256


def _p2p_collision_pts(torch, dist, rank, t) -> tuple:
    """Rank 0: ``((gap ns, extra ns), ...)``, the mean host time of a post (rank 0 an ``isend``,
    rank 1 the matching ``irecv``; both ranks' posts pooled) when the two start ``gap`` apart,
    over that at the last of :data:`P2P_COLLIDE_GAPS_US` (at least 0; 0 at the last gap).
    Rank 1: ``()``.

    Each try leaves a barrier, one rank spins ``gap``, both post, then compute
    (spin) 2 ms before waiting: a pipeline stage posting its next send or receive
    while its peer does.  Posts a few microseconds apart stall in some tries by
    a scheduler slice (milliseconds on Linux); the mean carries how often.
    """
    took = {g: [] for g in P2P_COLLIDE_GAPS_US}
    for k in range(P2P_COLLIDE_TRIES + 2):
        for gap in P2P_COLLIDE_GAPS_US:
            dist.barrier()
            if rank == k % 2:
                _spin(gap * 1e-6)
            t0 = time.perf_counter_ns()
            work = dist.isend(t, 1) if rank == 0 else dist.irecv(t, 0)
            if k >= 2:
                took[gap].append(time.perf_counter_ns() - t0)
            _spin(P2P_LATE_S)
            work.wait()
    mine = torch.tensor([statistics.fmean(took[g]) for g in P2P_COLLIDE_GAPS_US], dtype=torch.float64)
    if rank == 1:
        dist.send(mine, 0)
        return ()
    peer = torch.zeros_like(mine)
    dist.recv(peer, 1)
    mean = ((mine + peer) / 2).tolist()
    far = mean[-1]
    pts = [(g * 1e3, max(m - far, 0.0)) for g, m in zip(P2P_COLLIDE_GAPS_US, mean)]
    pts[-1] = (pts[-1][0], 0.0)
    return tuple(pts)


#: Nominal gaps (us) between a send's post and its receive's (either first) at which
#: :func:`_p2p_hold_pts` times the delivery; tries at least the last apart are the reference.
P2P_HOLD_GAPS_US = (0, 10, 25, 50, 100, 200, 400, 800)
#: Tries per gap (half with each side posting first), and how long the sender computes after its post.
P2P_HOLD_TRIES, P2P_HOLD_BUSY_S = 40, 0.002
#: Elements of the tensor sent (64 KiB: a pipeline hand-over of the validated size).
P2P_HOLD_ELEMENTS = 2 ** 14


def _p2p_hold_pts(torch, dist, rank, t) -> tuple:
    """Rank 0: ``((gap ns, extra ns), ...)``, the mean delay of a send's data beyond the later of
    the two posts' ends when its receive is posted ``gap`` from it (by the gaps the two posts'
    starts really had: tries binned at :data:`P2P_HOLD_GAPS_US`), over that of the tries at
    least the last gap apart (at least 0; 0 at the last gap).  Rank 1: ``()``.

    Each try leaves a barrier; one side waits ``gap``; rank 0 posts a send and computes (spins)
    :data:`P2P_HOLD_BUSY_S` before waiting for it, rank 1 posts the receive and waits for the
    data, as pipeline stages do.  Posts within some tens of microseconds of each other hold the
    data back in a share of tries by milliseconds (gloo's pair lock and a scheduler slice,
    see ``benchmarks/gloo_handover.py``); the mean carries how often.
    """
    rec = []    # (post start, post end, wait end): rank 1's wait ends with the data's arrival
    for k in range(P2P_HOLD_TRIES + 2):
        for gap in P2P_HOLD_GAPS_US:
            dist.barrier()
            if rank == k % 2:
                _spin(gap * 1e-6)
            t0 = time.perf_counter_ns()
            work = dist.isend(t, 1) if rank == 0 else dist.irecv(t, 0)
            t1 = time.perf_counter_ns()
            if rank == 0:
                _spin(P2P_HOLD_BUSY_S)
            work.wait()
            if k >= 2:
                rec.append((t0, t1, time.perf_counter_ns()))
    mine = torch.tensor(rec, dtype=torch.int64)
    if rank == 0:
        dist.send(mine, 1)
        got = torch.zeros(len(P2P_HOLD_GAPS_US), dtype=torch.float64)
        dist.recv(got, 1)
        return tuple((g * 1e3, float(x)) for g, x in zip(P2P_HOLD_GAPS_US, got.tolist()))
    send = torch.zeros_like(mine)
    dist.recv(send, 0)
    gap_us = ((mine[:, 0] - send[:, 0]).abs().double() / 1e3).tolist()
    delay = (mine[:, 2] - torch.maximum(mine[:, 1], send[:, 1])).double().tolist()
    dist.send(torch.tensor(_mean_by_gap(gap_us, delay, P2P_HOLD_GAPS_US), dtype=torch.float64), 0)
    return ()


#: Late receives: how long (ms) the sender has computed when it posts the send, how long after the
#: send the receive is posted, how long the sender computes after its post; tries per setting.
P2P_LATE_HOLD_BEFORE_MS, P2P_LATE_HOLD_OFFSETS_MS, P2P_LATE_HOLD_BUSY_S = (0.5, 1.0, 2.0, 4.0), (0.5, 1.0, 2.0), 0.003
P2P_LATE_HOLD_TRIES = 24


def _p2p_late_hold_pts(torch, dist, rank, t) -> tuple:
    """Rank 0: ``((busy ns, share), ...)``: per time the sender has computed before posting a send
    (:data:`P2P_LATE_HOLD_BEFORE_MS`), the share of the time from a late receive's post until the
    sender stops computing that the data waits (0 to 1).  Rank 1: ``()``.

    Each try leaves a barrier; both ranks compute (matmuls) that long; rank 0 posts a send and
    computes :data:`P2P_LATE_HOLD_BUSY_S` more before waiting; rank 1 computes an offset of
    :data:`P2P_LATE_HOLD_OFFSETS_MS` more, posts the receive and waits.  The data's waits beyond
    the fastest tenth of tries, summed, over the times from the receive's post to the end of the
    sender's compute, summed.  With the sender running torch ops (not a Python loop) a share of
    such sends leave only when it stops, more of them the longer it has run (see
    ``benchmarks/gloo_handover.py --compute mm``).
    """
    compute = _matmuls(torch)
    rec = []    # rank 0: (the sender's compute end, its send done); rank 1: (receive post end, arrival)
    for before in P2P_LATE_HOLD_BEFORE_MS:
        for k in range(P2P_LATE_HOLD_TRIES + 1):
            for off in P2P_LATE_HOLD_OFFSETS_MS:
                dist.barrier()
                compute(before / 1e3)
                if rank == 0:
                    work = dist.isend(t, 1)
                    compute(P2P_LATE_HOLD_BUSY_S)
                else:
                    compute(off / 1e3)
                    work = dist.irecv(t, 0)
                stamp = time.perf_counter_ns()
                work.wait()
                if k:
                    rec.append((stamp, time.perf_counter_ns()))
    mine = torch.tensor(rec, dtype=torch.int64).reshape(len(P2P_LATE_HOLD_BEFORE_MS), -1, 2)
    if rank == 1:
        dist.send(mine, 0)
        return ()
    recv = torch.zeros_like(mine)
    dist.recv(recv, 1)
    took = (recv[..., 1] - recv[..., 0]).double()
    held = (took - took.quantile(0.1, dim=1, keepdim=True)).clamp(min=0).sum(dim=1)
    room = (mine[..., 0] - recv[..., 0]).double().clamp(min=0).sum(dim=1)
    share = torch.where(room > 0, held / room.clamp(min=1), torch.zeros_like(room)).clamp(max=1.0)
    return tuple((x * 1e6, float(y)) for x, y in zip(P2P_LATE_HOLD_BEFORE_MS, share.tolist()))


#: Message sizes (bytes) landing on a busy receiver, tries with and without one, and the
#: receiver's compute per try (a shard's forward and backward, repeated; its count fixed once,
#: about this long).
P2P_LAND_SIZES, P2P_LAND_TRIES, P2P_LAND_WORK_S = (2 ** 14, 2 ** 17, 2 ** 19), 60, 0.0025
#: Width and depth of the stack of linear layers the receiver trains meanwhile, and its rows (the
#: bundled MLP's second Hydra shard at the validation sizes: three linear layers, 64 rows).
P2P_LAND_FEATURES, P2P_LAND_LAYERS, P2P_LAND_ROWS = 512, 3, 64


def _p2p_land_pts(torch, dist, rank) -> tuple:
    """Rank 0: ``((bytes, extra ns), ...)``: per message size (:data:`P2P_LAND_SIZES`), how much
    longer rank 1's compute takes when a message lands on its core meanwhile.  Rank 1: ``()``.

    Tries alternate with and without a message.  Each leaves a barrier; rank 1 posts its
    receive (waited on by a thread of its own, as the Hydra runtime does) and runs a fixed count
    of forward and backward passes of a stack of linear layers (about 2.5 ms: autograd, which
    holds no Python lock while it computes, as a shard's task does); rank 0 waits 1 ms, so that
    it lands while rank 1 computes, and sends it.  The median, over pairs of tries (one quiet,
    the next with the message) whose message was taken in before the compute ended, of the
    difference of rank 1's compute times (:func:`_landing_cost_ns`): pairs, as the machine's
    speed drifts over the tries; a message taken in only after the compute (a share of them:
    the core's scheduler lets the compute run on) costs the core in whatever it runs next.

    Until session 35 four messages landed in each try on matmuls in a Python loop, and every
    pair counted: 46-79 us a message of 128 KiB in five runs, where the real runtime's second
    shard took 0.2-0.3 ms longer with one landing (docs/validation-log.md).  One message a try
    on these passes, every pair counted: 24-296 us in five validation calibrations (a share of
    the messages is taken in only after the compute); over the pairs taken in meanwhile,
    109-181 us in twelve runs of the measurement alone and 156-588 us in seven validation
    calibrations (session 35; ``python benchmarks/landing_cost.py`` prints this figure beside
    the older ways).
    """
    import threading

    net = torch.nn.Sequential(*[torch.nn.Linear(P2P_LAND_FEATURES, P2P_LAND_FEATURES)
                                for _ in range(P2P_LAND_LAYERS)])
    x = torch.randn(P2P_LAND_ROWS, P2P_LAND_FEATURES)

    def compute(passes):
        for _ in range(passes):
            net(x).sum().backward()

    compute(2)
    t0 = time.perf_counter()
    compute(5)
    passes = torch.tensor([max(1, int(P2P_LAND_WORK_S / max((time.perf_counter() - t0) / 5, 1e-9)))])
    dist.broadcast(passes, 1)       # rank 1's count (only rank 1 computes)
    took = []      # rank 1: per size, (quiet, landing) compute times
    for nbytes in P2P_LAND_SIZES:
        buf, got = torch.zeros(nbytes // 4), ([], [])
        for k in range(2 * P2P_LAND_TRIES + 2):
            landing = k % 2
            dist.barrier()
            if rank == 0:
                if landing:
                    _spin(1e-3)
                    dist.isend(buf, 1).wait()
                continue
            noticed = []
            waiter = threading.Thread(target=_take_in, args=(dist.irecv(torch.empty_like(buf), 0), noticed)) \
                if landing else None
            if waiter:
                waiter.start()
            start = time.perf_counter_ns()
            compute(int(passes))
            end = time.perf_counter_ns()
            if waiter:
                waiter.join()
            if k >= 2:    # a try whose message was taken in only after the compute: no pair
                got[landing].append(end - start if not landing or (noticed and noticed[0] < end) else None)
        took.append(got)
    out = torch.tensor([_landing_cost_ns(*got) for got in took] if rank == 1 else [0.0] * len(P2P_LAND_SIZES),
                       dtype=torch.float64)
    dist.broadcast(out, 1)
    return tuple((float(n), float(x)) for n, x in zip(P2P_LAND_SIZES, out.tolist())) if rank == 0 else ()


def _take_in(work, noticed: list) -> None:
    """A waiter thread's work: wait for the receive, note when it was taken in."""
    work.wait()
    noticed.append(time.perf_counter_ns())


def _landing_cost_ns(quiet, landing) -> float:
    """The median over pairs (a quiet try, the next with a message) of the difference of the
    compute times, over the pairs whose message was taken in while the receiver computed
    (``None`` in ``landing``: taken in after; the core then pays for it in whatever it runs
    next, which the compute timed here does not hold); at least 0, and 0 without such pairs.

    >>> _landing_cost_ns([100, 110, 90], [150, None, 130])
    45.0
    >>> _landing_cost_ns([100], [None])
    0.0
    """
    diffs = [b - a for a, b in zip(quiet, landing) if b is not None]
    return max(statistics.median(diffs), 0.0) if diffs else 0.0


def _mean_by_gap(gaps, values, edges) -> list:
    """Per edge of ``edges`` (increasing), the mean of the ``values`` whose gap lies from it to the
    next edge, less the mean of those at or past the last edge (at least 0; 0 at the last edge); an
    edge without values takes the next edge's figure.

    >>> _mean_by_gap([0, 5, 12, 30, 31], [9.0, 7.0, 4.0, 1.0, 3.0], (0, 10, 30))
    [6.0, 2.0, 0.0]
    """
    far = [v for g, v in zip(gaps, values) if g >= edges[-1]]
    ref = statistics.fmean(far) if far else 0.0
    out = [0.0]
    for lo, hi in reversed(list(zip(edges, edges[1:]))):
        got = [v for g, v in zip(gaps, values) if lo <= g < hi]
        out.append(max(statistics.fmean(got) - ref, 0.0) if got else out[-1])
    return out[::-1]


def p2p_handshake_ns(one_way_ns: float, send_post_ns: float, recv_post_ns: float, late_wait_ns: float) -> float:
    """What a late receive waits beyond posting it and the transfer as :meth:`DeviceProfile.p2p_ns`
    counts it (from the send's post): ``late - recv_post - (one_way - send_post)``, at least 0.

    >>> p2p_handshake_ns(223e3, 70e3, 60e3, 348e3 + 60e3)
    195000.0
    """
    return max(late_wait_ns - recv_post_ns - (one_way_ns - send_post_ns), 0.0)


def gloo_p2p(sizes=None) -> dict:
    """The point-to-point figures of a CPU profile (``gloo_fit(sizes, "p2p")``, and ``p2p_post`` and
    ``p2p_handover`` from one :func:`handover_sitting`) measured alone (idle CPUs polling), to
    complete an older profile."""
    from .cpuidle import polling_idle

    with polling_idle():
        got, sitting = gloo_fit(sizes or GLOO_SIZES, "p2p"), handover_sitting()
    return {**got, "p2p_post": pipeline_post_ns([sitting]),
            "p2p_handover": handover_latency_ns(sitting.handovers_ns, got["p2p"][0])}


def gloo_fit(sizes, kind: str = "allreduce"):
    """(bytes/s, latency ns) of gloo between two local processes, each pinned to a core of its
    own where there are two (as ``--pin-cores`` runs are: a rank's gloo threads then share
    its core), fitted to ``t = a + bytes/bw``:
    the ring model for 2 workers (``a = 2 latency``) for ``"allreduce"``; one send
    (``a = latency``) for ``"p2p"``, which
    also returns the handshake of a late receive (:func:`p2p_handshake_ns`, with the sitting's own
    barrier-started posts; medians over the sizes up to :data:`P2P_POST_MAX_BYTES`),
    the extra cost of posts that collide (:func:`_p2p_collision_pts`), the data's extra delay
    then (:func:`_p2p_hold_pts`) and the share of a late receive's wait for a busy sender
    (:func:`_p2p_late_hold_pts`) and the cost of data landing on a busy receiver
    (:func:`_p2p_land_pts`), as a dict of :class:`~daydream.device.DeviceProfile` field
    name to figure: ``{"p2p": (bytes/s, latency ns),
    "p2p_handshake": ns, "p2p_sends": (median send ns, stalled share), "p2p_preposted": ns (a send of the
    smallest size to a receive posted before the barrier that starts it: :func:`_p2p_one_way_ns`),
    "p2p_notified": ns (the same, its arrival learnt through a waiter thread),
    "p2p_collision": ((gap ns,
    extra ns), ...), "p2p_hold": ((gap ns, extra ns), ...), "p2p_late_hold": ((busy ns, share), ...),
    "p2p_land": ((bytes, extra ns), ...)}``."""
    pts = first_result(_gloo_worker, 2, (sizes, kind))
    if kind == "p2p":
        pts, preposted, notified, collision, hold, late, land = pts
        small = [p for p in pts if p[0] <= P2P_POST_MAX_BYTES] or pts[:1]
        handshake = statistics.median(p2p_handshake_ns(p[1], p[2], p[3], p[4]) for p in small)
        sends = (statistics.median(p[5] for p in small), statistics.fmean(p[6] for p in small))
        fit = _fit_relative([p[:2] for p in pts])
        return dict(zip(P2P_FIELDS, (fit, handshake, sends, preposted, notified, collision, hold, late, land)))
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    slope = max(slope, MIN_SLOPE_NS_PER_BYTE)
    intercept = max(my - slope * mx, 0.0)
    return (1e9 / slope, intercept / 2.0)


def pool_p2p(sittings) -> dict:
    """The point-to-point figures of several sittings of :func:`gloo_fit` ``(..., "p2p")`` pooled:
    per field, the median over the sittings, taken per component of a pair (the fit's bytes/s
    and latency apart) and per point of a curve (its offsets or sizes the same in every sitting).

    One sitting takes some 12 s, and the host's spells last longer: in the fifteen calibrations of
    the validation runs 2026-12-06a-o the preposted send read 59-81 us and once 157 us (run k,
    whose Hydra rows read 3-4 points lower with the fifteen's median figures), the late receive's
    handshake 0-24 us and once 108 us (run j; docs/validation-log.md, "Session 79").  The median
    of sittings spread over the calibration lets a spell move one of them.

    >>> a = {"p2p": (1e9, 60e3), "p2p_preposted": 60e3, "p2p_land": ((16, 100.0), (64, 150.0))}
    >>> b = {"p2p": (2e9, 400e3), "p2p_preposted": 157e3, "p2p_land": ((16, 300.0), (64, 140.0))}
    >>> c = {"p2p": (3e9, 70e3), "p2p_preposted": 62e3, "p2p_land": ((16, 120.0), (64, 160.0))}
    >>> pooled = pool_p2p([a, b, c])
    >>> pooled["p2p"], pooled["p2p_preposted"], pooled["p2p_land"]
    ((2000000000.0, 70000.0), 62000.0, ((16, 120.0), (64, 150.0)))
    >>> pool_p2p([a, b, {**c, "p2p_land": ((32, 120.0), (64, 160.0))}])
    Traceback (most recent call last):
    ...
    ValueError: sittings measured different points: [(16, 64), (16, 64), (32, 64)]
    """
    sittings = list(sittings)
    return {k: _median_of([s[k] for s in sittings]) for k in sittings[0]}


def _median_of(values):
    """The median of equal-shaped figures: numbers, or tuples of them (a curve's points keep
    their first component, which must agree)."""
    first = values[0]
    if not isinstance(first, (tuple, list)):
        return statistics.median(values)
    if first and isinstance(first[0], (tuple, list)):
        xs = [tuple(p[0] for p in v) for v in values]
        if len(set(xs)) != 1:
            raise ValueError(f"sittings measured different points: {xs}")
        return tuple((x, statistics.median(v[i][1] for v in values)) for i, x in enumerate(xs[0]))
    return tuple(statistics.median(v[i] for v in values) for i in range(len(first)))


def _fit_relative(pts):
    """(bytes/s, latency ns) of ``t = latency + bytes / bw`` minimising the *relative* error
    (weights ``1 / t**2``), so that sizes a thousand times apart count alike.

    >>> bw, lat = _fit_relative([(1e3, 100_400.0), (1e6, 5e5), (1e7, 4.1e6)])   # exact: 100 us, 2.5 GB/s
    >>> round(bw / 1e9, 2), round(lat / 1e3)
    (2.5, 100)
    """
    w = [1.0 / y ** 2 for _, y in pts]
    sw = sum(w)
    mx = sum(wi * x for wi, (x, _) in zip(w, pts)) / sw
    my = sum(wi * y for wi, (_, y) in zip(w, pts)) / sw
    sxx = sum(wi * (x - mx) ** 2 for wi, (x, _) in zip(w, pts))
    slope = max(sum(wi * (x - mx) * (y - my) for wi, (x, y) in zip(w, pts)) / sxx, MIN_SLOPE_NS_PER_BYTE)
    return 1e9 / slope, max(my - slope * mx, 0.0)
