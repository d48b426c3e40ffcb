"""``hfta``: horizontally fuse N copies of the traced model into one job (HFTA).

A hyper-parameter sweep trains N copies of one model that differ only in
hyper-parameters (learning rate, ...).  HFTA (Wang et al., MLSys 2021) fuses
them: every operator of the model becomes one operator over the N copies
(a linear layer becomes a batched GEMM, a convolution a grouped convolution,
an elementwise op one op over N times the elements), and one optimizer step
updates the stacked parameters.  The fused job pays each operator's fixed
cost (dispatch on CPU, kernel launch on GPU) and each line of Python once
instead of N times; only the work grows N-fold.

Model
-----
Every task of the traced iteration is one of:

* **compute** (a task with FLOPs: matmul, convolution): N times the work at
  the device's throughput at the fused size, ``dur x N x rate(f) / fused(N f)``
  with ``rate`` the calibrated matmul (or convolution) FLOP/s curve and
  ``fused`` the calibrated batched-matmul curve for a linear (``torch.bmm`` of
  equal products: on CPUs it runs below ``mm``; the matmul curve where a
  profile has none) or the grouped-convolution curve for a convolution (the
  convolution curve where a profile has none), so a
  small GEMM that runs below peak speeds up when batched;
* **memory-bound** (an op that reads or writes tensor data: elementwise,
  reductions, copies, the optimizer's updates): its first
  ``op_overhead_ns`` (the device's per-op fixed cost) is paid once, the rest
  ``D`` is streaming and grows to ``N x D x s`` (:func:`stream_ratio`), with
  ``bw`` the calibrated (hot-cache) streaming bandwidth curve and ``b`` the
  bytes the task moves (1.5 x its input bytes, :data:`MOVED_PER_INPUT_BYTE`):
  by default (``streaming=roofline``, since session 85) the fused op runs at
  the slower of its traced rate ``b / D`` and ``bw(N b)``, ``s = max(1,
  min(b / D, bw(b)) / bw(N b))``: an op traced below the curve's rate at N
  copies' bytes (its data already out of the caches, or its work per byte
  the bound) keeps its rate, one traced faster slows to the curve's.  A traced
  rate above ``bw(b)`` is not streaming in the op's own time and takes the
  curve's ratio ``bw(b) / bw(N b)``, which until session 85 every op took
  (``streaming=curve``).  On session 85's host (an Intel Xeon with 2 MiB of
  L2 per core, its curve 117 GB/s at 0.8 MB and 25 GB/s at 6 MB) that
  predicted the CNN's ``native_batch_norm`` x10.3 at N = 4 against x4.1 real:
  traced at 4.7 GB/s, a twentieth of the curve, it does not slow when fused;
  the HFTA rows read +18 / +34 % (CNN) and +11 to +26 % (MLP) with the curve,
  +5 / +7 % and +5 to +12 % with the roofline (docs/validation-log.md,
  "Session 85").  No op streams faster per byte fused than traced (the
  curve's low rate at small sizes is per-op cost, paid once already).  On the
  host of session 26 the curve's rule served: batch norm's backward ran at a
  quarter to a third of the curve's rate and still took 6x its time fused
  4-fold, where the roofline gave 4x; which rule holds depends on the host;
  ``streaming=additive`` (the traced time past the curve's as work per byte
  that stays, not overlapping the data's movement) lies between the two;
* the **other self-time slices** of a compute or memory-bound op (an op
  with nested calls is one slice per stretch between them, and only one
  carries its FLOPs and bytes: ``convolution_backward``'s grad-input and
  grad-weight halves on either side of an allocation, 44 % of its time in
  the bundled CNN): as that op's work slice
  (:func:`~daydream.optimizations._layers.spread_to_slices`);
* **fixed** (views and metadata ops such as ``t``, ``view``, ``expand``,
  allocation, autograd bookkeeping, Python time between ops, and the
  wrappers: ops that call the op moving their data, ``aten::relu_`` >
  ``aten::clamp_min_``, ``aten::conv2d`` > ... > ``mkldnn_convolution``,
  ``NativeBatchNormBackward0`` > ``native_batch_norm_backward``, whose own
  time is dispatch: :func:`wrappers`, ``wrappers_once=1``, the default since
  session 91; until then they grew with their input bytes, and in the
  bundled CNN fused 4-fold took x5.4-7.0 their traced time where the real
  fused job's took x1.1-1.9) and the **data loading** phase (all N models
  read the same input batch, as in a sweep over one data set): unchanged.

On a GPU trace the CPU ops only launch kernels and stay as they are; GPU
kernels without FLOP counts (the traces carry none for kernels) grow
N-fold: the occupancy gain of fusing small kernels, HFTA's main gain on a
GPU, is not modelled, so the prediction is conservative there; only
launch and framework overhead is paid once.

Metrics: ``fused_iteration_ms`` (the predicted iteration time, one step of
all N models), ``sequential_ms`` (N x the baseline iteration: the N jobs
one after another), ``throughput_gain`` (their ratio).

On a CPU trace recorded with shapes (``remeasure=1``, the default) each
distinct convolution (forward and ``convolution_backward``) and matmul is
instead re-run on this machine as traced and fused as HFTA runs it
(:func:`daydream.opbench.fused_signature`: a grouped convolution with N x
the channels, ``bmm`` / ``baddbmm`` over N stacked operands), and the measured
time ratio scales it: oneDNN's grouped convolutions here often take more
than N times one group's time, which a FLOP-indexed curve cannot know.
The batched GEMMs take the operands' layouts of HFTA's fused ``Linear``
(``layout=hfta``, the default since session 82): its weights are
``[N, in, out]`` row-major, the transpose of ``nn.Linear``'s, so the
backward reads them the other way and computes the weight's gradient as
the transpose of the traced product; a narrow layer (the MLP's 10-wide
head) runs its forward and weight gradient 2x and 5x longer that way than
as N traced calls stacked (``layout=traced``).
With ``in_sequence`` (the default) the ops are re-run in the order of one
traced iteration, alternating with the fused sequence
(:func:`daydream.opseq.sequence_ratios`), so each finds the caches as the
rest of its iteration leaves them (N copies of the weights and activations
are N times the data passing through them).  With ``chained`` (the default)
each op of both sequences reads the output of a recent op of its layout
(:func:`daydream.opseq.chain_calls`), as training's data flows, and each
signature's ratio weighs its occurrences by their time: with operands of its
own every single-model convolution re-ran colder than in training (the CNN's
``convolution_backward`` calls 13.75 ms an iteration against 12.58 traced,
session 54), and unchained the bundled CNN's fused job read 1-2.5 points
faster than chained, further below the real one (session 56).  A re-run gives every
op operands of its own, a working set many times the model's on both sides,
so it cannot see the model's state leaving the caches: on a CPU profile with
``cycle`` figures (``cycle=1``, the default) every compute task also takes
the profile's factor for N models' parameters and optimizer state against
one's (:func:`optimizations._common.cycle_ratio`,
:mod:`daydream.calibrate_cycle`), each copy's activations (its leaf modules'
outputs, :func:`optimizations._common.activation_bytes`) counted with its
state (``activations=1``, the default since session 77): fused, all N copies'
activations are live at once, and a model whose parameters are small but
whose activations are not (the bundled CNN: 0.3 MB of parameters, 14 MB of
activations) leaves the caches by them.  With ``remeasure`` the curve is the
calibration's probe measured again when predicting (``cycle_now=1``, the
default since session 78; :func:`optimizations._common.cycle_now`): its knee
moves with what else fills the host's shared cache, within the hour on this
project's VM, and a model whose state sits near it (the validation MLP's
9.5 MB, fused 2-fold) took x1.00 from a profile's curve and x1.05 from one
measured 37 minutes later (docs/validation-log.md, "Session 78").

With ``remeasure_memory`` (an option since session 93, off by default) the
memory-bound ops join the re-run, each fused as HFTA's job runs it
(:func:`daydream.opbench.fused_data_signature`: a convolution's activation
and its per-channel tensors N-fold along the channels, anything else with a
leading dimension of N; the bundled CNN's batch norm, ReLU backward and
residual adds are exactly the fused workload's calls), and its measured
ratio replaces the streaming model, which then serves only the ops that
cannot be rebuilt.  Which streaming rule held had depended on the host
(the curve on the hosts of sessions 26-84, the roofline on session 85's);
the re-run times the op on the host it predicts for.  The memory-bound ops
take no ``cycle`` factor: their re-run streams N copies' activations
already.  On session 93's host (an AMD EPYC, Zen 5) it did not help:
re-predicting one validation's five rounds each way, the CNN's rows moved
-0.7 / -0.2 points (N = 2 / 4) and the MLP's -1.1 / -2.3 / -3.2 (N = 2 / 4 /
8), all of them already low (docs/validation-log.md, "Session 93"); so the
streaming model stays the default.

Where it stops being valid: models whose operators do not fuse
horizontally (data-dependent control flow, ops without a batched or grouped
form); memory (N copies of parameters, gradients, optimizer state and
activations must fit); a CPU with several threads per op, where
parallel efficiency changes with size beyond what the 1-thread curves say;
sweeps whose models read different batches (data loading then grows
N-fold too).
"""
from __future__ import annotations

