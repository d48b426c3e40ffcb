"""The training step split over shards or stages: what each part pays in full.

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

The same holds for the other calls a training step makes once: a part that
runs as a process of its own zeroes its own gradients and runs its own
backward call, from the gradient it receives, so each part pays the call's
way in (before its first autograd node runs) and out (after its last),
where a one-process trace shows them once, the way in before the loss's
node and the way out before the optimizer step, inside that step's idle
time.  :func:`call_costs` reads them from a CPU trace's annotations
(:class:`CallCosts`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from daydream.model import EventKind, Phase

__all__ = ["PER_PARAM_SHARE", "per_parameter_ops", "step_fixed_ns", "split_step_ns", "CallCosts", "call_costs"]

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


#: Annotations of an optimizer's calls (torch.optim's profiler ranges).
STEP_PREFIX, ZERO_GRAD_PREFIX = "Optimizer.step#", "Optimizer.zero_grad#"


@dataclass(frozen=True)
class CallCosts:
    """Per iteration of a one-process CPU trace, medians (ns): the ``zero_grad`` call; the
    backward call's way in (the idle time before its first node's op, after the loss) and its
    way out (from its last op's end to the optimizer step's call, which
    :func:`step_fixed_ns` counts in the step); the step call's way out (from its last op's
    end to the call's end: its hooks, Python frames and profiler range), which a thread's
    idle time before the next iteration's boundary holds; and the rest of that idle time,
    from the end of the step call (or of a later op) to the boundary (``boundary_ns``): the
    tracer's own bookkeeping between iterations, which an untraced run does not pay.  All 0
    where the trace cannot say."""

    zero_grad_ns: float = 0.0
    backward_entry_ns: float = 0.0
    backward_exit_ns: float = 0.0
    step_exit_ns: float = 0.0
    boundary_ns: float = 0.0


def _iteration_calls(c, end, ann_names, ops, ann, it, boundary_ns=None) -> tuple | None:
    """``(zero_grad, entry, exit, step exit, boundary)`` ns of iteration ``it`` (``end``: each
    event's end; ``boundary_ns``: when the next iteration began, None if unknown), or None
    without a backward and a step."""
    now = c["iteration"] == it
    bwd = np.flatnonzero(ops & now & (c["phase"] == Phase.BACKWARD))
    step = [i for i in np.flatnonzero(ann & now) if ann_names[i].startswith(STEP_PREFIX)]
    if not len(bwd) or not step:
        return None
    first = int(bwd[np.argmin(c["start_ns"][bwd])])
    before = np.flatnonzero(ops & (end <= c["start_ns"][first]))
    entry = float(c["start_ns"][first] - end[before].max()) if len(before) else 0.0
    exit_ = float(c["start_ns"][step[0]] - end[bwd].max())
    zeros = [i for i in np.flatnonzero(ann & now) if ann_names[i].startswith(ZERO_GRAD_PREFIX)]
    zero = [float(c["dur_ns"][i]) for i in zeros]
    s0, s1 = c["start_ns"][step[-1]], end[step[-1]]
    inside = np.flatnonzero(ops & now & (c["start_ns"] >= s0) & (end <= s1))
    step_exit = float(s1 - end[inside].max()) if len(inside) else 0.0
    last = float(end[np.concatenate([np.flatnonzero(ops & now), step, zeros]).astype(np.int64)].max())
    boundary = float(boundary_ns - last) if boundary_ns is not None else 0.0
    return sum(zero), max(entry, 0.0), max(exit_, 0.0), max(step_exit, 0.0), max(boundary, 0.0)


def call_costs(rank) -> CallCosts:
    """:class:`CallCosts` of a rank's trace (a :class:`daydream.model.RankTrace`), from its
    training thread's ops and optimizer annotations over the complete iterations (the first
    left out where there are more); all 0 where no iteration has both a backward and a step.

    Examples
    --------
    >>> import numpy as np
    >>> from daydream.model import EventKind, Phase, RankTrace, StringTable
    >>> names = StringTable()
    >>> rows = [   # (kind, name, start, dur, phase): loss, backward ops, step and its update
    ...     (EventKind.CPU_OP, "aten::nll_loss", 0, 100, Phase.FORWARD),
    ...     (EventKind.CPU_OP, "NllLossBackward0", 160, 40, Phase.BACKWARD),
    ...     (EventKind.CPU_OP, "AddmmBackward0", 200, 300, Phase.BACKWARD),
    ...     (EventKind.ANNOTATION, "Optimizer.step#SGD.step", 590, 200, Phase.OPTIMIZER),
    ...     (EventKind.CPU_OP, "aten::add_", 650, 50, Phase.OPTIMIZER),
    ...     (EventKind.ANNOTATION, "Optimizer.zero_grad#SGD.zero_grad", 800, 30, Phase.OPTIMIZER)]
    >>> cols = {"kind": np.array([r[0] for r in rows], np.int8),
    ...         "name": np.array([names.intern(r[1]) for r in rows], np.int32),
    ...         "lane": np.zeros(len(rows), np.int32), "start_ns": np.array([r[2] for r in rows]),
    ...         "dur_ns": np.array([r[3] for r in rows]), "phase": np.array([r[4] for r in rows], np.int8),
    ...         "iteration": np.zeros(len(rows), np.int32)}
    >>> rank = RankTrace("t.json", 0, cols, names, StringTable(), [], np.array([0, 900]), [], 0)
    >>> call_costs(rank)     # 60 ns in after the loss, 90 out before the step's call
    CallCosts(zero_grad_ns=30.0, backward_entry_ns=60.0, backward_exit_ns=90.0, step_exit_ns=90.0, boundary_ns=70.0)

    (The step's way out: from its update's end at 700 to its own at 790; the tracer's: from
    ``zero_grad``'s end at 830 to the boundary at 900.)
    """
    c = rank.cols
    if not len(c["kind"]):
        return CallCosts()
    on = c["lane"] == rank.main_lane
    ops, ann = on & (c["kind"] == EventKind.CPU_OP), on & (c["kind"] == EventKind.ANNOTATION)
    strings = rank.names.strings
    ann_names = {int(i): strings[int(c["name"][i])] for i in np.flatnonzero(ann)}
    n_it, end = max(len(rank.boundaries_ns) - 1, 1), c["start_ns"] + c["dur_ns"]
    b = rank.boundaries_ns
    found = [x for it in range(1 if n_it > 1 else 0, n_it)
             if (x := _iteration_calls(c, end, ann_names, ops, ann, it,
                                       float(b[it + 1]) if it + 1 < len(b) else None)) is not None]
    if not found:
        return CallCosts()
    return CallCosts(*(float(np.median(v)) for v in zip(*found)))
