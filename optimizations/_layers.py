"""Helpers of the memory/communication what-ifs: op figures of kernels, layer instances.

* :func:`op_figures`: per task, FLOPs and bytes, a GPU task taking them from
  the CPU ops enclosing the runtime call that launched it (kernels carry none).
* :func:`layer_instances`: forward runs of a layer family (ReLU, pool, conv,
  BN, ...) matched with their backward runs.  With module paths as layers
  (``daydream trace``) a run belongs to a module and matches the backward run
  of the same module; with op names as layers (plain Kineto traces) the k-th
  forward run of a family matches the k-th backward run *from the end*
  (backward runs in reverse order of the forward, true of sequential nets).
* :func:`work_slice`, :func:`spread_to_slices`: the slices of one op (its
  self time between nested calls), rescaled together.
* :func:`world_size`, :func:`work_mask`, :func:`add_edges_checked`.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import numpy as np

from daydream.graph.graph import Anchor, EdgeKind
from daydream.heapmode import steady_heap
from daydream.opseq import GRAD_SUFFIX
from daydream.model import EventKind, LaneKind, Phase
from daydream.primitives import check_acyclic

from ._common import launch_of
from .base import NotApplicable

__all__ = ["meta", "gpu_ranks", "ALLREDUCE_RE", "allreduce_tasks", "require_allreduce", "FAMILIES", "Instance", "op_figures",
           "layer_instances", "world_size", "work_mask", "add_edges_checked", "lane_position", "signatures_of",
           "rerun_ratios", "parameter_keys", "optimizer_keys", "STATE_SUFFIX", "op_calls", "iteration_sequence", "work_slice", "spread_to_slices"]

#: Layer families: regexes matched against layer names (op names of both the
#: forward op and its autograd node, e.g. ``aten::relu_`` / ``ReluBackward1``)
#: or module types (``torch.nn.modules.activation.ReLU``).
FAMILIES = {
    "relu": r"(?i)relu|threshold",
    "maxpool": r"(?i)max_?pool",
    "avgpool": r"(?i)avg_?pool",
    "conv": r"(?i)conv",
    "bn": r"(?i)batch_?norm",
    "linear": r"(?i)linear|addmm|\bmm\b|MmBackward",
}
_GPU_KINDS = (EventKind.KERNEL, EventKind.MEMCPY, EventKind.MEMSET, EventKind.COLLECTIVE)


@dataclass
class Instance:
    """One call of a layer: its forward and backward work tasks (lane order)."""

    family: str
    layer: int
    rank: int
    iteration: int
    fwd: list
    bwd: list = field(default_factory=list)
    bytes: int = 0


def meta(ctx) -> dict:
    """``ctx.meta()``, or {} for a context without trace ranks (hand-made graphs)."""
    return ctx.meta() if getattr(ctx.trace, "ranks", None) else {}


def world_size(ctx) -> int:
    """Workers of the job: ``ctx.workers`` if an earlier what-if set it, else the trace's world size."""
    w = getattr(ctx, "workers", None)
    ranks = list(getattr(ctx.trace, "ranks", None) or [])
    if not w and ranks:
        w = meta(ctx).get("world_size") or max(r.world_size() for r in ranks)
    return int(w or 1)


#: Gradient all-reduce task names: NCCL kernels, tasks inserted by ``data-parallel``.
ALLREDUCE_RE = r"(?i)all.?reduce"


def allreduce_tasks(g) -> np.ndarray:
    """All-reduce tasks: collectives (NCCL kernels) or tasks on communication lanes named all-reduce."""
    from daydream.primitives import select

    cand = select(g, name=ALLREDUCE_RE)
    comm = np.array([ln.kind == LaneKind.COMM for ln in g.lanes] + [False], bool)
    T = g.tasks
    return cand[(T["kind"][cand] == EventKind.COLLECTIVE) | comm[T["lane"][cand]]]


def require_allreduce(g) -> np.ndarray:
    """:func:`allreduce_tasks`, or :class:`NotApplicable` saying how to get a trace that has them."""
    ar = allreduce_tasks(g)
    if not len(ar):
        raise NotApplicable("the trace has no gradient all-reduce (NCCL AllReduce kernels, or all-reduce tasks on "
                            "a communication lane); trace a multi-GPU DDP run, or apply --opt data-parallel first")
    return ar


def gpu_ranks(g) -> np.ndarray:
    """Ranks with GPU tasks (kernels, copies, memsets, collectives)."""
    T = g.tasks
    return np.unique(T["rank"][np.isin(T["kind"], _GPU_KINDS)])