import re

import numpy as np

from daydream.model import EventKind, LaneKind, Phase
from daydream.sim import simulate

from daydream.opbench import LINEAR_LAYOUTS, fused_time_ratios

from ._common import cycle_ratio
from ._layers import rerun_ratios, signatures_of, spread_to_slices
from ._sequence import iteration_sequence
from ._streaming import MOVED_PER_INPUT_BYTE, STREAMING, stream_ratio
from .base import NotApplicable, Optimization, OptionError, Param

__all__ = ["HFTA", "OPTIMIZATION", "TaskClass", "classify", "fused_durations", "stream_ratio", "MAX_MODELS",
           "MOVED_PER_INPUT_BYTE", "STREAMING", "wrappers", "WRAPPED_BYTES_SHARE"]

#: Fusing more copies than this is refused (a sweep of that size would not fit in memory).
MAX_MODELS = 1024

#: Ops that touch no tensor data (views, metadata, allocation): their cost does not grow with N.
FIXED_OP_RE = re.compile(
    r"^(aten::(t|transpose|as_strided_?|expand|expand_as|view|_reshape_alias|reshape|_unsafe_view|unsqueeze|"
    r"squeeze|permute|select|slice|narrow|detach|alias|resolve_conj|resolve_neg|lift_fresh|empty|"
    r"empty_like|empty_strided|new_empty|new_empty_strided|zeros_like_meta|result_type|size|stride|"
    r"is_nonzero|item|_local_scalar_dense|numel|contiguous|to|_to_copy_meta|split|chunk|unbind|resize_)"
    r"|detach)$")
