"""The re-run sequence: one traced iteration's op calls in order, with what each argument is.

* :func:`op_calls`: one task per call that a re-run makes (an op split by its
  nested calls is one call; of nested ops one level).
* :func:`iteration_sequence`: the signatures of those calls, each argument that
  is a layer's parameter, optimizer state or gradient named
  (:func:`parameter_keys`, :func:`optimizer_keys`), for
  :func:`daydream.opseq.sequence_ratios`.
"""
from __future__ import annotations

import json

import numpy as np

from daydream.model import EventKind, Phase
from daydream.opseq import GRAD_SUFFIX

from ._layers import flows_of, meta, signatures_of

__all__ = ["op_calls", "iteration_calls", "iteration_sequence", "optimizer_keys", "parameter_keys", "STATE_SUFFIX"]


def op_calls(ctx, tasks, rerunnable=None) -> list:
    """``tasks`` (in traced order) reduced to one task per call that a re-run makes.

    An op with nested calls is several slices in the graph (its self time
    between them), but one call; and re-running an op re-runs its nested
    calls.  So each op counts once, at its first slice, and of nested ops
    only one level is kept.  An op *wraps* the ops nested in it, and is left
    out for them, where it cannot be re-run (not in ``rerunnable``, a set of
    tasks, where given: an autograd node); otherwise an op with FLOPs of its
    own does the work (``mm`` around its ``resolve_conj`` calls) and keeps the
    ops nested in it out, and one without wraps them where FLOPs are nested
    in it (``linear`` around ``addmm``) or its own slices take less than half
    its time.  The transformer's sequence listed 1495 slices of 844 calls,
    ``mm`` 66 times for 19 calls, until session 44.

    >>> from daydream.graph.graph import DependencyGraph
    >>> from daydream.model import Lane, LaneKind
    >>> from types import SimpleNamespace as NS
    >>> g = DependencyGraph(); cpu = g.add_lane(Lane(0, LaneKind.CPU_THREAD, 1, 1))
    >>> # events: 0 linear [0, 100) > 1 addmm [10, 90); 2 mm [100, 200) > 3 resolve_conj [150, 152)
    >>> _ = g.add_tasks(lane=[cpu] * 6, kind=[EventKind.CPU_OP] * 6, event=[0, 1, 0, 2, 3, 2],
    ...                 dur_ns=[10, 80, 10, 50, 2, 48], traced_start_ns=[0, 10, 90, 100, 150, 152],
    ...                 flops=[0, 10**6, 0, 10**6, 0, 0])
    >>> cols = {"start_ns": np.array([0, 10, 100, 150]), "dur_ns": np.array([100, 80, 100, 2]),
    ...         "lane": np.zeros(4, np.int64)}
    >>> ctx = NS(graph=g, trace=NS(ranks=[NS(rank=0, cols=cols)]))
    >>> op_calls(ctx, np.arange(6))          # addmm's slice and mm's first
    [1, 3]
    """
    T = ctx.graph.tasks
    ranks = {r.rank: r for r in getattr(ctx.trace, "ranks", None) or []}
    calls, seen = [], set()
    for t in np.asarray(tasks).tolist():
        key = (int(T["rank"][t]), int(T["event"][t]))
        if key[0] not in ranks or key[1] < 0 or T["kind"][t] != EventKind.CPU_OP:
            calls.append((None, t))
        elif key not in seen:
            seen.add(key)
            calls.append((key, t))
    own, flops = _own_figures(T)
    opened, parent = _nesting(ranks, [(k, t) for k, t in calls if k is not None])
    below = set()                                             # ops with FLOPs nested in them
    for key in (k for k in parent if flops.get(k)):
        while (key := parent[key]) is not None and key not in below:
            below.add(key)
    state = {}
    for (start, end), key, t in opened:                       # an op before the ops nested in it
        up = state.get(parent[key])
        state[key] = ("inside" if up in ("works", "inside") else
                      "wraps" if rerunnable is not None and t not in rerunnable else
                      "works" if flops.get(key) else
                      "wraps" if key in below or 2 * own.get(key, 0) < end - start else "works")
    return [t for k, t in calls if k is None or state[k] == "works"]


def _own_figures(T) -> tuple:
    """Per CPU op ``(rank, event row)``: the time and the FLOPs of its slices, summed."""
    ops = np.flatnonzero((T["event"] >= 0) & (T["kind"] == EventKind.CPU_OP))
    own, flops = {}, {}
    for key, d, f in zip(zip(T["rank"][ops].tolist(), T["event"][ops].tolist()), T["dur_ns"][ops].tolist(),
                         T["flops"][ops].tolist()):
        own[key], flops[key] = own.get(key, 0) + d, flops.get(key, 0) + f
    return own, flops