def work_mask(g) -> np.ndarray:
    """Tasks doing the model's work: GPU tasks of ranks with GPU streams, CPU ops elsewhere."""
    T = g.tasks
    gpu = np.isin(T["kind"], _GPU_KINDS)
    return np.where(np.isin(T["rank"], gpu_ranks(g)), gpu, T["kind"] == EventKind.CPU_OP)


def lane_position(g) -> np.ndarray:
    pos = np.zeros(g.n_tasks, np.int64)
    for seq in g.lane_tasks:
        pos[seq] = np.arange(len(seq))
    return pos


def add_edges_checked(g, src, dst, anchor=Anchor.END, target=Anchor.START) -> None:
    """Add DATA edges in one batch, then check that no cycle appeared (one pass, not one per edge)."""
    if len(src):
        g.add_edges(np.asarray(src), np.asarray(dst, np.int32), EdgeKind.DATA, anchor=anchor, target=target)
        check_acyclic(g)


# ---------------------------------------------------------------- op figures
def _enclosing(r):
    """Per event row of a rank trace (the event itself included among the enclosing ops): FLOPs
    of the innermost enclosing CPU op that has them, bytes of the outermost that has them (the
    top-level op's inputs: ``aten::relu_``'s activation, not its inner out-of-place call's
    input and output), and the row of the outermost enclosing CPU op (-1: none)."""
    c = r.cols
    n = len(c["kind"])
    out_f, out_b, out_top = np.zeros(n, np.int64), np.zeros(n, np.int64), np.full(n, -1, np.int64)
    cpu = np.flatnonzero(np.isin(c["kind"], (EventKind.CPU_OP, EventKind.RUNTIME)))
    order = cpu[np.lexsort((-c["dur_ns"][cpu], c["start_ns"][cpu], c["lane"][cpu]))]
    lane_prev, stack = None, []
    kind, st, du, fl, by, ln = (c[k][order].tolist() for k in ("kind", "start_ns", "dur_ns", "flops", "bytes", "lane"))
    for j, i in enumerate(order.tolist()):
        if ln[j] != lane_prev:
            lane_prev, stack = ln[j], []
        while stack and stack[-1][0] <= st[j]:
            stack.pop()
        f, b, top = (stack[-1][1], stack[-1][2], stack[-1][3]) if stack else (0, 0, -1)
        if kind[j] == EventKind.CPU_OP:
            f, b, top = fl[j] or f, b or by[j], i if top < 0 else top
            stack.append((st[j] + du[j], f, b, top))
        out_f[i], out_b[i], out_top[i] = f, b, top
    return out_f, out_b, out_top


def op_figures(ctx) -> tuple:
    """(flops, bytes, op) per task of ``ctx.graph``.

    A task's own FLOPs and bytes where it has them; a kernel without them
    takes those of the CPU ops around the runtime call that launched it (see
    :func:`_enclosing`; ``aten::conv2d`` > ``cudnn_convolution`` >
    ``cudaLaunchKernel``: the convolution's FLOPs and input bytes).  ``op``
    identifies the top-level CPU op a task belongs to (its own or its launch's;
    ``rank << 40 | event row``), -1 if unknown.  0 where nothing is known.
    """
    g = ctx.graph
    T = g.tasks
    flops, nbytes, op = T["flops"].copy(), T["bytes"].copy(), np.full(g.n_tasks, -1, np.int64)
    ranks = {r.rank: r for r in ctx.trace.ranks} if ctx.trace is not None else {}
    if not ranks:
        return flops, nbytes, op
    per_rank = {rk: _enclosing(r) for rk, r in ranks.items()}
    src = np.arange(g.n_tasks)
    for k, call in launch_of(g).items():
        src[k] = call
    ev, rk = T["event"][src], T["rank"][src]
    for r, (f, b, top) in per_rank.items():
        m = (rk == r) & (ev >= 0)
        e = ev[m]
        flops[m] = np.where(flops[m] > 0, flops[m], f[e])
        nbytes[m] = np.where(nbytes[m] > 0, nbytes[m], b[e])
        op[m] = np.where(top[e] >= 0, (int(r) << 40) | top[e], -1)
    return flops, nbytes, op


