"""Hydra's shards from a one-process trace: per-layer costs, the split, each shard's costs.

:func:`layer_units` reads each leaf module's forward and backward time from the
trace, :func:`balanced_split` (or ``layers=``, :func:`parse_layers`) cuts the
layers into shards, and :func:`shard_costs` totals each shard's forward,
backward and optimizer step, with the calls every shard repeats
(:func:`step_call_ns`, :func:`shard_calls`).  Used by :mod:`optimizations.hydra`.
"""
from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from daydream.model import EventKind, LaneKind, Phase

from ._common import leaf_paths
from ._optstep import CallCosts, call_costs, split_step_ns, step_fixed_ns
from .base import NotApplicable, OptionError

__all__ = ["Unit", "ShardCosts", "layer_units", "step_call_ns", "balanced_split", "parse_layers", "shard_costs",
           "shard_calls"]


@dataclass(frozen=True)
class Unit:
    """One layer (leaf module) of the traced model: time per iteration (means) and sizes;
    ``typical_ns``, the (lower) median over the iterations of its forward + backward, which
    the balanced split weighs (0: the means' sum)."""

    name: str
    fwd_ns: float
    bwd_ns: float
    param_bytes: int
    output_bytes: int
    typical_ns: float = 0.0

    @property
    def split_ns(self) -> float:
        """The time :func:`balanced_split` weighs: ``typical_ns``, else forward + backward."""
        return self.typical_ns or self.fwd_ns + self.bwd_ns


@dataclass(frozen=True)
class ShardCosts:
    """Per shard: forward, backward, optimizer time (ns), bytes sent to the next shard, layers
    and parameter bytes."""

    fwd_ns: tuple
    bwd_ns: tuple
    opt_ns: tuple
    send_bytes: tuple
    layers: tuple
    param_bytes: tuple = ()


def _work_tasks(g):
    """Tasks whose time makes up a layer's cost: GPU kernels on a GPU trace, else the
    thread that carries the iteration markers (with its gaps), in execution order."""
    T = g.tasks
    gpu = [li for li, ln in enumerate(g.lanes) if ln.kind == LaneKind.GPU_STREAM]
    if gpu:
        sel = np.flatnonzero(np.isin(T["lane"], gpu) & (T["kind"] == EventKind.KERNEL))
        order = np.argsort(T["traced_start_ns"][sel], kind="stable")
        return sel[order], False
    rank = min(g.markers)
    lane = int(T["lane"][g.markers[rank][0]]) if g.markers[rank] else 0
    return np.asarray(g.lane_tasks[lane], np.int64), True


def _counted_iterations(g) -> tuple:
    """``(first, end)``: the iterations whose costs count, ``range(first, end)`` (complete
    iterations; the first left out where there are more)."""
    n_it = max(1, max(len(m) - 1 for m in g.markers.values()))
    return (1 if n_it > 1 else 0), n_it