def _nesting(ranks, calls) -> tuple:
    """``calls`` (``((rank, event row), task)``) as ``((start, end), key, task)`` in start order (an
    op before the ops nested in it), and each one's innermost enclosing call (None: none)."""
    opened, parent, stacks = [], {}, {}
    for key, t in calls:
        c = ranks[key[0]].cols
        start = int(c["start_ns"][key[1]])
        opened.append(((start, start + int(c["dur_ns"][key[1]])), key, t, int(c["lane"][key[1]])))
    opened.sort(key=lambda x: (x[0][0], -x[0][1]))
    for (start, end), key, _, lane in opened:
        stack = stacks.setdefault((key[0], lane), [])
        while stack and stack[-1][0] <= start:
            stack.pop()
        parent[key] = stack[-1][1] if stack else None
        stack.append((end, key))
    return [x[:3] for x in opened], parent


def iteration_calls(ctx, tasks) -> tuple:
    """``(calls, signatures)``: the tasks of ``tasks`` in one iteration (the lowest rank's first)
    that a re-run makes a call of (:func:`op_calls`), in traced order, and ``{task: signature}``."""
    T = ctx.graph.tasks
    tasks = np.asarray(tasks)[T["iteration"][tasks] >= 0]
    if not len(tasks):
        return [], {}
    rank = T["rank"][tasks].min()
    tasks = tasks[T["rank"][tasks] == rank]
    tasks = tasks[T["iteration"][tasks] == T["iteration"][tasks].min()]
    tasks = tasks[np.argsort(T["traced_start_ns"][tasks], kind="stable")]
    sig_of = signatures_of(ctx, tasks)
    return [t for t in op_calls(ctx, tasks, set(sig_of)) if t in sig_of], sig_of


def iteration_sequence(ctx, tasks, shared: bool = False) -> list:
    """Signatures of ``tasks`` in one iteration (the lowest rank's first), in traced order,
    one per call (:func:`op_calls`).

    ``shared``: each element a ``(signature, keys, grads, flow)`` tuple instead: ``keys`` names the
    layer parameter (or its optimizer state or gradient) each argument is
    (:func:`parameter_keys`, :func:`optimizer_keys`, from the trace's module table), so that a
    re-run hands one tensor to every op that reads the same weight; ``grads``, for a backward
    op of a layer with parameters, ``((shape, "LAYER#i.grad"), ...)``: an output of the
    parameter's shape is taken as its gradient, which the optimizer's ops then read
    (:func:`daydream.opseq.chain_calls`), else ``None``; ``flow``, where the trace recorded its
    data flow (:mod:`daydream.collect.flow`), ``(input storages, output storages)`` of the call,
    by which a re-run hands each op the tensor it read (:func:`daydream.opseq.flow_calls`), else ``None``.
    """
    kept, sig_of = iteration_calls(ctx, tasks)
    if not shared:
        return [sig_of[t] for t in kept]
    T = ctx.graph.tasks
    shapes = {m["path"]: m.get("param_shapes") or [] for m in meta(ctx).get("modules") or [] if isinstance(m, dict)}
    layers = ctx.graph.layers.strings
    layer = [layers[T["layer"][t]] if T["layer"][t] >= 0 else "" for t in kept]
    keys = [parameter_keys(sig_of[t], lay, shapes) for t, lay in zip(kept, layer)]
    step = [k for k, t in enumerate(kept) if T["phase"][t] == Phase.OPTIMIZER]
    for k, key in zip(step, optimizer_keys([sig_of[kept[k]] for k in step], shapes)):
        keys[k] = keys[k] or key
    grads = [tuple((tuple(p), f"{lay}#{i}{GRAD_SUFFIX}") for i, p in enumerate(shapes.get(lay) or []) if p) or None
             if T["phase"][t] == Phase.BACKWARD else None for t, lay in zip(kept, layer)]
    flow = flows_of(ctx, np.asarray(kept, dtype=np.int64))
    return [(sig_of[t], key, grad, flow.get(t)) for t, key, grad in zip(kept, keys, grads)]


#: Key suffix of a parameter's optimizer state (:func:`optimizer_keys`; its gradient's is
#: :data:`daydream.opseq.GRAD_SUFFIX`, by which a re-run chains the gradient's readers to its producer).
STATE_SUFFIX = ".state"