def work_slice(g) -> np.ndarray:
    """Per task: the slice of its CPU op that carries the op's FLOPs and bytes, else the task itself.

    An op with nested calls is several self-time slices in the graph (its time
    on either side of each call: ``convolution_backward``'s grad-input and
    grad-weight halves around an allocation), and the graph puts the op's
    FLOPs and bytes on one of them only, so that sums count them once.  A
    what-if that rescales an op by its work rescales all of its slices.

    >>> from daydream.graph.graph import DependencyGraph
    >>> from daydream.model import Lane
    >>> g = DependencyGraph(); cpu = g.add_lane(Lane(0, LaneKind.CPU_THREAD, 1, 1))
    >>> _ = g.add_tasks(lane=[cpu] * 4, dur_ns=[900, 50, 1500, 10], event=[7, 8, 7, 9], flops=[0, 0, 10**6, 0])
    >>> work_slice(g).tolist()
    [2, 1, 2, 3]
    """
    T = g.tasks
    out = np.arange(g.n_tasks)
    op = np.flatnonzero((T["event"] >= 0) & (T["kind"] == EventKind.CPU_OP))
    if not len(op):
        return out
    _, inv = np.unique((T["rank"][op].astype(np.int64) << 40) | T["event"][op], return_inverse=True)
    inv = inv.reshape(-1)
    owner = np.full(inv.max() + 1, -1, np.int64)
    has = (T["flops"][op] > 0) | (T["bytes"][op] > 0)
    owner[inv[has]] = op[has]
    out[op] = np.where(owner[inv] >= 0, owner[inv], op)
    return out


def spread_to_slices(g, before, after) -> np.ndarray:
    """``after`` with each op's other slices rescaled as its work slice was (``after / before`` there).

    ``before`` and ``after``: per-task durations (ns).
    """
    owner = work_slice(g)
    out = np.asarray(after, float).copy()
    sib = np.flatnonzero(owner != np.arange(g.n_tasks))
    o = owner[sib]
    out[sib] = before[sib] * out[o] / np.maximum(before[o], 1.0)
    return out


# ----------------------------------------------------------- layer instances
def _family_of_layers(ctx, families) -> dict:
    """layer id -> family name, by module type (module table) or layer name."""
    g = ctx.graph
    mods = {m["path"]: str(m.get("type", "")) for m in (meta(ctx).get("modules") or [])}
    rx = {f: re.compile(p) for f, p in families.items()}
    out = {}
    for i, name in enumerate(g.layers.strings):
        text = mods.get(name, name)
        for f, r in rx.items():
            if r.search(text):
                out[i] = f
                break
    return out


def _runs(tasks, layer_col, op):
    """Split tasks (in execution order) into runs of one layer and one top-level op."""
    runs = []
    for t in tasks:
        if runs and layer_col[t] == layer_col[runs[-1][-1]] and op[t] == op[runs[-1][-1]]:
            runs[-1].append(t)
        else:
            runs.append([t])
    return runs


def layer_instances(ctx, families: dict) -> list:
    """Forward calls of the given layer families with their backward work, per rank and iteration.

    Returns a list of :class:`Instance` in forward order (grouped by rank and
    iteration); ``bwd`` is empty when no backward run matched.  ``bytes`` is
    the module's output bytes (module table), else the op's input bytes.
    """
    g = ctx.graph
    T = g.tasks
    fam = _family_of_layers(ctx, families)
    if not fam:
        return []
    mods = {m["path"]: m for m in (meta(ctx).get("modules") or [])}
    by_module = any(g.layers[i] in mods for i in fam)
    _, nbytes, op = op_figures(ctx)
    if by_module:
        op = np.full(g.n_tasks, -1, np.int64)   # a module call is one run, whatever ops it calls
    pos = lane_position(g)
    work = np.flatnonzero(work_mask(g) & (T["layer"] >= 0) & np.isin(T["phase"], (Phase.FORWARD, Phase.BACKWARD)))
    key = np.lexsort((pos[work], T["traced_start_ns"][work], T["iteration"][work], T["rank"][work]))
    work = work[key]
    layer_col = T["layer"]
    out = []
    groups = {}
    for t in work.tolist():
        groups.setdefault((int(T["rank"][t]), int(T["iteration"][t])), []).append(t)
    for (rank, it), tasks in groups.items():
        fwd = [r for r in _runs([t for t in tasks if T["phase"][t] == Phase.FORWARD], layer_col, op)
               if int(layer_col[r[0]]) in fam]
        bwd = [r for r in _runs([t for t in tasks if T["phase"][t] == Phase.BACKWARD], layer_col, op)
               if int(layer_col[r[0]]) in fam]
        match_key = (lambda run: int(layer_col[run[0]])) if by_module else (lambda run: fam[int(layer_col[run[0]])])
        fw_by, bw_by = {}, {}
        for run in fwd:
            fw_by.setdefault(match_key(run), []).append(run)
        for run in bwd:
            bw_by.setdefault(match_key(run), []).append(run)
        pairs = {}
        for k, fl in fw_by.items():
            for f_run, b_run in zip(fl[::-1], bw_by.get(k, [])):   # last forward <-> first backward
                pairs[id(f_run)] = b_run
        for run in fwd:
            layer = int(layer_col[run[0]])
            row = mods.get(g.layers[layer]) or {}
            b = int(row.get("output_bytes") or 0) or int(nbytes[run].max())
            out.append(Instance(fam[layer], layer, rank, it, run, pairs.get(id(run), []), b))
    return out


