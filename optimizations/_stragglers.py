"""Expected waits for the slowest worker at the barriers of a synchronous job.

A collective (an all-reduce, a broadcast) cannot finish before every worker has
reached it, so in an N-worker job each worker waits, at such a barrier, for
the slowest of the N to get through the work since the previous one.
The trace holds one worker; its own spread shows how much that work varies
from one iteration to the next.  Assuming the workers vary independently
(their own OS jitter, page faults, allocator and Python pauses; not a machine
that slows them all at once), worker 1's segment in iteration ``i`` is the
traced one, ``x_i``, and the other ``N - 1`` are drawn from the traced
segments; the expected wait is ``E[max(x_i, X_2, ..., X_N)] - x_i``.  Averaged
over iterations this is the expected maximum of N draws minus the mean (for
normal noise about ``0.56 sigma`` at N = 2, ``1.42 sigma`` at N = 8).

A trace with steady iterations (a GPU job whose CPU runs ahead) gets waits
near zero; a noisy one gets the straggler cost it will pay.

Processes also differ in speed for their whole run (where their memory
landed, their core): one trace cannot show that.  Where the device profile
measured it (``process_spread``: pairs of processes started together on the
host's cores), each iteration's wait adds the slowest of N processes'
expected excess over a typical one (:func:`slowest_of_factor`) times the
iteration's traced segment.
"""
from __future__ import annotations

import numpy as np

from daydream.model import EventKind
from daydream.primitives import insert

__all__ = ["expected_waits_ns", "slowest_of_factor", "insert_barrier_waits", "wait_for_stragglers", "WAIT_NAME"]

#: Name of the inserted wait tasks (timeline and breakdown show it).
WAIT_NAME = "wait for the slowest worker (expected)"


def expected_waits_ns(segments_ns, workers: int) -> np.ndarray:
    """Expected wait of a worker whose segment took ``x_i``, at a barrier of ``workers``.

    The other ``workers - 1`` segments are drawn, with replacement, from
    ``segments_ns`` (the empirical distribution).

    Examples
    --------
    >>> expected_waits_ns([10, 20], 2).tolist()
    [5.0, 0.0]
    >>> expected_waits_ns([10, 20], 1).tolist()
    [0.0, 0.0]
    >>> round(float(expected_waits_ns([10, 20], 3).mean()), 3)   # E[max of 3] - mean = 18.75 - 15
    3.75
    """
    x = np.asarray(segments_ns, float)
    if workers <= 1 or len(x) < 2:
        return np.zeros(len(x))
    s = np.sort(x)
    k = np.arange(1, len(s) + 1) / len(s)
    p = k ** (workers - 1) - (k - 1 / len(s)) ** (workers - 1)   # P(max of the others is s_k)
    return np.maximum.outer(x, s) @ p - x


def slowest_of_factor(spread, workers: int) -> float:
    """How much slower the slowest of ``workers`` processes is than a typical one, from relative
    speeds ``spread`` (a device profile's ``process_spread``): ``E[max of N draws] / mean - 1``.

    >>> slowest_of_factor((0.9, 1.1), 2)
    0.05
    >>> slowest_of_factor((), 8)
    0.0
    """
    x = np.asarray(spread, float)
    if workers <= 1 or not len(x):
        return 0.0
    return round(max(float(expected_waits_ns(x, workers).mean() / x.mean()), 0.0), 12)


def insert_barrier_waits(g, barriers, workers: int, slower_by: float = 0.0) -> list:
    """Insert the expected straggler wait before each barrier.

    Parameters
    ----------
    g : DependencyGraph
    barriers : iterable of (int, int)
        ``(anchor, gate)``: a traced task that marks when the worker reaches
        the barrier (its ``traced_start_ns``) and the task the barrier gates,
        which the wait goes before on its lane; the same barrier of every
        iteration.  The segments between a rank's consecutive barriers form
        the distribution; a rank's first barrier gets the mean wait.
    workers : int
    slower_by : float
        The slowest worker's lasting excess (a fraction), added to each wait in
        proportion to the segment before it (a rank's first barrier: the mean segment).

    Returns
    -------
    list of int
        The inserted wait tasks.
    """
    T = g.tasks
    rows = sorted((int(T["rank"][gate]), int(T["traced_start_ns"][anchor]), gate) for anchor, gate in barriers)
    segs = [(i, start - rows[i - 1][1]) for i, (rank, start, _) in enumerate(rows) if i and rows[i - 1][0] == rank]
    lengths = np.array([s for _, s in segs], float)
    w = expected_waits_ns(lengths, workers) + slower_by * lengths
    wait = {i: float(v) for (i, _), v in zip(segs, w)}
    first = float(w.mean()) if len(w) else 0.0   # a rank's first barrier: no segment before it
    out = []
    for i, (_, _, gate) in enumerate(rows):
        ns = wait.get(i, first)
        if ns >= 1:
            out.append(insert(g, int(T["lane"][gate]), dur_ns=int(round(ns)), name=WAIT_NAME,
                              kind=EventKind.SYNC, before=gate, phase=int(T["phase"][gate]),
                              iteration=int(T["iteration"][gate])))
    return out


def wait_for_stragglers(ctx, barriers, workers: int, who: str) -> None:
    """One expected wait per iteration, before its last barrier, with a note of the added time.

    ``barriers`` are ``(anchor, gate)`` pairs (see :func:`insert_barrier_waits`);
    of each rank's iteration only the last one (by the anchor's traced start)
    gets a wait, from the spread of whole iterations.  Waits before every
    barrier, each from its own stretch's spread, would add up the same
    slowdown several times whenever a slow iteration is slow throughout (as
    on the machines measured); the iteration's wait is the least the job
    pays if stretches vary independently, and all it pays if they vary
    together.  Only for a one-rank trace: a multi-rank trace's iterations
    already include its own ranks' waits.
    """
    ranks = list(ctx.trace.ranks)
    if len(ranks) != 1 or ranks[0].world_size() != 1:
        ctx.note(f"{who}: straggler waits not added (the trace has several ranks; their iteration times "
                 "already include waits)")
        return
    T = ctx.graph.tasks
    last = {}
    for anchor, gate in barriers:
        key = (int(T["rank"][gate]), int(T["iteration"][gate]))
        if key not in last or T["traced_start_ns"][anchor] > T["traced_start_ns"][last[key][0]]:
            last[key] = (anchor, gate)
    slower_by = slowest_of_factor(ctx.device.process_spread, workers)
    waits = insert_barrier_waits(ctx.graph, last.values(), workers, slower_by)
    if waits:
        T = ctx.graph.tasks
        n_it = max(1, len(np.unique(T["iteration"][waits])))
        lasting = f" and the profile's process-to-process spread: +{slower_by * 100:.1f} %" if slower_by else ""
        ctx.note(f"{who}: expected wait for the slowest of {workers} workers {T['dur_ns'][waits].sum() / n_it / 1e6:.2f}"
                 f" ms per iteration (the trace's iteration-to-iteration spread{lasting}; `stragglers=false` leaves "
                 "it out)")