def layer_units(g, table: dict):
    """Per leaf module in forward order: its :class:`Unit`; and the per-iteration time of
    data loading + other work (first shard) and of the optimizer step (ns).

    A unit's times are means over the iterations, as a replay's; its ``typical_ns`` the median,
    so that a stall in one iteration (kept as time between ops,
    :func:`daydream.graph.stalls.settle_stalls`) does not move the split: one of 3.4 ms an
    iteration in a validation's first trace chose 5:4 layers where every other trace gave 4:5
    (session 92)."""
    leaves = leaf_paths(table)
    lid = {g.layers.get(p): p for p in leaves if g.layers.get(p) >= 0}
    T = g.tasks
    tasks, with_gaps = _work_tasks(g)
    its = T["iteration"][tasks]
    first, n_it = _counted_iterations(g)
    fwd, bwd, order = {}, {}, []
    head = tail = opt = 0.0
    cur_f, cur_b = None, None
    per_it = defaultdict(float)     # (unit, iteration) -> forward + backward ns
    for t in tasks[(its >= first) & (its < n_it)].tolist():
        cost = float(T["dur_ns"][t]) + (float(T["gap_ns"][t]) if with_gaps else 0.0)
        ph, unit = int(T["phase"][t]), lid.get(int(T["layer"][t]))
        it = int(T["iteration"][t])
        if T["kind"][t] == EventKind.MARKER:
            head += cost
        elif ph == Phase.FORWARD:
            if unit is not None and unit not in fwd:
                order.append(unit)
            cur_f = unit or cur_f
            if cur_f is None:
                head += cost
            else:
                fwd[cur_f] = fwd.get(cur_f, 0.0) + cost
                per_it[cur_f, it] += cost
        elif ph == Phase.BACKWARD:
            cur_b = unit or cur_b
            if cur_b is None:
                tail += cost
                per_it[None, it] += cost
            else:
                bwd[cur_b] = bwd.get(cur_b, 0.0) + cost
                per_it[cur_b, it] += cost
        elif ph == Phase.OPTIMIZER:
            opt += cost
        else:
            head += cost
    if not order:
        raise NotApplicable("hydra: no forward work of any module was traced; cannot split the model into shards")
    n = n_it - first
    for it in range(first, n_it):       # work of no module after the last one's goes to it
        per_it[order[-1], it] += per_it.pop((None, it), 0.0)

    def typical(p):      # the lower median: a stall in one of an even number of iterations moves it no further
        return sorted(per_it[p, it] for it in range(first, n_it))[(n - 1) // 2]

    units = [Unit(p, fwd.get(p, 0.0) / n, bwd.get(p, 0.0) / n, int(table[p].get("param_bytes") or 0),
                  int(table[p].get("output_bytes") or 0), typical(p)) for p in order]
    units[-1] = dataclasses.replace(units[-1], bwd_ns=units[-1].bwd_ns + tail / n)
    return units, head / n, opt / n


def step_call_ns(g) -> float:
    """Per iteration, the traced optimizer step's part that each shard's own step pays in full
    (:func:`optimizations._optstep.step_fixed_ns`; 0 on a GPU trace, whose kernels are all updates)."""
    tasks, with_gaps = _work_tasks(g)
    if not with_gaps or not len(tasks):
        return 0.0
    T = g.tasks
    dur = T["dur_ns"][tasks].astype(np.float64)
    cost = dur + T["gap_ns"][tasks]          # as layer_units counts them
    start = T["traced_start_ns"][tasks].astype(np.float64)
    its = T["iteration"][tasks]
    first, n_it = _counted_iterations(g)
    fixed = [step_fixed_ns(g, tasks[k], cost[k], start[k], start[k] + dur[k])
             for k in (its == i for i in range(first, n_it))]
    return float(np.median(fixed)) if fixed else 0.0     # median: a pause before one step is no call cost


def balanced_split(costs, parts: int) -> list:
    """Cut ``costs`` into ``parts`` contiguous non-empty groups minimising the largest sum.

    Returns the number of items per group.

    >>> balanced_split([1, 1, 1, 1, 4], 2)
    [4, 1]
    >>> balanced_split([3, 1, 1, 1], 3)
    [1, 1, 2]
    """
    n = len(costs)
    if parts < 1 or parts > n:
        raise OptionError(f"cannot split {n} layer(s) into {parts} shard(s)")
    pre = np.concatenate([[0.0], np.cumsum(costs)])
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(parts + 1)]
    cut = [[0] * (n + 1) for _ in range(parts + 1)]
    best[0][0] = 0.0
    for p in range(1, parts + 1):
        for i in range(p, n - (parts - p) + 1):
            for j in range(p - 1, i):
                v = max(best[p - 1][j], pre[i] - pre[j])
                if v < best[p][i] - 1e-9:
                    best[p][i], cut[p][i] = v, j
    sizes, i = [], n
    for p in range(parts, 0, -1):
        j = cut[p][i]
        sizes.append(i - j)
        i = j
    return sizes[::-1]


