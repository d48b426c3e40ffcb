"""``fusion``: kernel fusion of elementwise chains (MetaFlow / torch.compile style).

Model
-----
Within each layer's forward and backward, maximal runs of consecutive
memory-bound elementwise tasks on one lane (CPU ops by name, or GPU kernels
without matrix work) become one task that reads the chain's largest input
once and writes one output: ``2 x max input bytes`` at the device's measured
streaming bandwidth plus one op's fixed cost; the Python gaps between the
fused ops go with them.  With ``mode=compile`` (``torch.compile``), the
Python time between the model's ops in forward and backward shrinks to one
op's fixed cost per op (generated code calls them; the ops of the model's
modules in the trace's module table: the training loop's own ops -- the
batch's ``to``, a loss function, ``backward()``'s ``ones_like`` -- keep their
Python, 0.15-0.2 ms an iteration in the validation workloads; until session
34 it shrank too, and the compiled rows read 1-3 % lower), the model's view ops and
the autograd engine's per-node slices go (generated code computes views
inline, and the compiled backward is one node), and each iteration pays
the compiled call's own host time outside its generated code (Dynamo's frame
and guards, AOTAutograd's wrappers) before the forward and before the
backward: a cost per call plus one per parameter tensor of the model (module
table), both measured by ``daydream calibrate`` on tiny compiled models under
the profiler, as a trace's iterations run, each call after a sweep of the host's
caches (the rest of a training step passes through them between two calls).
On a CPU, inductor runs every
convolution in the channels-last memory format when oneDNN is available
(``decide_layout_opt`` in ``torch/_inductor/graph.py``): with
``channels_last`` (default) each traced convolution, forward and backward,
is re-run here as traced and in channels-last, and the difference is added
to its traced time (as ``amp`` does for dtypes).  Other layout choices of the
compiler (e.g. materialising transposes before a matmul, GPU layout
heuristics) are not modelled.  Ops that Inductor decomposes into generated
reductions and pointwise code (:data:`INDUCTOR_RERUN_OPS`: training-mode batch
norm) are re-run here both eager as traced and compiled alone by Inductor
(:func:`~daydream.opbench.inductor_ns`, channels-last with ``channels_last``),
and their traced time scaled by the ratio (CPU traces with shapes).

Assumptions: fused chains are those adjacent in the trace (no reordering);
matmuls and convolutions are not fused with their epilogues; compile time,
graph breaks and recompilation are not modelled (steady state).
"""
from __future__ import annotations

import json
import re

import numpy as np

from daydream.cost import compute_mask, elementwise_ns
from daydream.opbench import channels_last_time_pairs, inductor_time_ratios
from daydream.model import EventKind, LaneKind, Phase
from daydream.primitives import insert, remove

from ._common import param_tensors
from ._layers import rerun_ratios, signatures_of
from .base import NotApplicable, Optimization, Param

__all__ = ["Fusion", "OPTIMIZATION", "ELEMENTWISE_RE", "INDUCTOR_RERUN_OPS", "VIEW_OPS", "AUTOGRAD_NODE_RE",
           "is_layout_conversion"]

#: Ops whose compiled form is re-measured (``mode=compile`` on a CPU): eager training-mode
#: ``native_batch_norm`` on an NCHW input ran 3-6x slower here than Inductor's code for it
#: (Welford reductions and one normalising pass).  Its backward is left as traced: the eager
#: kernel is already one fused pass, and its compiled form measured no faster here.  Each
#: must be in :data:`daydream.loader.shapes.SIGNED_OPS` (the loader keeps their signatures).
INDUCTOR_RERUN_OPS = ("aten::native_batch_norm",)

#: Ops that only make a new view of a tensor (or detach it): in generated code a pointer and
#: strides computed inline (``reinterpret_tensor``), no dispatch.  In the validation
#: workloads' real compiled runs their time in forward and backward fell from 0.13-0.40 ms
#: an iteration to 0.03-0.10 ms (session 19, runs of ``daydream validate --opt fusion``).
VIEW_OPS = frozenset("aten::" + n for n in (
    "view", "_unsafe_view", "reshape", "t", "transpose", "permute", "expand", "as_strided", "squeeze",
    "unsqueeze", "slice", "select", "detach", "alias", "resolve_conj", "resolve_neg", "split", "chunk",
    "unbind", "narrow", "flatten", "expand_as", "view_as")) | {"detach"}
