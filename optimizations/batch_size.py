"""``batch-size``: the same training step at ``factor`` times the batch size.

Model
-----
The per-sample work of the forward, backward and input pipeline scales with
the batch; weight-only work (optimizer step, gradient accumulation into
``.grad``, gradient all-reduce) and CPU-side framework overhead do not.
Each scaled task keeps a fixed part and scales the rest::

    new = fixed + (dur - fixed) * factor * speed(size) / speed(factor * size)

* compute-bound tasks (GEMM/conv kernels, ops with FLOPs; ``daydream.cost``):
  ``speed`` is the device's matmul (or convolution) throughput curve at the
  task's FLOPs, so small ops that run below peak grow less than ``factor``;
* memory-bound tasks: ``speed`` is the device's streaming bandwidth curve at
  the task's bytes;
* tasks whose FLOPs/bytes are unknown scale by ``factor``;
* the other self-time slices of a scaled op (an op with nested calls is one
  slice per stretch between them; only one carries its FLOPs and bytes) scale
  as that slice does (:func:`~daydream.optimizations._layers.spread_to_slices`).

FLOPs and bytes of a kernel come from the CPU op that launched it (shapes
recorded).  ``fixed`` is a GPU kernel's floor, the shortest kernel of its
rank in the trace (the device's empty-kernel time as observed), or for CPU
ops the device's per-op overhead.  On GPU traces CPU tasks are unchanged
except the input pipeline's (DataLoader ops: per-sample decoding scales).
The multiplier ``factor * speed / speed'`` is kept between 1 and ``factor``.

On CPU traces recorded with shapes (``remeasure=1``, the default), each
distinct compute op is instead re-run on this machine as traced and at the
new batch (:func:`daydream.opbench.scaled_signature`: every dimension equal
to the batch size, or to batch x the second input dimension (tokens of a
sequence model), scaled), and the measured time ratio is the multiplier: a
matmul's speed depends on its shape, not only its FLOPs (a batch of 16 rows
against a 512 x 1024 weight runs at 0.6x the FLOP rate of 64 rows here).  The
batch comes from the root module's recorded input shapes; a batch value that
is also a parameter dimension is ambiguous, and ops showing it keep the
curve-based multiplier.  With ``in_sequence`` (the default) the ops are
re-run in the order of one traced iteration, each occurrence with operands of
its own, alternating with the same sequence at the new batch
(:func:`daydream.opseq.sequence_ratios`): in training a layer's weights come
partly from memory, a cost that does not shrink with the batch, which an op
timed alone in a loop (weights in cache) misses.  The ops that read one
layer's weight (its forward and backward matmuls) read one tensor in the
re-run, as in training (the module table's parameter shapes say which
arguments are weights).  With ``repeats`` N the sequence at the new batch
runs N times back to back on the same operands and each op counts its mean:
N passes of a smaller batch one after another (micro-batches, gradient
accumulation) find the weights where the previous pass left them; the
``pipeline`` and ``tessel`` what-ifs scale to batch / M with ``repeats`` M.

Assumptions: the larger batch fits in memory and the framework picks the
same kernels (cuDNN may choose other algorithms); published device profiles
have flat curves, so there compute and memory tasks scale by ``factor``
exactly beyond their floor.  Kernels of weight-only work are recognised by
phase (optimizer) and layer (``AccumulateGrad``); a weight-gradient GEMM
does scale (its reduction runs over the batch).  Per-iteration time only:
the number of iterations per epoch changes by ``1 / factor``.
"""
from __future__ import annotations

import re

import numpy as np

from daydream.cost import compute_mask
from daydream.model import EventKind, Phase

from daydream.opbench import batch_time_ratios, scaled_signature

from ._layers import meta, op_figures, rerun_ratios, spread_to_slices, work_mask
from ._sequence import iteration_sequence
from .base import NotApplicable, Optimization, OptionError, Param
from daydream.primitives import set_duration

__all__ = ["BatchSize", "OPTIMIZATION", "WEIGHT_ONLY_RE", "scaled_ns", "batch_values", "rerun_tasks",
           "sequence_at", "scaled_sequence"]

#: Layers/ops whose work depends on the parameters, not the batch.
WEIGHT_ONLY_RE = re.compile(r"AccumulateGrad|^Optimizer\.|zero_grad|multi_tensor_apply|all.?reduce|nccl", re.I)
_SCALED_PHASES = (Phase.FORWARD, Phase.BACKWARD, Phase.DATALOADER)
_GPU_KINDS = (EventKind.KERNEL, EventKind.MEMCPY, EventKind.MEMSET)
_CONV_RE = re.compile(r"(?i)conv|scudnn|implicit_gemm|wgrad|dgrad|fprop|winograd")