#: A memory-bound op is a wrapper (its own time dispatch, paid once) when an op nested in it has
#: FLOPs or reads at least this share of its input bytes (``aten::relu_`` > ``aten::clamp_min_``;
#: not ``aten::sum`` > the ``aten::fill_`` that zeroes its small output first).
WRAPPED_BYTES_SHARE = 0.5


class TaskClass:
    """How a task's time changes when N copies are fused (integer codes)."""

    FIXED = 0
    COMPUTE = 1
    MEMORY = 2
    GPU_SCALED = 3


def classify(g, wrappers_once: bool = True) -> np.ndarray:
    """Per task: its :class:`TaskClass` code.

    ``wrappers_once``: a memory-bound op that wraps the op moving its data (:func:`wrappers`) is
    fixed: its own time is dispatch, paid once fused."""
    T = g.tasks
    names = g.names.strings
    fixed_name = np.array([FIXED_OP_RE.match(s) is not None for s in names] + [True], bool)
    nm = fixed_name[np.where(T["name"] >= 0, T["name"], len(names))]
    kind = T["kind"]
    out = np.full(g.n_tasks, TaskClass.FIXED, np.int8)
    work = np.isin(T["phase"], (Phase.FORWARD, Phase.BACKWARD, Phase.OPTIMIZER, Phase.OTHER))
    gpu_ranks = sorted({ln.rank for ln in g.lanes if ln.kind == LaneKind.GPU_STREAM})
    # on a rank with a GPU, CPU ops only launch work: their time does not grow with N
    cpu = (kind == EventKind.CPU_OP) & ~np.isin(T["rank"], gpu_ranks)
    kernel = kind == EventKind.KERNEL
    out[work & (cpu | kernel) & (T["flops"] > 0)] = TaskClass.COMPUTE
    out[work & cpu & (T["flops"] == 0) & (T["bytes"] > 0) & ~nm] = TaskClass.MEMORY
    out[work & kernel & (T["flops"] == 0)] = TaskClass.GPU_SCALED
    if wrappers_once:
        out[(out == TaskClass.MEMORY) & wrappers(g, np.isin(out, (TaskClass.COMPUTE, TaskClass.MEMORY)))] = \
            TaskClass.FIXED
    return out