#: The autograd engine's per-node work (the ``evaluate_function`` range and the node's own
#: range): a compiled model's backward is one node (its cost is the calibrated call
#: overhead).  Gradient accumulation into leaves stays.  0.12-0.36 ms an iteration
#: in the same runs' baselines, 0.04-0.06 ms compiled.
AUTOGRAD_NODE_RE = re.compile(r"^autograd::engine::evaluate_function: (?!torch::autograd::AccumulateGrad)"
                              r"|^\w+Backward\d+$")

#: CPU ops and GPU kernels treated as fusible pointwise work.
ELEMENTWISE_RE = re.compile(
    r"^aten::(add|sub|mul|div|relu|gelu|silu|sigmoid|tanh|clamp|clamp_min|threshold|threshold_backward|neg|"
    r"exp|log|sqrt|rsqrt|pow|where|masked_fill|dropout|native_dropout|native_dropout_backward|gelu_backward|"
    r"silu_backward|sigmoid_backward|tanh_backward|fill|zero|copy|lerp|addcmul|addcdiv|hardtanh)_?$"
    r"|elementwise|vectorized|unrolled_elementwise|pointwise", re.IGNORECASE)


def is_layout_conversion(signature: str) -> bool:
    """Whether a traced ``copy_(dst, src)`` only changes the memory order of a 4-D tensor.

    >>> is_layout_conversion(json.dumps(["aten::copy_", [[2, 3, 4, 4], [2, 3, 4, 4], []],
    ...     ["float", "float", "Scalar"], [[48, 16, 4, 1], [48, 1, 12, 3], []], ["", "", "False"]]))
    True
    """
    try:
        _, dims, _, strides, _ = json.loads(signature)
        (a, b), (sa, sb) = dims[:2], strides[:2]
    except (ValueError, TypeError):
        return False
    if a != b or len(a) != 4 or not (isinstance(sa, list) and isinstance(sb, list)) or len(sa) != 4 or len(sb) != 4:
        return False
    big = [i for i in range(4) if a[i] > 1]
    order = lambda st: sorted(big, key=lambda i: (-st[i], i))   # noqa: E731
    return order(sa) != order(sb)


