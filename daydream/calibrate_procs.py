"""Calibration measurements that start other processes (part of ``daydream calibrate``).

gloo between two local processes, each pinned to a core of its own where
there are two (as ``--pin-cores`` runs are): all-reduce bandwidth and
latency, and the wake-up of a collective after compute (here); one send's
transfer, the host cost of posting a send and a receive, a late receive's
handshake, the extra cost of posts that collide and the data's delay then,
and what data landing on a busy core costs it (the probes of
:mod:`daydream.calibrate_p2p`, which :func:`gloo_fit` runs and this module's
point-to-point figures pool); the hand-overs of a pipeline exchange
(:mod:`daydream.calibrate_handover`).  The processes themselves are started
by :mod:`daydream.calibrate_gloo`.  This module is the facade: the names in
its ``__all__`` are what the rest of daydream imports.  Processes sharing a
CPU host without talking (co-run, process spread) are measured in
:mod:`daydream.calibrate_corun`.
"""
from __future__ import annotations

import statistics
import time

from .calibrate_gloo import first_result, free_port, pinned_gloo_rank, spin
from .calibrate_handover import (HandoverSitting, handover_latency_ns, handover_sitting, handover_times_ns,
                                 pipeline_post_ns)
from .calibrate_p2p import P2P_POST_MAX_BYTES, p2p_handshake_ns, p2p_probes, timed_post

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


def _gloo_worker(rank, port, sizes, kind, q):
    """Per size, the time of one all-reduce (``kind="allreduce"``: :func:`_allreduce_pts`), or the
    point-to-point probes (``"p2p"``: :func:`~daydream.calibrate_p2p.p2p_probes`); rank 0 puts them."""
    torch, dist = pinned_gloo_rank(rank, port)
    out = _allreduce_pts(torch, dist, sizes) if kind == "allreduce" else p2p_probes(torch, dist, rank, sizes)
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
    torch, dist = pinned_gloo_rank(rank, port)
    t = torch.zeros(WAKE_BYTES // 4)
    for _ in range(5):
        dist.all_reduce(t)
    rounds = []
    for _ in range(WAKE_ROUNDS):
        after = []
        for _ in range(WAKE_CALLS):
            spin(WAKE_BUSY_S)
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
    its core), fitted to ``t = a + bytes/bw``: the ring model for 2 workers (``a = 2 latency``)
    for ``"allreduce"``; one send (``a = latency``) for ``"p2p"``, which also returns the
    probes of :mod:`daydream.calibrate_p2p`: the handshake of a late receive
    (:func:`~daydream.calibrate_p2p.p2p_handshake_ns`, with the sitting's own barrier-started
    posts; medians over the sizes up to :data:`~daydream.calibrate_p2p.P2P_POST_MAX_BYTES`), the
    extra cost of posts that collide (``_p2p_collision_pts``), the data's extra delay then
    (``_p2p_hold_pts``), the share of a late receive's wait for a busy sender
    (``_p2p_late_hold_pts``) and the cost of data landing on a busy receiver
    (``_p2p_land_pts``), as a dict of :class:`~daydream.device.DeviceProfile` field name to
    figure: ``{"p2p": (bytes/s, latency ns), "p2p_handshake": ns, "p2p_sends": (median send ns,
    stalled share), "p2p_preposted": ns (a send of the smallest size to a receive posted before
    the barrier that starts it: ``_p2p_one_way_ns``), "p2p_notified": ns (the same, its arrival
    learnt through a waiter thread), "p2p_collision": ((gap ns, extra ns), ...), "p2p_hold":
    ((gap ns, extra ns), ...), "p2p_late_hold": ((busy ns, share), ...), "p2p_land": ((bytes,
    extra ns), ...)}``."""
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