#: Backend-specific kernels (op name) re-run as the portable op that chose them (its name):
#: in another dtype or size the portable op may pick another backend (bf16
#: convolutions on a CPU without bf16 units leave oneDNN for ``_slow_conv2d``).
BACKEND_OPS = (re.compile(r"^aten::(mkldnn_|cudnn_|miopen_|_slow_conv|thnn_conv|_nnpack_).*conv"), "aten::convolution")
_PARENT_LOOKBACK = 8


def signatures_of(ctx, tasks) -> dict:
    """task -> its op's call signature (traces recorded with shapes; CPU ops only).

    A backend-specific op (:data:`BACKEND_OPS`) gets the signature of the
    portable op that encloses it on its thread, when there is one.
    """
    T = ctx.graph.tasks
    ranks = {r.rank: r for r in getattr(ctx.trace, "ranks", None) or []}
    out = {}
    for t in tasks.tolist():
        r = ranks.get(int(T["rank"][t]))
        ev = int(T["event"][t])
        if r is not None and ev >= 0 and T["kind"][t] == EventKind.CPU_OP and r.cols.get("sig") is not None:
            ev = _portable_parent(r, ev)
            if r.cols["sig"][ev] >= 0:
                out[t] = r.signatures[int(r.cols["sig"][ev])]
    return out


def _portable_parent(r, ev: int) -> int:
    """The enclosing portable op of a backend-specific op ``ev`` (else ``ev``)."""
    pattern, parent = BACKEND_OPS
    if not pattern.match(r.names[int(r.cols["name"][ev])]):
        return ev
    c = r.cols
    end = c["start_ns"][ev] + c["dur_ns"][ev]
    for p in range(ev - 1, max(ev - _PARENT_LOOKBACK, -1), -1):
        if c["lane"][p] == c["lane"][ev] and r.names[int(c["name"][p])] == parent \
                and c["start_ns"][p] + c["dur_ns"][p] >= end:
            return p
    return ev


