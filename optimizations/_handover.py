"""Hand-over effects of gloo's point-to-point sends on a built pipeline graph.

Applied by :func:`optimizations._pipegraph.simulate_pipeline` to a
:class:`~optimizations._pipegraph.PipeGraph` before it is simulated:

* :func:`add_post_collisions`: posts that two ranks make to each other at
  about the same moment cost more (``p2p_collision``, calibrated).  In gloo a
  post holds the pair's lock while the peer's notice can arrive; the thread
  that reads it wakes, may preempt the poster on its core and spins for the
  lock for a scheduler slice, milliseconds on Linux (both posts stall); the
  data of such a send leaves later still (``p2p_hold``, calibrated: its
  transfer is lengthened).
* :func:`add_late_holds`: a send whose receive is posted while its sender
  computes waits part of that compute (``p2p_late_hold``).

One pass each: the gaps are those of the schedule without the stalls.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from daydream.calibrate_p2p import P2P_LATE_HOLD_BUSY_S
from daydream.sim import simulate

if TYPE_CHECKING:
    from ._pipegraph import PipeGraph

__all__ = ["add_post_collisions", "add_late_holds", "LATE_HOLD_ROOM_MAX_NS"]


def add_post_collisions(pg: PipeGraph, device) -> tuple:
    """Lengthen the posts that collide with a post of the peer they address (see the module
    docstring), each by :meth:`~daydream.device.DeviceProfile.p2p_collision_ns` of the gap to the
    nearest such post, and hold back the data of each such send by
    :meth:`~daydream.device.DeviceProfile.p2p_hold_ns` (its transfer lengthened), as ``pg.graph``
    simulates now.  Returns ``(posts lengthened, ns added, transfers held, ns held)``.

    Nothing to do (zeros) without posts or a calibrated ``p2p_collision`` / ``p2p_hold``.
    """
    window = max(device.p2p_collision_window_ns(), device.p2p_hold_window_ns())
    if not pg.posts or window <= 0:
        return 0, 0, 0, 0
    ids = np.array([t for t, _ in pg.posts], np.int64)
    peer = np.array([p for _, p in pg.posts], np.int64)
    rank = pg.graph.tasks["rank"][ids].astype(np.int64)
    start = simulate(pg.graph).start_ns[ids]
    order = np.argsort(start, kind="stable").tolist()
    extra, hold = np.zeros(len(ids)), np.zeros(len(ids))
    for k, i in enumerate(order):
        for j in order[k + 1:]:
            gap = start[j] - start[i]
            if gap >= window:
                break
            if rank[j] == peer[i] and rank[i] == peer[j]:
                e, h = device.p2p_collision_ns(gap), device.p2p_hold_ns(gap)
                extra[i], extra[j] = max(extra[i], e), max(extra[j], e)
                hold[i], hold[j] = max(hold[i], h), max(hold[j], h)
    dur = pg.graph.tasks["dur_ns"]
    hit = extra > 0
    dur[ids[hit]] += np.round(extra[hit]).astype(np.int64)
    held = [(pg.sent[int(t)], h) for t, h in zip(ids, hold) if h > 0 and int(t) in pg.sent]
    for x, h in held:
        dur[x] += int(round(h))
    return int(hit.sum()), int(np.round(extra[hit]).sum()), len(held), int(round(sum(h for _, h in held)))


#: The longest wait for a busy sender :func:`add_late_holds` counts: as long as the calibration's
#: sender computes after its post (:data:`daydream.calibrate_p2p.P2P_LATE_HOLD_BUSY_S`); past a
#: scheduler slice or two the data leaves anyway (``benchmarks/gloo_handover.py --compute mm
#: --after-ms 6``: receives 2 and 4 ms late waited 0.8 and 0.3 ms on average).
LATE_HOLD_ROOM_MAX_NS = int(P2P_LATE_HOLD_BUSY_S * 1e9)


def add_late_holds(pg: PipeGraph, device) -> tuple:
    """Lengthen the transfer of each send whose receive is posted after the send's post ends, as
    ``pg.graph`` simulates now, by :meth:`~daydream.device.DeviceProfile.p2p_late_hold_share` (of
    how long the sender had computed without a break when its post ended) of the time from the
    receive's post's end until the sender's compute lane next sits idle (at most
    :data:`LATE_HOLD_ROOM_MAX_NS`): with the sender busy with torch ops, a share of such sends
    leave only then.  Returns ``(transfers lengthened, ns added)``; nothing without calibrated
    shares.
    """
    if not device.p2p_late_hold or not pg.received:
        return 0, 0
    g = pg.graph
    res = simulate(g)
    send_of = {x: s for s, x in pg.sent.items()}
    stretches = {}      # compute lane -> (starts, ends) of its stretches without a break
    n = added = 0
    for x, r in pg.received.items():
        s = send_of.get(x)
        if s is None or res.start_ns[r] < res.end_ns[s]:
            continue
        lane = int(g.tasks["lane"][s])
        if lane not in stretches:
            tasks = np.asarray(g.lane_tasks[lane])
            start, end = res.start_ns[tasks], res.end_ns[tasks]
            brk = np.flatnonzero(start[1:] > end[:-1])
            stretches[lane] = start[np.r_[0, brk + 1]], end[np.r_[brk, len(tasks) - 1]]
        first, last = stretches[lane]
        k = np.searchsorted(first, res.end_ns[s], side="right") - 1
        if k + 1 < len(first) and last[k] > res.end_ns[r]:    # the lane idles after this stretch
            room = min(last[k] - res.end_ns[r], LATE_HOLD_ROOM_MAX_NS)
            h = int(round(device.p2p_late_hold_share(res.end_ns[s] - first[k]) * room))
            g.tasks["dur_ns"][x] += h
            n, added = n + 1, added + h
    return n, added