def _op_extents(g, ops) -> dict:
    """``(lane, event) -> [start, end, flops, bytes, tasks]`` of the CPU ops whose slices are ``ops``
    (traced times; an op with nested calls is several slices on its lane)."""
    T = g.tasks
    ext = {}
    for t in ops.tolist():
        s = int(T["traced_start_ns"][t])
        a = ext.setdefault((int(T["lane"][t]), int(T["event"][t])), [s, s, 0, 0, []])
        a[0], a[1] = min(a[0], s), max(a[1], s + int(T["dur_ns"][t]))
        a[2], a[3] = max(a[2], int(T["flops"][t])), max(a[3], int(T["bytes"][t]))
        a[4].append(t)
    return ext


def wrappers(g, data) -> np.ndarray:
    """Per task: whether its CPU op encloses, on its lane, a data op (``data``: per task) with
    FLOPs or with at least :data:`WRAPPED_BYTES_SHARE` of its own input bytes: the nested op moves
    the data, and the wrapper's own time is dispatch.

    >>> from daydream.graph.graph import DependencyGraph
    >>> from daydream.model import Lane
    >>> g = DependencyGraph(); cpu = g.add_lane(Lane(0, LaneKind.CPU_THREAD, 1, 1))
    >>> # relu_ [0, 30) around clamp_min_ [10, 25); sum [40, 70) around a small fill_ [42, 45)
    >>> _ = g.add_tasks(lane=[cpu] * 6, event=[0, 1, 0, 2, 3, 2], dur_ns=[10, 15, 5, 2, 3, 25],
    ...                 traced_start_ns=[0, 10, 25, 40, 42, 45], bytes=[800, 800, 0, 800, 8, 0])
    >>> wrappers(g, np.ones(6, bool)).tolist()
    [True, False, True, False, False, False]
    """
    T = g.tasks
    out = np.zeros(g.n_tasks, bool)
    ops = np.flatnonzero((T["event"] >= 0) & (T["kind"] == EventKind.CPU_OP) & (T["traced_start_ns"] >= 0))
    ext = _op_extents(g, ops)
    moves = {k: bool(data[a[4]].any()) for k, a in ext.items()}
    stacks = {}
    for (lane, ev), a in sorted(ext.items(), key=lambda kv: (kv[0][0], kv[1][0], -kv[1][1])):
        stack = stacks.setdefault(lane, [])
        while stack and stack[-1][1] <= a[0]:
            stack.pop()
        if moves[(lane, ev)]:
            for outer in stack:      # every op still open encloses this one
                if a[2] > 0 or a[3] >= WRAPPED_BYTES_SHARE * outer[3]:
                    out[outer[4]] = True
        stack.append(a)
    return out


def _is_conv(g) -> np.ndarray:
    conv = np.array(["conv" in s.lower() for s in g.names.strings] + [False], bool)
    return conv[np.where(g.tasks["name"] >= 0, g.tasks["name"], len(g.names.strings))]