def parse_layers(spec: str, devices: int, n_layers: int) -> list:
    """Layers per shard from ``"4:2"`` (one count per device, adding up to the model's layers).

    >>> parse_layers("4:2", 2, 6)
    [4, 2]
    >>> parse_layers("", 2, 6)
    []
    """
    if not spec:
        return []
    try:
        sizes = [int(x) for x in str(spec).split(":")]
    except ValueError:
        raise OptionError(f"hydra: layers={spec!r} is not a list of layer counts such as 4:2") from None
    if len(sizes) != devices or min(sizes) < 1 or sum(sizes) != n_layers:
        raise OptionError(f"hydra: layers={spec} must give each of the {devices} shard(s) at least one layer "
                          f"and add up to the model's {n_layers} layer(s)")
    return sizes


def shard_costs(units, head_ns: float, opt_ns: float, devices: int, sizes=(), opt_call_ns: float = 0.0,
                calls: CallCosts = CallCosts()) -> ShardCosts:
    """Split the layers into ``devices`` shards (``sizes`` layers each; by default balanced)
    and total each shard's costs.  Each shard's optimizer step takes its parameters' share of
    the traced step's updates and the whole ``opt_call_ns`` (the call around them).  Each
    shard zeroes its own gradients and runs its own backward call (``calls``): every shard but
    the first (whose forward holds the iteration's other work, the trace's ``zero_grad`` with
    it) adds the ``zero_grad`` call; every shard but the last (whose call starts at the loss,
    as the trace's) adds the call's way in; every shard's backward takes the way out, which
    the trace counts in the step's idle time (``opt_ns`` and ``opt_call_ns`` lose it).  Every
    shard's step takes the step call's way out, which the trace counts in the idle time before
    the next iteration's boundary, in the first shard's ``head_ns``; that loses it, and the
    tracer's own time at the boundary (``calls.boundary_ns``) with it.

    >>> u = [Unit("a", 100.0, 200.0, 4, 8), Unit("b", 100.0, 200.0, 4, 8)]
    >>> c = shard_costs(u, 10.0, 500.0, 2, opt_call_ns=100.0, calls=CallCosts(5.0, 20.0, 30.0))
    >>> c.fwd_ns, c.bwd_ns, c.opt_ns
    ((110.0, 105.0), (250.0, 230.0), (270.0, 270.0))
    >>> c = shard_costs(u, 10.0, 500.0, 2, opt_call_ns=100.0, calls=CallCosts(5.0, 20.0, 30.0, 4.0, 3.0))
    >>> c.fwd_ns, c.opt_ns
    ((103.0, 105.0), (274.0, 274.0))
    """
    sizes = list(sizes) or balanced_split([u.split_ns for u in units], devices)
    groups, i = [], 0
    for s in sizes:
        groups.append(units[i:i + s])
        i += s
    pbytes = [sum(u.param_bytes for u in grp) for grp in groups]
    total = sum(pbytes)
    share = [b / total if total else 1.0 / devices for b in pbytes]
    out_ns = min(calls.backward_exit_ns, opt_call_ns)
    head_ns = max(head_ns - calls.step_exit_ns - calls.boundary_ns, 0.0)
    fwd = [sum(u.fwd_ns for u in grp) + (head_ns if s == 0 else calls.zero_grad_ns) for s, grp in enumerate(groups)]
    bwd = [sum(u.bwd_ns for u in grp) + out_ns + (calls.backward_entry_ns if s < len(groups) - 1 else 0.0)
           for s, grp in enumerate(groups)]
    opt = tuple(x + calls.step_exit_ns for x in split_step_ns(opt_ns - out_ns, opt_call_ns - out_ns, share))
    return ShardCosts(tuple(fwd), tuple(bwd), opt,
                      tuple(grp[-1].output_bytes for grp in groups[:-1]), tuple(sizes), tuple(pbytes))


def shard_calls(ctx) -> CallCosts:
    """The calls each shard of a CPU trace's model repeats (:func:`optimizations._optstep.call_costs`
    of the rank whose training thread :func:`layer_units` reads); none on a GPU trace, whose
    shard costs are kernel times."""
    g = ctx.graph
    if not _work_tasks(g)[1]:
        return CallCosts()
    rank = next((r for r in ctx.trace.ranks if r.rank == min(g.markers)), None)
    return call_costs(rank) if rank is not None else CallCosts()
