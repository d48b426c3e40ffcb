"""``fused-adam``: a fused (or foreach) optimizer step instead of the per-parameter loop.

Model
-----
The tasks of each ``Optimizer.step#...`` range are removed (with the Python
overhead between them).  ``impl=fused``: one task per step that streams the
optimizer state once: ``k x parameter bytes`` (Adam/AdamW: param r/w, grad r,
two moments r/w = 7; SGD with momentum 5; plain SGD 3) at the device's
measured streaming bandwidth for that size, plus one op's fixed cost for the
step counter update (on a GPU: a ``_foreach_add_`` of the step counters, then
the fused op, each a host call costing what the trace's one-kernel ops cost
on their thread, that launches a kernel: the real MLP step's took 20 and 19
us on an H200).  Runtime calls before the step's first op
(``cudaStreamIsCapturing``) stay, and so does the Python time before that op
(the optimizer's ``_init_group``).  ``impl=foreach``: one task per distinct op of the loop,
lasting the sum of that op's per-parameter durations less the fixed per-op
cost saved.  On a GPU trace the new work is a launch on the step's CPU thread
and a kernel on the stream the step used.

Assumptions: parameter bytes come from the trace metadata (``daydream trace``)
or, failing that, the recorded input sizes of the step's per-parameter in-place
ops (``mul_``, ``add_``, ...; a step whose ops carry no sizes is refused); all
parameters share one dtype and device; state tensors already exist (not the
first step).
"""
from __future__ import annotations

import numpy as np

from daydream.cost import elementwise_ns
from daydream.graph import Anchor, EdgeKind
from daydream.model import EventKind, LaneKind
from daydream.primitives import insert, remove, select

from ._common import OPTIMIZER_STEP_RE, by_rank_iteration, launch_of
from ._gpu_casts import one_kernel_op_ns
from ._layers import op_figures
from ._optstep import per_parameter_ops
from .base import NotApplicable, Optimization, Param

__all__ = ["FusedAdam", "OPTIMIZATION", "STATE_PASSES"]

#: Tensors of the size of the parameters that one fused step reads or writes.
STATE_PASSES = {"adam": 7, "adamw": 7, "sgd_momentum": 5, "sgd": 3, "adagrad": 5, "rmsprop": 5}


def _state_passes(opt_meta: dict) -> int:
    name = str(opt_meta.get("name") or opt_meta.get("class") or "adam").lower().rsplit(".", 1)[-1]
    if name == "sgd":
        mom = (opt_meta.get("defaults") or {}).get("momentum", 0)
        return STATE_PASSES["sgd_momentum" if mom else "sgd"]
    return STATE_PASSES.get(name, 7)