def fused_durations(g, device, models: int, dtype: str = "float32", measured: dict | None = None,
                    cycle: float = 1.0, streaming: str = "roofline", wrappers_once: bool = True) -> np.ndarray:
    """Per task: its duration (ns) when ``models`` copies are fused into one op.

    ``measured`` (task -> fused / single time ratio of its op re-run on this
    machine) replaces the curve model for the compute tasks it names, and the
    streaming model for the memory-bound ones; every compute task then takes
    ``cycle`` times that (the caches as ``models`` copies' state leaves them).

    >>> from daydream.device import Curve, DeviceProfile
    >>> from daydream.graph.graph import DependencyGraph
    >>> from daydream.model import Lane, LaneKind
    >>> g = DependencyGraph(); cpu = g.add_lane(Lane(0, LaneKind.CPU_THREAD, 1, 1))
    >>> nm = [g.names.intern(s) for s in ("aten::mm", "aten::relu", "aten::t")]
    >>> ids = g.add_tasks(lane=[cpu] * 3, dur_ns=[1000, 1500, 300], name=nm, flops=[10**6, 0, 0],
    ...                   bytes=[0, 4096, 4096], phase=[Phase.FORWARD] * 3)
    >>> dev = DeviceProfile("d", "cpu", {"float32": Curve(((1e6, 1e9), (4e6, 2e9)))},
    ...                     {"float32": Curve.flat(1e9)}, op_overhead_ns=500)
    >>> fused_durations(g, dev, 4).tolist()   # mm: 4x work at 2x the rate; relu: 500 + 4 x 1000
    [2000, 4500, 300]
    """
    if models < 1:
        raise OptionError(f"hfta: models must be at least 1, got {models}")
    T = g.tasks
    dur = T["dur_ns"].astype(float)
    out = dur.copy()
    cls = classify(g, wrappers_once)
    conv = _is_conv(g)
    measured = measured or {}
    for t in np.flatnonzero(cls == TaskClass.COMPUTE).tolist():
        if t in measured:
            out[t] = dur[t] * measured[t]
            continue
        f = float(T["flops"][t])
        if conv[t]:
            fused = device.gconv_flops_per_s(dtype, models * f, models)
            single = device.conv_flops_per_s(dtype, f)
        else:   # a linear becomes a batched matmul
            fused = device.bmm_flops_per_s(dtype, models * f, models)
            single = device.matmul_flops_per_s(dtype, f)
        out[t] = dur[t] * models * single / fused
    comp = cls == TaskClass.COMPUTE
    out[comp] *= cycle
    fixed_ns = float(device.op_overhead_ns)
    for t in np.flatnonzero(cls == TaskClass.MEMORY).tolist():
        if t in measured:
            out[t] = dur[t] * measured[t]
            continue
        b = float(T["bytes"][t]) * MOVED_PER_INPUT_BYTE
        once = min(dur[t], fixed_ns)
        stream = dur[t] - once
        ratio = stream_ratio(b, stream, device.mem_bw_bytes_per_s(b, dtype),
                             device.mem_bw_bytes_per_s(models * b, dtype), streaming)
        out[t] = once + models * stream * ratio
    gs = cls == TaskClass.GPU_SCALED
    out[gs] = dur[gs] * models
    return np.rint(spread_to_slices(g, dur, out)).astype(np.int64)


