"""Data landing on a busy core takes some of it.

A Hydra process posts its receives before a step starts, each with a thread
waiting on it; when a model's activation or gradient arrives while the
process computes another model's shard, the backend's threads and the
waiter run on its core to take the data in, and that shard takes longer
(the real runtime's second shard 0.2-0.3 ms with one 128 KiB activation
landing; two pinned processes, one message landing 1 ms into 2.5 ms of a
linear stack's forward and backward passes: +109-181 us at 128 KiB in the
measurement alone, +156-588 us in seven validation calibrations, session 35).  A
receive whose process is waiting for it costs the transfer time instead,
which the calibrated point-to-point figures already hold.  Calibration
measures the cost by message size (``DeviceProfile.p2p_land``,
:meth:`~daydream.device.DeviceProfile.p2p_land_ns`); each transfer that
lands, in a simulated schedule, while another task runs on its receiver's
lane lengthens that task by it.  One pass, from one simulated schedule, as
:mod:`optimizations._resume`.
"""
from __future__ import annotations

import numpy as np

from daydream.model import LaneKind

__all__ = ["add_landing_costs"]


def add_landing_costs(g, res, device) -> tuple:
    """Lengthen each compute task of ``g`` that ``res`` (a simulation of ``g``) is running when a
    transfer to its lane arrives, by ``device.p2p_land_ns(bytes)`` per transfer, in place.

    A transfer is a task on a communication lane (its ``bytes`` the message); its receiver's
    lane is that of the compute task it feeds.  Returns ``(transfers landed on busy lanes, ns added)``.

    Examples
    --------
    >>> from daydream.device import DeviceProfile
    >>> from daydream.graph.graph import DependencyGraph
    >>> from daydream.model import Lane
    >>> from daydream.primitives import insert
    >>> from daydream.sim import simulate
    >>> g = DependencyGraph()
    >>> a, b = (g.add_lane(Lane(0, LaneKind.CPU_THREAD, "p", str(i), str(i))) for i in range(2))
    >>> link = g.add_lane(Lane(0, LaneKind.COMM, "p", "a>b", "link"))
    >>> x = insert(g, link, dur_ns=500, name="activation")
    >>> g.tasks["bytes"][x] = 128 * 1024
    >>> busy = insert(g, b, dur_ns=2000, name="other model's shard")     # 0-2000 ns: x lands at 500
    >>> fed = insert(g, b, dur_ns=1000, name="next shard", deps=[x])
    >>> dev = DeviceProfile("x", "cpu", {}, {}, 0, p2p_land={"gloo": ((128 * 1024, 100.0),)})
    >>> add_landing_costs(g, simulate(g), dev)
    (1, 100)
    >>> int(g.tasks["dur_ns"][busy]), int(g.tasks["dur_ns"][fed])
    (2100, 1000)
    """
    if not device.p2p_land:
        return 0, 0
    T = g.tasks
    comm = np.array([ln.kind == LaneKind.COMM for ln in g.lanes], bool)
    src, dst = g.edges["src"], g.edges["dst"]
    n, added = 0, 0
    for x in np.flatnonzero(comm[T["lane"]]).tolist():
        fed = dst[(src == x) & ~comm[T["lane"][dst]]]
        if not len(fed):
            continue
        lane = int(T["lane"][fed[0]])
        seq = np.asarray(g.lane_tasks[lane], np.int64)
        arrival = res.end_ns[x]
        running = seq[(res.start_ns[seq] < arrival) & (res.end_ns[seq] > arrival)]
        extra = int(round(device.p2p_land_ns(float(T["bytes"][x]))))
        if len(running) and extra > 0:
            T["dur_ns"][running[0]] += extra
            n, added = n + 1, added + extra
    return n, added