def op_calls(ctx, tasks) -> list:
    """``tasks`` (in traced order) reduced to one task per call that a re-run makes.

    An op with nested calls is several slices in the graph (its self time
    between them), but one call; and re-running an op re-runs its nested
    calls.  So each op counts once, at its first slice, and of nested ops
    only one level is kept: an op whose own slices take at least half its
    time does the work (``mm`` around its ``resolve_conj`` calls) and keeps
    its nested calls out; one that takes less wraps them (``linear`` around
    ``addmm``) and is left out for them.  The transformer's sequence listed
    1495 slices of 844 calls, ``mm`` 66 times for 19 calls, until session 44.

    >>> from daydream.graph.graph import DependencyGraph
    >>> from daydream.model import Lane
    >>> from types import SimpleNamespace as NS
    >>> g = DependencyGraph(); cpu = g.add_lane(Lane(0, LaneKind.CPU_THREAD, 1, 1))
    >>> # events: 0 linear [0, 100) > 1 addmm [10, 90); 2 mm [100, 200) > 3 resolve_conj [150, 152)
    >>> _ = g.add_tasks(lane=[cpu] * 6, kind=[EventKind.CPU_OP] * 6, event=[0, 1, 0, 2, 3, 2],
    ...                 dur_ns=[10, 80, 10, 50, 2, 48], traced_start_ns=[0, 10, 90, 100, 150, 152])
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
    ops = np.flatnonzero((T["event"] >= 0) & (T["kind"] == EventKind.CPU_OP))
    own = {}                                     # an op's own time: the sum of its slices
    for key, d in zip(zip(T["rank"][ops].tolist(), T["event"][ops].tolist()), T["dur_ns"][ops].tolist()):
        own[key] = own.get(key, 0) + d

    def span(key):
        c = ranks[key[0]].cols
        return int(c["start_ns"][key[1]]), int(c["start_ns"][key[1]] + c["dur_ns"][key[1]]), int(c["lane"][key[1]])

    keep, stacks = set(), {}
    opened = sorted(((span(k), k, t) for k, t in calls if k is not None), key=lambda x: (x[0][0], -x[0][1]))
    for (start, end, lane), key, t in opened:                # an op before the ops nested in it
        stack = stacks.setdefault((key[0], lane), [])     # (end, state) of the ops open around it
        while stack and stack[-1][0] <= start:
            stack.pop()
        state = ("inside" if stack and stack[-1][1] != "wraps" else
                 "works" if 2 * own.get(key, 0) >= end - start else "wraps")
        stack.append((end, state))
        if state == "works":
            keep.add(t)
    return [t for k, t in calls if k is None or t in keep]


def iteration_sequence(ctx, tasks, shared: bool = False) -> list:
    """Signatures of ``tasks`` in one iteration (the lowest rank's first), in traced order,
    one per call (:func:`op_calls`).

    ``shared``: each element a ``(signature, keys, grads)`` triple instead: ``keys`` names the
    layer parameter (or its optimizer state or gradient) each argument is
    (:func:`parameter_keys`, :func:`optimizer_keys`, from the trace's module table), so that a
    re-run hands one tensor to every op that reads the same weight; ``grads``, for a backward
    op of a layer with parameters, ``((shape, "LAYER#i.grad"), ...)``: an output of the
    parameter's shape is taken as its gradient, which the optimizer's ops then read
    (:func:`daydream.opseq.chain_calls`), else ``None``.
    """
    T = ctx.graph.tasks
    tasks = np.asarray(tasks)[T["iteration"][tasks] >= 0]
    if not len(tasks):
        return []
    rank = T["rank"][tasks].min()
    tasks = tasks[T["rank"][tasks] == rank]
    tasks = tasks[T["iteration"][tasks] == T["iteration"][tasks].min()]
    tasks = tasks[np.argsort(T["traced_start_ns"][tasks], kind="stable")]
    sig_of = signatures_of(ctx, tasks)
    kept = [t for t in op_calls(ctx, tasks) if t in sig_of]
    if not shared:
        return [sig_of[t] for t in kept]
    shapes = {m["path"]: m.get("param_shapes") or [] for m in meta(ctx).get("modules") or [] if isinstance(m, dict)}
    layers = ctx.graph.layers.strings
    layer = [layers[T["layer"][t]] if T["layer"][t] >= 0 else "" for t in kept]
    keys = [parameter_keys(sig_of[t], lay, shapes) for t, lay in zip(kept, layer)]
    step = [k for k, t in enumerate(kept) if T["phase"][t] == Phase.OPTIMIZER]
    for k, key in zip(step, optimizer_keys([sig_of[kept[k]] for k in step], shapes)):
        keys[k] = keys[k] or key
    grads = [tuple((tuple(p), f"{lay}#{i}{GRAD_SUFFIX}") for i, p in enumerate(shapes.get(lay) or []) if p) or None
             if T["phase"][t] == Phase.BACKWARD else None for t, lay in zip(kept, layer)]
    return [(sig_of[t], key, grad) for t, key, grad in zip(kept, keys, grads)]


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


def rerun_ratios(ctx, tasks, measure, note: str) -> dict:
    """task -> what ``measure`` found for its op re-run on this machine (CPU traces with shapes).

    ``measure(signatures) -> {signature: value}`` is one of :mod:`daydream.opbench`'s
    ``*_time_ratios`` (or ``dtype_time_pairs``), run under :func:`daydream.heapmode.steady_heap`;
    ``note`` (with ``{n}``, the ops re-run) is left on ``ctx``.
    Empty where the device is not a CPU, the tasks have no signatures, or torch
    is missing.
    """
    if ctx.device.kind != "cpu" or not len(tasks):
        return {}
    sig_of = signatures_of(ctx, tasks)
    if not sig_of:
        return {}
    try:
        with steady_heap():      # ops time without page faults, as the runs they predict
            ratios = measure(sig_of.values())
    except ImportError:    # no torch here
        return {}
    if ratios:
        ctx.note(note.format(n=len(ratios)))
    return {t: ratios[s] for t, s in sig_of.items() if s in ratios}