def optimizer_keys(signatures, param_shapes: dict) -> list:
    """Per optimizer op (``signatures`` in traced order): per argument, the key of the tensor it
    is taken to be (``"LAYER#i"``: the parameter; ``"LAYER#i.state"``: its optimizer state;
    ``"LAYER#i.grad"``: its gradient; ``None``: none of them), else ``None``.

    An optimizer step writes each parameter, which the forward and backward
    ops of two threads read and so hold in both cores' caches: on this
    project's VM, with the vCPUs 330 ns apart, a 512 x 512 ``add_`` after a
    2-thread ``addmm`` that read its tensor took 154 us at 2 threads against
    40 us at 1 (19 us at 2 on a tensor of its own); and it reads each
    gradient, which the backward's 2-thread ops wrote.  The trace does not say
    which tensor an op updates, so the in-place ops (``name_``) whose first
    argument has the shape of ``n`` parameters are dealt out to them in
    module order, in equal runs (a per-parameter loop: SGD's ``mul_(buf)``,
    ``add_(buf, grad)``, ``add_(param, buf)`` for each).  In a run the last
    op writes the parameter and the others its state; their other arguments
    of the parameter's shape are its gradient, but the last op's, which is
    its state (a run of one op, plain SGD's ``add_(param, grad)``, reads the
    gradient).

    >>> sig = lambda name, d: json.dumps([name, [d, d], ["float", "float"], None, None])
    >>> shapes = {"a": [[4, 4], [4]], "b": [[4, 4], [4]]}
    >>> keys = optimizer_keys([sig("aten::mul_", [4, 4]), sig("aten::add_", [4, 4]), sig("aten::add", [4, 4]),
    ...                        sig("aten::add_", [4, 4]), sig("aten::add_", [4, 4]), sig("aten::add_", [4])], shapes)
    >>> keys[:3]
    [('a#0.state', 'a#0.grad'), ('a#0', 'a#0.state'), None]
    >>> keys[3:]
    [('b#0.state', 'b#0.grad'), ('b#0', 'b#0.state'), ('a#1', 'a#1.grad')]
    """
    params: dict = {}
    for layer, shp in param_shapes.items():
        for i, p in enumerate(shp):
            if p:
                params.setdefault(tuple(p), []).append(f"{layer}#{i}")
    runs: dict = {}
    dims_of = {}
    for j, sig in enumerate(signatures):
        name, dims = json.loads(sig)[:2]
        first = tuple(dims[0]) if dims and isinstance(dims[0], list) else ()
        if name.endswith("_") and first in params:
            runs.setdefault(first, []).append(j)
            dims_of[j] = dims
    keys = [None] * len(signatures)
    for shape, ops in runs.items():
        names = params[shape]
        owner = [names[n * len(names) // len(ops)] for n in range(len(ops))]
        for n, j in enumerate(ops):
            last = n + 1 == len(ops) or owner[n + 1] != owner[n]
            alone = last and (n == 0 or owner[n - 1] != owner[n])
            other = owner[n] + (GRAD_SUFFIX if alone or not last else STATE_SUFFIX)
            keys[j] = tuple((owner[n] if last else owner[n] + STATE_SUFFIX) if k == 0
                            else (other if isinstance(d, list) and tuple(d) == shape else None)
                            for k, d in enumerate(dims_of[j]))
    return keys


def parameter_keys(signature: str, layer: str, param_shapes: dict) -> tuple | None:
    """Per argument of a traced call: ``"LAYER#i"`` where it has the shape of the layer's
    parameter ``i`` (or, 2-D, its transpose: a linear layer's forward reads ``W.t()``), else
    ``None``; ``None`` where no argument is one.

    >>> sig = json.dumps(["aten::addmm", [[8], [4, 16], [16, 8]], ["float"] * 3, None, None])
    >>> parameter_keys(sig, "net.0", {"net.0": [[8, 16], [8]]})
    ('net.0#1', None, 'net.0#0')
    """
    shapes = param_shapes.get(layer) or []
    keys = []
    for d in json.loads(signature)[1] or []:
        key = None
        if isinstance(d, list) and d:
            key = next((f"{layer}#{i}" for i, p in enumerate(shapes)
                        if d == p or (len(d) == 2 and d[::-1] == p)), None)
        keys.append(key)
    return tuple(keys) if any(keys) else None