class HFTA(Optimization):
    name = "hfta"
    summary = "N copies of the model fused horizontally into one job (HFTA) vs. N jobs one after another"
    params = (Param("models", 4, "copies of the model fused into one job (a sweep of N configurations)", int),
              Param("dtype", "float32", "dtype of the fused ops' throughput curves", str,
                    ("float32", "bfloat16", "float16")),
              Param("remeasure", True, "CPU traces with shapes: re-run each convolution and matmul fused "
                    "(grouped / batched) on this machine", bool),
              Param("remeasure_memory", False, "with remeasure: each memory-bound op too is re-run fused (N "
                    "copies' data at once, in the fused job's layout) in place of the streaming model, which "
                    "then serves the ops that cannot be rebuilt (off: on session 93's host it moved the CNN's "
                    "rows by under 1 point and the MLP's 1-3 points lower, away from the real runs)", bool),
              Param("in_sequence", True, "re-run the ops as one traced iteration's sequence (each finds the caches "
                    "as the rest of the iteration leaves them), not each alone in a loop", bool),
              Param("chained", True, "in sequence, each op reads the output of a recent op of its layout (the "
                    "data flow: in training an op's input was just written by the op before it)", bool),
              Param("layout", "hfta", "the fused linear layers' operands: as HFTA's Linear keeps them (weights "
                    "[N, in, out] row-major, the transpose of nn.Linear's) or each as traced with N stacked",
                    str, LINEAR_LAYOUTS),
              Param("warm", False, "in sequence, each side's timed pass follows an untimed pass of its own, as a "
                    "training iteration follows the one before it, not the other side's pass (the MLP's rows read "
                    "3-7 points higher, the more copies the more: docs/validation-log.md, session 82)", bool),
              Param("streaming", "roofline", "memory-bound ops' time per byte fused: the streaming curve's slowdown "
                    "from one copy's bytes to N copies' (curve), the slower of the traced rate and the curve's at N "
                    "copies' bytes (roofline), or the traced time past the curve's as work that stays (additive)",
                    str, STREAMING),
              Param("wrappers_once", True, "CPU: a memory-bound op that calls the op moving its data "
                    "(aten::relu_ > aten::clamp_min_, aten::conv2d > ... > mkldnn_convolution) is dispatch, paid once "
                    "(false: scaled by its input bytes as the data's mover)", bool),
              Param("cycle", True, "CPU: the fused job keeps N models' parameters and optimizer state, and its "
                    "compute ops find the caches as that leaves them, not one model's as in the trace (the "
                    "profile's cycle figures; false: leave it out)", bool),
              Param("activations", True, "with cycle: each copy's activations count with its state (fused, "
                    "all N copies' activations are live at once)", bool),
              Param("cycle_now", True, "with cycle and remeasure: the cycle figures measured on this machine when "
                    "predicting (the calibration's probe, about 6 s once per process), not the profile's: the "
                    "curve moves with what else fills the host's caches", bool))
    assumptions = __doc__

    def apply(self, ctx):
        n = self.models
        if n < 1:
            raise OptionError(f"hfta: models must be at least 1, got {n}")
        if n > MAX_MODELS:
            raise OptionError(f"hfta: models={n} is more than {MAX_MODELS} fused copies; "
                              f"N copies of parameters, gradients and activations would not fit")
        g = ctx.graph
        cls = classify(g, self.wrappers_once)
        if not (cls != TaskClass.FIXED).any():
            raise NotApplicable("hfta: the trace has no compute or memory-bound ops to fuse "
                                "(no FLOPs or tensor sizes recorded; trace with `daydream trace`)")
        base_ms = simulate(g).mean_iteration_ns()[1] / 1e6
        measured = self._measured_ratios(ctx, cls)
        now = self.cycle_now and self.remeasure and n > 1
        cycle = cycle_ratio(ctx, n, activations=self.activations, now=now) if self.cycle else 1.0
        g.tasks["dur_ns"][:] = fused_durations(g, ctx.device, n, self.dtype, measured, cycle, self.streaming,
                                             self.wrappers_once)
        fused_ms = simulate(g).mean_iteration_ns()[1] / 1e6
        seq_ms = n * base_ms
        ctx.metrics.update({"fused_iteration_ms": fused_ms, "sequential_ms": seq_ms,
                            "throughput_gain": seq_ms / fused_ms if fused_ms else float("inf")})
        counts = np.bincount(cls, minlength=4)
        ctx.note(f"hfta: {n} models fused: {counts[TaskClass.COMPUTE]} compute, "
                 f"{counts[TaskClass.MEMORY]} memory-bound, {counts[TaskClass.GPU_SCALED]} GPU kernel task(s) "
                 f"grow with N; dispatch, views and Python time are paid once; data loading is shared")
        if cycle != 1.0:
            ctx.metrics["cycle_factor"] = cycle
            kept = ("parameters, optimizer state and activations" if self.activations
                    else "parameters and optimizer state")
            source = "the cycle figures measured now" if now else "the profile's cycle figures"
            ctx.note(f"hfta: the fused job keeps {n} models' {kept}: its compute ops take "
                     f"x{cycle:.2f} ({source}, against one model's; `cycle=false` leaves it out)")


    def _measured_ratios(self, ctx, cls) -> dict:
        """task -> t(N fused) / t(one) of its op re-run here (CPU traces recorded with shapes): the
        compute tasks, and the memory-bound ones with ``remeasure_memory``."""
        if not self.remeasure or self.models < 2:
            return {}
        memory = np.flatnonzero(cls == TaskClass.MEMORY) if self.remeasure_memory else np.array([], np.int64)
        tasks = np.sort(np.concatenate([np.flatnonzero(cls == TaskClass.COMPUTE), memory]))
        data = set(signatures_of(ctx, memory).values())
        seq = iteration_sequence(ctx, tasks, shared=True) if self.in_sequence else None
        what = "convolutions/matmuls and memory-bound ops" if len(memory) else "convolutions/matmuls"
        return rerun_ratios(ctx, tasks, lambda sigs: fused_time_ratios(sigs, self.models, ctx.device.threads or None,
                                                                       seq, self.chained, self.layout, self.warm,
                                                                       data),
                            "hfta: {n} distinct " f"{what} re-run fused x{self.models} on this machine")


OPTIMIZATION = HFTA
