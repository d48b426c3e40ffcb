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

import re
from dataclasses import dataclass, field

import numpy as np

from daydream.graph.graph import Anchor, EdgeKind
from daydream.heapmode import steady_heap
from daydream.model import EventKind, LaneKind, Phase
from daydream.primitives import check_acyclic

from ._common import launch_of
from .base import NotApplicable

__all__ = ["meta", "gpu_ranks", "ALLREDUCE_RE", "allreduce_tasks", "require_allreduce", "FAMILIES", "Instance", "op_figures",
           "layer_instances", "world_size", "work_mask", "add_edges_checked", "lane_position", "signatures_of",
           "flows_of", "rerun_ratios", "work_slice", "spread_to_slices"]

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
    return {t: r.signatures[int(r.cols["sig"][ev])] for t, r, ev in _portable_ops(ctx, tasks)
            if r.cols.get("sig") is not None and r.cols["sig"][ev] >= 0}


def flows_of(ctx, tasks) -> dict:
    """task -> ``(input storages, output storages)`` of its op as the trace's ``flow`` metadata
    records them (:mod:`daydream.collect.flow`; the op :func:`signatures_of` takes the signature
    of), for the tasks that have them."""
    flow = {r.rank: ((r.meta.get("daydream") or {}).get("flow") or {}).get("ops") or {}
            for r in getattr(ctx.trace, "ranks", None) or []}
    if not any(flow.values()):
        return {}
    out = {}
    for t, r, ev in _portable_ops(ctx, tasks):
        got = flow[r.rank].get(str(int(r.cols["ext"][ev])))
        if got is not None:
            out[t] = (got[0], got[1])
    return out


def _portable_ops(ctx, tasks):
    """``(task, its rank's trace, event row of its portable op)`` per CPU-op task of ``tasks``
    (:func:`_portable_parent`)."""
    T = ctx.graph.tasks
    ranks = {r.rank: r for r in getattr(ctx.trace, "ranks", None) or []}
    for t in tasks.tolist():
        r = ranks.get(int(T["rank"][t]))
        ev = int(T["event"][t])
        if r is not None and ev >= 0 and T["kind"][t] == EventKind.CPU_OP:
            yield t, r, _portable_parent(r, ev)


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

