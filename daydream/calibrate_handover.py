"""The hand-overs of a pipeline exchange between two pinned gloo processes, and the figures a
calibration pools from its sittings of it (``p2p_handover``, ``p2p_post``; part of
``daydream calibrate``).
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from .calibrate_gloo import busy_matmuls, first_result, pinned_gloo_rank

__all__ = ["HandoverSitting", "handover_sitting", "handover_times_ns", "handover_latency_ns", "pipeline_post_ns",
           "P2P_HANDOVER_STEPS", "P2P_HANDOVER_BYTES"]

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


def _handover_worker(rank, port, steps, q):
    torch, dist = pinned_gloo_rank(rank, port)
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
    (:func:`~daydream.calibrate_p2p._p2p_post_ns`): on the Zen 1 host of session 46 the host had spells of some 10-20 s
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
    and the barrier-started sends of :func:`~daydream.calibrate_p2p._p2p_one_way_ns` fitted 40-1231
    us over the calibrations of sessions 35-37 (docs/validation-log.md, "Session 37").
    """
    compute = busy_matmuls(torch)
    peer, log = 1 - rank, []    # rows: (kind: a send's post 0, a wait 1, a receive's post 2, tag, start, end ns)
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
