"""The point-to-point send's calibration probes, run inside a pinned 2-rank gloo group (part of
``daydream calibrate``; :func:`daydream.calibrate_procs.gloo_fit` runs them): one send's
transfer, the host cost of posting a send and a receive, a late receive's wait, the extra cost of
posts that collide and the data's delay then, the share of a late receive's wait for a busy
sender, and what data landing on a busy core costs it.
"""
from __future__ import annotations

import statistics
import time

from .calibrate_gloo import busy_matmuls, pinned_gloo_rank, spin

__all__ = ["p2p_probes", "p2p_handshake_ns", "timed_post", "notify_pairs", "paired_gaps", "P2P_TRIES",
           "P2P_BUSY_S", "P2P_STALL_FACTOR", "P2P_POST_MAX_BYTES", "P2P_LATE_HOLD_BUSY_S"]

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


def p2p_probes(torch, dist, rank, sizes) -> tuple:
    """Every probe of one point-to-point sitting, run by ``rank`` of a pinned 2-rank gloo group
    (:func:`daydream.calibrate_procs.gloo_fit` fits and names them); rank 0's figures (rank 1's
    are zeros and empty tuples): per size of ``sizes`` (bytes) ``(bytes, trimmed mean one-way ns,
    send post ns, receive post ns, late receive ns, median one-way ns, stalled share)``
    (:func:`_p2p_one_way_ns`, :func:`_p2p_post_ns`, :func:`_p2p_late_recv_ns`), then the preposted
    and notified sends of the smallest size (:func:`_p2p_notified_ns`), and the points of
    :func:`_p2p_collision_pts`, :func:`_p2p_hold_pts`, :func:`_p2p_late_hold_pts` and
    :func:`_p2p_land_pts`."""
    per_size = []
    for nbytes in sizes:
        t = torch.zeros(nbytes // 4)
        mean, median, stalled = _p2p_one_way_ns(torch, dist, rank, t)
        per_size.append((nbytes, mean, *_p2p_post_ns(torch, dist, rank, t), _p2p_late_recv_ns(torch, dist, rank, t),
                         median, stalled))
    held = torch.zeros(P2P_HOLD_ELEMENTS)
    return (per_size, *_p2p_notified_ns(torch, dist, rank, torch.zeros(min(sizes) // 4)),
            _p2p_collision_pts(torch, dist, rank, torch.zeros(P2P_COLLIDE_ELEMENTS)),
            _p2p_hold_pts(torch, dist, rank, held), _p2p_late_hold_pts(torch, dist, rank, held),
            _p2p_land_pts(torch, dist, rank))


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
            spin(P2P_BUSY_S)
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
    compute = busy_matmuls(torch)
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


def _notify_gap_worker(rank, port, sizes, q):
    """:func:`_p2p_notified_ns` per size of ``sizes`` (bytes); rank 0 puts the list of pairs
    (``benchmarks/p2p_notify_gap.py``)."""
    torch, dist = pinned_gloo_rank(rank, port)
    got = [_p2p_notified_ns(torch, dist, rank, torch.zeros(n // 4)) for n in sizes]
    if rank == 0:
        q.put(got)
    dist.destroy_process_group()


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
            spin(2 * P2P_LATE_S)
            work.wait()
        else:
            spin(P2P_LATE_S)
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
                spin(gap * 1e-6)
            t0 = time.perf_counter_ns()
            work = dist.isend(t, 1) if rank == 0 else dist.irecv(t, 0)
            if k >= 2:
                took[gap].append(time.perf_counter_ns() - t0)
            spin(P2P_LATE_S)
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
                spin(gap * 1e-6)
            t0 = time.perf_counter_ns()
            work = dist.isend(t, 1) if rank == 0 else dist.irecv(t, 0)
            t1 = time.perf_counter_ns()
            if rank == 0:
                spin(P2P_HOLD_BUSY_S)
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
    compute = busy_matmuls(torch)
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
                    spin(1e-3)
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