class Fusion(Optimization):
    name = "fusion"
    summary = "fuse elementwise chains (kernel fusion); mode=compile also drops framework overhead (torch.compile)"
    params = (Param("mode", "compile", "kernel: fuse elementwise chains only; compile: also compiled-graph overhead",
                    str, ("kernel", "compile")),
              Param("channels_last", True, "compile on a CPU: convolutions re-measured in channels-last "
                    "(inductor's layout there)", bool))
    assumptions = __doc__

    def apply(self, ctx):
        g, dev = ctx.graph, ctx.device
        if self.mode == "compile" and self.channels_last and dev.kind == "cpu":
            self._channels_last_convolutions(ctx)
            self._drop_layout_conversions(ctx)
        if self.mode == "compile":
            self._inductor_reruns(ctx, self.channels_last)
        T = g.tasks
        in_model = np.isin(T["phase"], (Phase.FORWARD, Phase.BACKWARD)) & (T["iteration"] >= 0)
        ok = np.array([ELEMENTWISE_RE.search(s) is not None for s in g.names.strings], bool)
        fusible = in_model & ok[T["name"]] & ~compute_mask(g) & (T["kind"] != EventKind.MARKER)
        chains = self._chains(g, fusible)
        if not chains and self.mode == "kernel":
            raise NotApplicable("no chains of two or more adjacent elementwise ops in forward/backward")
        dead = []
        for chain in chains:
            first = chain[0]
            nbytes = 2.0 * float(T["bytes"][chain].max())
            layer = int(T["layer"][first])
            insert(g, int(T["lane"][first]), dur_ns=int(elementwise_ns(dev, nbytes)), name="fused elementwise",
                   before=first, gap_ns=int(T["gap_ns"][first]), phase=int(T["phase"][first]),
                   layer=g.layers[layer] if layer >= 0 else None, iteration=int(T["iteration"][first]))
            dead.extend(chain)
        remove(g, dead)
        if self.mode == "compile":
            self._drop_graph_bookkeeping(ctx)
            self._compiled_gaps(ctx)
            if not self._compiled_overhead(ctx):
                ctx.note("fusion: no torch.compile call overhead in the device profile (run `daydream calibrate`)")
        ctx.note(f"fusion ({self.mode}): {len(chains)} elementwise chains fused ({len(dead)} tasks)")

    @staticmethod
    def _channels_last_convolutions(ctx) -> int:
        """Each convolution's traced time plus ``t(channels-last) - t(as traced)`` re-measured here."""
        g = ctx.graph
        T = g.tasks
        is_conv = np.array(["conv" in s.lower() for s in g.names.strings], bool)
        conv = np.flatnonzero(compute_mask(g) & is_conv[T["name"]] & np.isin(T["phase"], (Phase.FORWARD, Phase.BACKWARD)))
        pairs = rerun_ratios(ctx, conv, lambda sigs: channels_last_time_pairs(sigs, ctx.device.threads or None),
                             "fusion: {n} distinct convolutions re-measured in channels-last (inductor's CPU layout)")
        for t, (traced, cl) in pairs.items():
            T["dur_ns"][t] = max(1, int(round(T["dur_ns"][t] + cl - traced)))
        return len(pairs)

    @staticmethod
    def _inductor_reruns(ctx, channels_last: bool) -> int:
        """Each op of :data:`INDUCTOR_RERUN_OPS` in forward and backward scaled by
        ``t(compiled alone by Inductor) / t(eager)``, both re-measured here."""
        g = ctx.graph
        T = g.tasks
        ids = [g.names.get(n) for n in INDUCTOR_RERUN_OPS]       # -1 (matching no task) where absent
        ops = np.flatnonzero(np.isin(T["name"], ids) & np.isin(T["phase"], (Phase.FORWARD, Phase.BACKWARD)))
        ratios = rerun_ratios(ctx, ops, lambda sigs: inductor_time_ratios(sigs, ctx.device.threads or None,
                                                                           channels_last),
                              "fusion: {n} distinct decomposed ops (batch norm) re-measured compiled by Inductor")
        for t, r in ratios.items():
            T["dur_ns"][t] = max(1, int(round(T["dur_ns"][t] * r)))
        if not ratios and ctx.device.kind == "cpu" and signatures_of(ctx, ops):
            ctx.note(f"fusion: {len(ops)} batch-norm tasks left as traced: re-running them compiled failed here "
                     "(torch's Inductor needs a working C++ compiler on a CPU)")
        return len(ratios)

    @staticmethod
    def _drop_layout_conversions(ctx) -> int:
        """Copies between the NCHW and channels-last layouts of one 4-D tensor (eager oneDNN
        convolutions' gradients converted back) do not happen in an all-channels-last graph."""
        g = ctx.graph
        T = g.tasks
        copies = np.flatnonzero((T["name"] == g.names.get("aten::copy_"))
                                & np.isin(T["phase"], (Phase.FORWARD, Phase.BACKWARD)))
        dead = [t for t, sig in signatures_of(ctx, copies).items() if is_layout_conversion(sig)]
        if dead:
            remove(g, dead)
            ctx.note(f"fusion: {len(dead)} layout conversions (NCHW <-> channels-last copies) dropped")
        return len(dead)

    @staticmethod
    def _chains(g, fusible):
        """Runs of >= 2 fusible tasks, adjacent on their lane, same layer, phase and op sequence."""
        T = g.tasks
        out = []
        for seq in g.lane_tasks:
            run = []
            for t in seq:
                same = run and T["layer"][t] == T["layer"][run[-1]] and T["phase"][t] == T["phase"][run[-1]]
                if fusible[t] and (not run or same):
                    if not run or T["event"][t] != T["event"][run[-1]]:
                        run.append(t)
                    continue
                if len(run) >= 2:
                    out.append(run)
                run = [t] if fusible[t] else []
            if len(run) >= 2:
                out.append(run)
        return out

    @staticmethod
    def _model_cpu_tasks(ctx) -> np.ndarray:
        """Mask of the CPU-thread tasks of forward and backward inside iterations that belong to
        the compiled model: their layer is one of its modules (the trace's module table), or,
        without a table, any layer.  The training loop's own ops (the batch's ``to``, a loss
        function's ops, ``backward()``'s ``ones_like``: layers named after the op) are outside."""
        g = ctx.graph
        T = g.tasks
        cpu = np.array([ln.kind == LaneKind.CPU_THREAD for ln in g.lanes], bool)[T["lane"]]
        paths = {m["path"] for m in ctx.meta().get("modules") or [] if isinstance(m, dict) and m.get("path")}
        in_model = np.array([name in paths for name in g.layers.strings] + [not paths], bool)
        return (np.isin(T["phase"], (Phase.FORWARD, Phase.BACKWARD)) & (T["iteration"] >= 0) & cpu
                & in_model[T["layer"]])

    @staticmethod
    def _drop_graph_bookkeeping(ctx) -> int:
        """Inside the compiled model (tasks of a module layer: a loss computed by a function
        outside it keeps its views), views (:data:`VIEW_OPS`) are computed inline and the
        backward is one autograd node (:data:`AUTOGRAD_NODE_RE`): those CPU tasks go."""
        g = ctx.graph
        T = g.tasks
        drop = np.array([s in VIEW_OPS or AUTOGRAD_NODE_RE.search(s) is not None for s in g.names.strings], bool)
        dead = np.flatnonzero(drop[T["name"]] & Fusion._model_cpu_tasks(ctx) & (T["layer"] >= 0)
                              & (T["kind"] != EventKind.MARKER))
        if len(dead):
            remove(g, dead.tolist())
            ctx.note(f"fusion: {len(dead)} view ops and autograd-node slices inside the compiled model dropped")
        return len(dead)

    @staticmethod
    def _compiled_gaps(ctx):
        """Inside the compiled model, ops are called from generated code: the Python time
        between them (gaps on the CPU thread during forward and backward) shrinks to one
        op's fixed cost per op.  The training loop's Python outside the model stays."""
        g, dev = ctx.graph, ctx.device
        T = g.tasks
        model = Fusion._model_cpu_tasks(ctx)
        new_op = np.ones(g.n_tasks, bool)          # later slices of the same op had no dispatch before them
        for seq in g.lane_tasks:
            for a, b in zip(seq, seq[1:]):
                if T["event"][a] == T["event"][b] and T["event"][b] >= 0:
                    new_op[b] = False
        T["gap_ns"][model] = np.minimum(T["gap_ns"][model], np.where(new_op[model], dev.op_overhead_ns, 0))

    @staticmethod
    def _compiled_overhead(ctx) -> int:
        """One compiled call per iteration: its host cost outside the generated code, before the
        forward and before the backward: ``call + tensors x per tensor`` for the phase, with the
        model's parameter tensors from the trace's module table (:func:`param_tensors`).
        Returns the number of costs inserted."""
        g, dev = ctx.graph, ctx.device
        T = g.tasks
        if not any(dev.compiled_call_ns) and not any(dev.compiled_tensor_ns):
            return 0
        tensors = sum(param_tensors(m) for m in ctx.meta().get("modules") or ())
        cost = {ph: int(c + tensors * p) for ph, c, p in zip((Phase.FORWARD, Phase.BACKWARD),
                                                               dev.compiled_call_ns, dev.compiled_tensor_ns)}
        firsts = {}
        for seq in g.lane_tasks:
            for t in seq:
                ph, it = int(T["phase"][t]), int(T["iteration"][t])
                if ph in cost and it >= 0:
                    firsts.setdefault((int(T["rank"][t]), it, ph), t)
        for (rank, it, ph), t in firsts.items():
            insert(g, int(T["lane"][t]), dur_ns=cost[ph], name="torch.compile call overhead",
                   before=t, phase=ph, iteration=it)
        return len(firsts)


OPTIMIZATION = Fusion