def scaled_ns(dur, fixed, factor, speed_now, speed_new):
    """Duration after scaling the variable part by ``factor * speed_now / speed_new``.

    The multiplier stays between 1 and ``factor``: more work is never faster,
    and throughput never falls with size (this bounds noisy calibration curves).
    """
    fixed = np.minimum(fixed, dur)
    mult = np.clip(factor * np.asarray(speed_now) / np.asarray(speed_new), min(1.0, factor), max(1.0, factor))
    return fixed + (dur - fixed) * mult


def batch_values(metadata: dict) -> set:
    """Dimension sizes that are the batch, from the trace's module table (``daydream trace``).

    The first root module's first tensor argument gives the batch ``B`` (its
    leading dimension) and, when it has two or more dimensions, ``B x`` its
    second (the tokens of a sequence model, which ops see flattened).  Values
    that are also a parameter dimension are left out: there a dimension could
    be either.

    >>> sorted(batch_values({"modules": [{"depth": 0, "input_shapes": [[64, 512]], "param_shapes": []},
    ...                                  {"depth": 1, "param_shapes": [[1024, 512], [1024]]}]}))
    [64, 32768]
    >>> sorted(batch_values({"modules": [{"depth": 0, "input_shapes": [[8, 64]], "param_shapes": [[512, 128]]}]}))
    [8]
    """
    rows = metadata.get("modules") or []
    roots = [r for r in rows if isinstance(r, dict) and r.get("input_shapes")]
    shape = next((s for s in (roots[0]["input_shapes"] if roots else []) if isinstance(s, list) and s), None)
    if not shape or not all(isinstance(x, int) and x > 0 for x in shape):
        return set()
    values = {shape[0]} | ({shape[0] * shape[1]} if len(shape) >= 2 else set())
    params = {x for r in rows if isinstance(r, dict) for p in (r.get("param_shapes") or []) if isinstance(p, list)
              for x in p}
    return values - params


def rerun_tasks(ctx) -> np.ndarray:
    """The compute ops with known FLOPs among the tasks ``batch-size`` scales: those it re-runs."""
    g = ctx.graph
    tasks = BatchSize._scaled_tasks(g)
    flops = op_figures(ctx)[0]
    return tasks[compute_mask(g)[tasks] & (flops[tasks] > 0)]


def sequence_at(ctx, factor: float) -> list:
    """One traced iteration's re-run ops (:func:`rerun_tasks`) in order, at ``factor`` x the batch."""
    return scaled_sequence(ctx, iteration_sequence(ctx, rerun_tasks(ctx)), factor)


def scaled_sequence(ctx, seq: list, factor: float) -> list:
    """Op signatures ``seq`` of ``ctx``'s trace at ``factor`` x its batch, where the trace names
    its batch (:func:`batch_values`); those with no batch dimension unchanged."""
    values = batch_values(meta(ctx))
    if factor == 1 or not values:
        return seq
    return [scaled_signature(s, values, factor) or s for s in seq]


