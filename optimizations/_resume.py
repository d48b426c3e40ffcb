"""Work resumed after its lane sat idle runs slower.

A rank of a pipeline or a Hydra job waits for its peer between its tasks;
on this project's CPU host the work it then resumes takes longer than the
same work run right after the previous task (a shard's backward 1.05x /
1.12x / 1.16x and its optimizer step 1.02x / 1.20x / 1.19x after 1 / 3.5 /
8 ms asleep: ``benchmarks/post_gap.py``; caches and predictors gone cold).
A one-process trace runs every task right after the one before and never
shows it.  Calibration measures the factor by gap (``DeviceProfile.resume``,
:meth:`~daydream.device.DeviceProfile.resume_factor`); each task on a compute
lane that the simulated schedule starts after its lane was idle takes that
factor of its duration.  One pass, from one simulated schedule: the longer
tasks move what follows, which changes few gaps by much.  Nothing changes
where the profile has no ``resume`` figures (GPU profiles, older ones).
"""
from __future__ import annotations

import numpy as np

__all__ = ["add_resume_costs"]


def add_resume_costs(g, lanes, res, device, period_ns: int | None = None) -> tuple:
    """Lengthen each task on ``lanes`` that ``res`` (a simulation of ``g``) starts after its lane
    sat idle, by ``device.resume_factor(gap)`` of its duration, in place.  A lane's first task
    has no gap, unless ``g`` is one step of a loop that repeats every ``period_ns``: then its gap
    runs from the lane's last task of the step before (``period_ns`` earlier) to its start.
    Returns ``(tasks lengthened, ns added)``.

    Examples
    --------
    >>> from daydream.device import DeviceProfile
    >>> from daydream.graph.graph import DependencyGraph
    >>> from daydream.model import Lane, LaneKind
    >>> from daydream.primitives import insert
    >>> from daydream.sim import simulate
    >>> g = DependencyGraph()
    >>> a, b = (g.add_lane(Lane(0, LaneKind.CPU_THREAD, "p", str(i), str(i))) for i in range(2))
    >>> t0 = insert(g, a, dur_ns=1000, name="first")
    >>> t1 = insert(g, b, dur_ns=3000, name="peer")
    >>> t2 = insert(g, a, dur_ns=1000, name="after the peer", deps=[t1])    # idle 2000 ns before it
    >>> dev = DeviceProfile("x", "cpu", {}, {}, 0, resume=((2000, 1.5),))
    >>> add_resume_costs(g, [a, b], simulate(g), dev)
    (1, 500)
    >>> int(g.tasks["dur_ns"][t2])
    1500

    The step repeated every 5000 ns: lane ``a``, done at 4000, sits idle 1000 ns before its first
    task, and ``b``, done at 3000, 2000 ns before its one:

    >>> g.tasks["dur_ns"][t2] = 1000
    >>> dev = DeviceProfile("x", "cpu", {}, {}, 0, resume=((1000, 1.2), (2000, 1.5)))
    >>> add_resume_costs(g, [a, b], simulate(g), dev, period_ns=5000)
    (3, 2200)
    >>> [int(g.tasks["dur_ns"][t]) for t in (t0, t1, t2)]
    [1200, 4500, 1500]
    """
    if not device.resume:
        return 0, 0
    n, added = 0, 0
    for ln in lanes:
        seq = np.asarray(g.lane_tasks[ln], np.int64)
        if len(seq) < (1 if period_ns else 2):
            continue
        order = seq[np.argsort(res.start_ns[seq], kind="stable")]
        gaps = res.start_ns[order[1:]] - res.end_ns[order[:-1]]
        if period_ns:
            wrap = max(int(res.start_ns[order[0]]) + period_ns - int(res.end_ns[order].max()), 0)
            gaps = np.concatenate([[wrap], gaps])
        else:
            order = order[1:]
        for t, gap in zip(order.tolist(), gaps.tolist()):
            extra = int(round(g.tasks["dur_ns"][t] * (device.resume_factor(gap) - 1.0)))
            if extra > 0:
                g.tasks["dur_ns"][t] += extra
                n, added = n + 1, added + extra
    return n, added
