"""The optimizer step split over shards or stages: what each part pays in full.

An optimizer step is a call (hooks, parameter-group bookkeeping, the
profiler's range, Python frames) around the updates of its parameters (in-place
``mul_`` / ``add_`` / ... per parameter and state tensor).  When a model is
split over processes (pipeline stages, Hydra shards), each part runs a step of
its own over its parameters: the updates divide between the parts, the call
around them does not.  On the bundled MLP (10 parameter tensors, SGD with
momentum, one thread) the call took 130-160 us of a 770-810 us step, and a
Hydra shard's step over half the parameters took 0.56-0.60 ms where an
even split of the traced step gave 0.41 ms.

:func:`step_fixed_ns` measures the call's part in a trace: the optimizer
phase's time before its first per-parameter op and after its last.
"""
from __future__ import annotations

import numpy as np

from daydream.model import Phase

__all__ = ["PER_PARAM_SHARE", "per_parameter_ops", "step_fixed_ns", "split_step_ns"]

#: An optimizer-step op name counts as per-parameter when it runs at least 1/PER_PARAM_SHARE as
#: often as the step's most frequent op and is in place (``..._``): SGD runs ``mul_`` and two
#: ``add_`` per parameter, Adam five in-place ops; the step's per-parameter scalar conversions
#: (``to``, ``_to_copy``) run as often but are not in place (their ``copy_`` is, and moves 0-dimensional
#: tensors: 0 bytes, which fused-adam's sizing leaves out).
PER_PARAM_SHARE = 4


def per_parameter_ops(g, step_tasks) -> np.ndarray:
    """Name ids of the per-parameter in-place ops among ``step_tasks`` (tasks of optimizer steps)."""
    names, counts = np.unique(g.tasks["name"][step_tasks], return_counts=True)
    if not len(names):
        return np.zeros(0, np.int64)
    return np.asarray([n for n, c in zip(names.tolist(), counts.tolist())
                       if c * PER_PARAM_SHARE >= counts.max() and g.names[n].endswith("_")], np.int64)


def step_fixed_ns(g, tasks, cost_ns, start_ns, end_ns) -> float:
    """The part of one iteration's optimizer step that does not scale with its parameters (ns).

    ``tasks``: one iteration's tasks of the training thread, in execution
    order; ``cost_ns``: the time the caller counts for each (its own and the
    idle time it attributes to it), ``start_ns`` / ``end_ns``: when each ran.
    The optimizer phase's counted time less the span from the first
    per-parameter op's start to the last one's end: the call's work and idle
    time around the updates, however the caller attributes idle time (0
    without a step or without per-parameter ops).

    Examples
    --------
    >>> from daydream.graph.graph import DependencyGraph
    >>> from daydream.model import Lane, LaneKind, Phase
    >>> from daydream.primitives import insert
    >>> g = DependencyGraph()
    >>> lane = g.add_lane(Lane(0, LaneKind.CPU_THREAD, "p", "0", "main"))
    >>> spec = [("backward", Phase.BACKWARD)] + [("aten::add_", Phase.OPTIMIZER)] * 4 + [("hook", Phase.OPTIMIZER)]
    >>> ts = np.array([insert(g, lane, dur_ns=10, name=n, phase=p) for n, p in spec])
    >>> start = np.array([0, 130, 180, 230, 280, 310])       # 120 of Python before the first add_
    >>> cost = np.array([10, 130, 50, 50, 50, 30])           # each op's time and the gap before it
    >>> step_fixed_ns(g, ts, cost, start, start + 10)        # 310 counted, 160 of it the adds' span
    150.0
    """
    T = g.tasks
    tasks = np.asarray(tasks, np.int64)
    idx = np.flatnonzero(T["phase"][tasks] == Phase.OPTIMIZER)
    if not len(idx):
        return 0.0
    per = np.isin(T["name"][tasks[idx]], per_parameter_ops(g, tasks[idx]))
    if not per.any():
        return 0.0
    first, last = idx[np.argmax(per)], idx[len(per) - 1 - np.argmax(per[::-1])]
    counted = float(np.asarray(cost_ns, np.float64)[idx].sum())
    return max(0.0, counted - float(end_ns[last] - start_ns[first]))


def split_step_ns(step_ns: float, fixed_ns: float, shares) -> tuple:
    """Each part's step: the whole call's fixed part, and its ``shares`` of the updates.

    >>> split_step_ns(800.0, 150.0, (0.5, 0.5))
    (475.0, 475.0)
    """
    fixed = min(max(fixed_ns, 0.0), step_ns)
    return tuple(fixed + (step_ns - fixed) * s for s in shares)