class BatchSize(Optimization):
    name = "batch-size"
    summary = "per-op scaling to a new batch size (compute by FLOPs, memory by bytes; weights fixed)"
    params = (Param("factor", 2.0, "new batch size / traced batch size"),
              Param("fixed_ns", -1, "fixed cost per GPU kernel, ns (-1: the trace's shortest kernel per rank)", int),
              Param("remeasure", True, "CPU traces with shapes: re-run compute ops at the new batch on this machine",
                    bool),
              Param("in_sequence", True, "re-run the ops as one traced iteration's sequence (each finds the caches "
                    "as the rest of the iteration leaves them), not each alone in a loop", bool),
              Param("repeats", 1, "passes at the new batch run back to back over the same weights (micro-batches, "
                    "gradient accumulation): the re-run repeats the scaled sequence as many times", int))
    assumptions = __doc__

    def apply(self, ctx):
        if self.factor <= 0:
            raise NotApplicable("batch-size: factor must be positive")
        if self.repeats < 1:
            raise OptionError(f"batch-size: repeats must be at least 1, got {self.repeats}")
        g = ctx.graph
        T = g.tasks
        tasks = self._scaled_tasks(g)
        if not len(tasks):
            raise NotApplicable("the trace has no forward/backward/input work to scale (no task with phase "
                                "forward, backward or dataloader); trace whole training iterations")
        flops, nbytes, _ = op_figures(ctx)
        dtype = str(meta(ctx).get("parameter_dtype") or "float32")
        gpu = T["kind"][tasks] != EventKind.CPU_OP
        fixed = np.where(gpu, self._kernel_floor(g, tasks), ctx.device.op_overhead_ns).astype(float)
        comp = compute_mask(g)[tasks]
        names = np.array([bool(_CONV_RE.search(s)) for s in g.names.strings] + [False])
        conv = names[T["name"][tasks]]
        now, new = np.ones(len(tasks)), np.ones(len(tasks))
        dev, f = ctx.device, self.factor
        for i, t in enumerate(tasks.tolist()):
            if comp[i] and flops[t] > 0:
                rate = dev.conv_flops_per_s if conv[i] else dev.matmul_flops_per_s
                now[i], new[i] = rate(dtype, flops[t]), rate(dtype, flops[t] * f)
            elif not comp[i] and nbytes[t] > 0:
                now[i], new[i] = dev.mem_bw_bytes_per_s(nbytes[t], dtype), dev.mem_bw_bytes_per_s(nbytes[t] * f, dtype)
        dur = T["dur_ns"][tasks].astype(float)
        scaled = scaled_ns(dur, fixed, f, now, new)
        measured = self._measured_ratios(ctx, tasks[comp & (flops[tasks] > 0)])
        if measured:
            at = np.array([measured.get(t, np.nan) for t in tasks.tolist()])
            ok = ~np.isnan(at)
            scaled[ok] = dur[ok] * np.clip(at[ok], min(1.0, f), max(1.0, f))
        before = T["dur_ns"].astype(float)
        after = before.copy()
        after[tasks] = scaled
        set_duration(g, np.arange(g.n_tasks), np.rint(spread_to_slices(g, before, after)).astype(np.int64))
        ctx.note(f"batch-size x{f}: {len(tasks)} tasks scaled ({int(comp.sum())} compute-bound, "
                 f"{int((flops[tasks] > 0).sum() + (nbytes[tasks] > 0).sum())} with known FLOPs/bytes); "
                 "optimizer, gradient accumulation/all-reduce and CPU overhead unchanged")

    def _measured_ratios(self, ctx, tasks) -> dict:
        """task -> t(new batch) / t(traced) of its op re-run here (CPU traces with shapes)."""
        values = batch_values(meta(ctx)) if self.remeasure else set()
        if not values:
            return {}
        seq = iteration_sequence(ctx, tasks, shared=True) if self.in_sequence else None
        return rerun_ratios(ctx, tasks, lambda sigs: batch_time_ratios(sigs, values, self.factor,
                                                                        ctx.device.threads or None, seq,
                                                                        self.repeats),
                            "batch-size: {n} distinct compute ops re-run at "
                            f"x{self.factor} of batch {'/'.join(map(str, sorted(values)))} on this machine")

    @staticmethod
    def _scaled_tasks(g) -> np.ndarray:
        T = g.tasks
        weight_names = np.array([bool(WEIGHT_ONLY_RE.search(s)) for s in g.names.strings] + [False])
        weight_layers = np.array([bool(WEIGHT_ONLY_RE.search(s)) for s in g.layers.strings] + [False])
        m = work_mask(g) & np.isin(T["phase"], _SCALED_PHASES) & (T["kind"] != EventKind.COLLECTIVE)
        m &= ~weight_names[T["name"]] & ~weight_layers[T["layer"]]
        cpu = T["kind"] == EventKind.CPU_OP
        gpu_rank = np.isin(T["rank"], np.unique(T["rank"][np.isin(T["kind"], _GPU_KINDS)]))
        loader = cpu & gpu_rank & (T["phase"] == Phase.DATALOADER) & (T["dur_ns"] > 0)
        m &= ~cpu | (T["flops"] > 0) | (T["bytes"] > 0)   # a CPU op with neither is pure overhead
        m |= loader & ~weight_layers[T["layer"]]
        return np.flatnonzero(m)

    def _kernel_floor(self, g, tasks) -> np.ndarray:
        T = g.tasks
        if self.fixed_ns >= 0:
            return np.full(len(tasks), self.fixed_ns)
        kern = (T["kind"] == EventKind.KERNEL) & (T["dur_ns"] > 0)
        floor = {int(r): int(T["dur_ns"][kern & (T["rank"] == r)].min()) for r in np.unique(T["rank"][kern])}
        return np.array([floor.get(int(r), 0) for r in T["rank"][tasks]])


OPTIMIZATION = BatchSize