class FusedAdam(Optimization):
    name = "fused-adam"
    summary = "fused or foreach optimizer step (FusedAdam, torch fused=True / foreach=True)"
    params = (Param("impl", "fused", "fused: one kernel per step; foreach: one op per op kind", str,
                    ("fused", "foreach")),)
    assumptions = __doc__

    def apply(self, ctx):
        g = ctx.graph
        steps = select(g, layer=OPTIMIZER_STEP_RE, iteration=list(range(10 ** 6)))
        if not len(steps):
            raise NotApplicable("the trace has no optimizer step (Optimizer.step#...) inside its iterations; "
                                "trace iterations that call optimizer.step()")
        meta = ctx.meta().get("optimizer") or {}
        passes = _state_passes(meta)
        param_bytes = meta.get("param_bytes")
        if not param_bytes:
            param_bytes = self._param_bytes_from_ops(g, steps)
            ctx.note(f"fused-adam: parameter bytes estimated from the step's op inputs: {param_bytes}")
        launches = launch_of(g)
        removed = []
        host_ns = None
        for (rank, it), tasks in by_rank_iteration(g, steps).items():
            cpu = [t for t in tasks if g.lanes[int(g.tasks["lane"][t])].kind == LaneKind.CPU_THREAD]
            gpu = [t for t in tasks if t not in set(cpu)]
            cpu = cpu[_leading_calls(g, cpu):]      # a GPU step's capture check before its first op stays
            if not cpu:
                continue
            first = cpu[0]
            lane = int(g.tasks["lane"][first])
            if self.impl == "fused":
                dur = [elementwise_ns(ctx.device, passes * param_bytes)]
                names = ["fused optimizer step"]
                if gpu:     # the step counters' update, then the fused op: a kernel each
                    names, dur = ["_foreach_add_ (step counters)"] + names, [ctx.device.op_overhead_ns] + dur
                    host_ns = host_ns or _host_op_ns(ctx)
            else:
                names, dur = self._foreach(g, gpu or cpu, ctx.device.op_overhead_ns)
            self._replace(g, ctx, lane, first, cpu, gpu, names, dur, rank, it, launches, host_ns)
            removed.extend(cpu + gpu)
        remove(g, removed)
        ctx.note(f"fused-adam ({self.impl}): {passes} passes over {param_bytes / 1e6:.2f} MB of parameters per step")

    @staticmethod
    def _param_bytes_from_ops(g, steps) -> int:
        """Parameter bytes from the sizes of the step's per-parameter ops (shapes recorded).

        The in-place ops that run once or more per parameter (``mul_``, ``add_``, ...: at least a
        quarter as often as the step's most frequent op) update a parameter or a state tensor of
        its size, so the inputs of one such op name over a step cover the parameters once or
        more; the least non-zero sum over those names is taken, in the first iteration that has
        one (an op's 0-dimensional inputs, the optimizer's scalars, count 0 bytes).
        """
        T = g.tasks
        for it in np.unique(T["iteration"][steps]).tolist():
            mine = steps[T["iteration"][steps] == it]
            sums = [int(T["bytes"][mine][T["name"][mine] == n].sum()) for n in per_parameter_ops(g, mine).tolist()]
            if any(sums):
                return min(x for x in sums if x)
        raise NotApplicable("the trace's optimizer step has no sizes for its per-parameter ops (neither a "
                            "module table nor op shapes); record with `daydream trace` (module table, record_shapes)")

    @staticmethod
    def _foreach(g, tasks, overhead_ns):
        groups = {}
        for t in tasks:
            groups.setdefault(int(g.tasks["name"][t]), []).append(int(g.tasks["dur_ns"][t]))
        names = [f"_foreach {g.names[n]}" for n in groups]
        durs = [max(sum(d) - (len(d) - 1) * overhead_ns, min(d)) for d in groups.values()]
        return names, durs

    @staticmethod
    def _replace(g, ctx, lane, first, cpu, gpu, names, durs, rank, it, launches, host_ns=None):
        gap = int(g.tasks["gap_ns"][first])
        after = first
        layer = g.layers[int(g.tasks["layer"][first])]
        phase = int(g.tasks["phase"][first])
        stream = int(g.tasks["lane"][gpu[0]]) if gpu else None
        calls = [launches[k] for k in gpu if k in launches]
        call_ns = int(host_ns or (np.median(g.tasks["dur_ns"][calls]) if calls else ctx.device.op_overhead_ns))
        k_after = gpu[-1] if gpu else None
        for i, (name, dur) in enumerate(zip(names, durs)):
            if stream is None:
                after = insert(g, lane, dur_ns=int(dur), name=name, after=after, gap_ns=gap if i == 0 else 0,
                               phase=phase, layer=layer, iteration=it)
            else:
                call = insert(g, lane, dur_ns=call_ns, name="cudaLaunchKernel", kind=EventKind.RUNTIME,
                              after=after, gap_ns=gap if i == 0 else 0, phase=phase, layer=layer, iteration=it)
                k = insert(g, stream, dur_ns=int(dur), name=name, after=k_after, phase=phase, layer=layer,
                           iteration=it)
                k_after = k
                g.add_edges(call, k, EdgeKind.LAUNCH, anchor=Anchor.START)
                after = call


def _leading_calls(g, cpu) -> int:
    """How many of a step's CPU tasks come before its first op: runtime calls (a GPU step's
    ``cudaStreamIsCapturing``), which the fused step makes too."""
    kinds = g.tasks["kind"][cpu] if len(cpu) else []
    return next((i for i, k in enumerate(kinds) if k != EventKind.RUNTIME), len(cpu))


def _host_op_ns(ctx) -> float | None:
    """Host time of one of the fused step's ops on a GPU: what the trace's one-kernel ops cost."""
    return one_kernel_op_ns(ctx.graph, op_figures(ctx)[2])


OPTIMIZATION = FusedAdam
