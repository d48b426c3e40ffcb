"""``ptd-p``: Megatron's PTD-P -- pipeline x tensor x data parallelism over N devices.

Model
-----
A configuration ``(p, t, d)`` with ``p * t * d = devices`` chains the
existing what-ifs on one graph, skipping degrees of 1:

1. ``tensor-parallel:degree=t`` (Megatron column/row split, in-line
   all-reduces);
2. ``pipeline:stages=p,microbatches=m,schedule=...`` (builds the per-rank
   pipeline graph from the tensor-parallel durations);
3. data parallelism over ``d`` replicas of that: without a pipeline the
   ``data-parallel`` what-if (DDP buckets overlapped with backward) on the
   gradients a rank holds after the tensor split; with a pipeline, one
   all-reduce of each pipeline rank's gradients before its optimizer step
   (Megatron reduces after the pipeline flush), ``device.allreduce_ns(bytes, d)``,
   on a communication lane -- or in line on a CPU without a spare core per
   process (as ``data-parallel`` does).

Memory per device: parameters x (weights + gradients + optimizer state:
momentum SGD 1x, Adam 2x) after the tensor split and, with a pipeline, the
largest stage's share plus its stashed activations (``pipeline``'s figure);
without a pipeline the activations are the module outputs of one batch.
Outputs of the modules the tensor split covers (column linear to row linear)
are held 1/t per device; the others (layer norms, residual stream) whole,
as in Megatron without sequence parallelism.  With a pipeline the stage's
activations are scaled by the model-wide share this gives.
Metrics: ``memory_bytes_per_device``, ``devices``, and those of the chained
what-ifs.

Assumptions and limits: those of the three what-ifs; the pipeline splits the
data-parallel replica's batch into micro-batches (global batch = d x traced
batch); tensor-parallel groups are assumed inside a node (its all-reduces use
the device's collective figures like every other collective); the split
share of a pipeline stage's activations is the whole model's.
"""
from __future__ import annotations

import copy
import dataclasses
import importlib
from dataclasses import dataclass

from daydream.model import LaneKind, Phase
from daydream.primitives import insert

from ._common import leaf_paths
from ._layers import meta
from .base import NotApplicable, Optimization, OptionError, Param

__all__ = ["PTDP", "OPTIMIZATION", "Config", "configurations", "pipeline_available", "state_factor"]


@dataclass(frozen=True)
class Config:
    """One PTD-P configuration: pipeline, tensor and data degrees, micro-batches."""

    pipeline: int
    tensor: int
    data: int
    microbatches: int = 1

    @property
    def devices(self) -> int:
        return self.pipeline * self.tensor * self.data

    def spec(self, schedule: str = "1f1b") -> str:
        """The ``ptd-p`` what-if of this configuration.

        >>> Config(2, 2, 1, 4).spec()
        'ptd-p:devices=4,tensor=2,pipeline=2,microbatches=4,schedule=1f1b'
        """
        return (f"ptd-p:devices={self.devices},tensor={self.tensor},pipeline={self.pipeline},"
                f"microbatches={self.microbatches},schedule={schedule}")

    def label(self) -> str:
        m = f" m={self.microbatches}" if self.pipeline > 1 else ""
        return f"p={self.pipeline} t={self.tensor} d={self.data}{m}"


def pipeline_available() -> bool:
    """Whether the ``pipeline`` what-if is installed."""
    try:
        importlib.import_module(f"{__package__}.pipeline")
    except ModuleNotFoundError:
        return False
    return True


def configurations(devices: int, microbatches=(4,), max_tensor: int = 0, pipeline: bool = True) -> list:
    """Every (p, t, d) with ``p * t * d = devices`` (micro-batch counts for p > 1).

    >>> [c.label() for c in configurations(4, microbatches=(4,))]
    ['p=1 t=1 d=4', 'p=1 t=2 d=2', 'p=1 t=4 d=1', 'p=2 t=1 d=2 m=4', 'p=2 t=2 d=1 m=4', 'p=4 t=1 d=1 m=4']
    """
    if devices < 1:
        raise OptionError(f"ptd-p: devices must be at least 1, got {devices}")
    out = []
    divisors = [k for k in range(1, devices + 1) if devices % k == 0]
    for p in divisors:
        if p > 1 and not pipeline:
            continue
        for t in divisors:
            if (devices // p) % t or (max_tensor and t > max_tensor):
                continue
            for m in (microbatches if p > 1 else (1,)):
                out.append(Config(p, t, devices // (p * t), int(m)))
    return out


def state_factor(m: dict) -> int:
    """Optimizer state per parameter byte: SGD with momentum 1, Adam/AdamW 2, plain SGD 0."""
    opt = m.get("optimizer") or {}
    name = str(opt.get("name", "")).lower()
    if name.startswith("adam"):
        return 2
    return 1 if name == "sgd" and (opt.get("defaults") or {}).get("momentum") else 0


class PTDP(Optimization):
    name = "ptd-p"
    summary = "PTD-P: pipeline x tensor x data parallelism over N devices (Megatron-LM)"
    params = (Param("devices", 8, "devices in all (pipeline x tensor x data)", int),
              Param("tensor", 1, "tensor-parallel degree t", int),
              Param("pipeline", 1, "pipeline stages p", int),
              Param("microbatches", 4, "micro-batches per iteration (pipeline)", int),
              Param("schedule", "1f1b", "pipeline schedule (see `pipeline`)", str),
              Param("backend", "auto", "collective figures: auto, gloo, nccl", str, ("auto", "gloo", "nccl")),
              Param("api", "megatron", "tensor-parallel host overhead: megatron (none) or torch (DTensor)", str,
                    ("megatron", "torch")),
              Param("heads", 0, "attention heads, to refuse tensor degrees that do not divide them (0: from "
                    "the trace's shapes when recorded)", int))
    assumptions = __doc__

    def config(self) -> Config:
        p, t, n = self.pipeline, self.tensor, self.devices
        if min(p, t, n) < 1:
            raise OptionError(f"ptd-p: devices ({n}), tensor ({t}) and pipeline ({p}) must be at least 1")
        if n % (p * t):
            raise OptionError(f"ptd-p: pipeline x tensor = {p} x {t} does not divide {n} devices")
        return Config(p, t, n // (p * t), self.microbatches)

    def apply(self, ctx):
        c = self.config()
        table = {m["path"]: m for m in (meta(ctx).get("modules") or [])}
        total = sum(int(m.get("param_bytes") or 0) for m in table.values())
        if not total:
            raise NotApplicable("ptd-p needs parameter sizes per module; record the trace with `daydream trace`")
        per_rank, split = total, frozenset()
        if c.tensor > 1:
            tp = get_class("tensor-parallel")(degree=c.tensor, backend=self.backend, api=self.api, heads=self.heads)
            tp.apply(ctx)
            per_rank, split = ctx.metrics["param_bytes_per_rank"], tp.split_paths
        if c.pipeline > 1:
            if not pipeline_available():
                raise NotApplicable("ptd-p: the pipeline what-if is not installed; only p=1 configurations apply")
            get_class("pipeline")(stages=c.pipeline, microbatches=c.microbatches, schedule=self.schedule).apply(ctx)
        if c.data > 1:
            self._data_parallel(ctx, c, table, split, per_rank / total)
        ctx.metrics["devices"] = c.devices
        ctx.metrics["memory_bytes_per_device"] = int(self._memory(ctx, c, table, per_rank, per_rank / total, split))
        ctx.note(f"ptd-p: {c.label()} on {c.devices} devices")

    def _data_parallel(self, ctx, c, table, split, tp_fraction):
        if c.pipeline == 1:
            # DDP over the gradients left on a rank after the tensor split
            scaled = [dict(m, param_bytes=(m.get("param_bytes") or 0) / c.tensor) if m["path"] in split else m
                      for m in table.values()]
            original = ctx.trace
            ctx.trace = _with_modules(original, scaled)
            try:
                get_class("data-parallel")(workers=c.data, backend=self.backend).apply(ctx)
            finally:
                ctx.trace = original
            return
        g, dev = ctx.graph, ctx.device
        backend = None if self.backend == "auto" else self.backend
        shares = _shares_core(ctx, c.pipeline * c.tensor * c.data)
        steps = {}      # (rank, iteration) -> its first optimizer task, in lane order
        for li, seq in enumerate(g.lane_tasks):
            if g.lanes[li].kind == LaneKind.COMM:
                continue
            for t in seq:
                if g.tasks["phase"][t] == Phase.OPTIMIZER:
                    steps.setdefault((int(g.tasks["rank"][t]), int(g.tasks["iteration"][t])), t)
        comm = {}
        for step in steps.values():
            rank = int(g.tasks["rank"][step])
            nbytes = int(ctx.metrics.get(f"rank{rank}_weights_bytes", 0) * tp_fraction)
            dur = int(dev.allreduce_ns(nbytes, c.data, backend))
            lane = int(g.tasks["lane"][step])
            it = int(g.tasks["iteration"][step])
            if shares:
                insert(g, lane, dur_ns=dur, name="DP all-reduce", before=step, phase=Phase.BACKWARD,
                       iteration=it, bytes_=nbytes)
                continue
            if rank not in comm:
                from daydream.model import Lane

                comm[rank] = g.add_lane(Lane(rank, LaneKind.COMM, f"rank {rank}", "dp all-reduce", "dp all-reduce"))
            seq = g.lane_tasks[lane]
            i = seq.index(step)
            deps = [seq[i - 1]] if i > 0 else []
            insert(g, comm[rank], dur_ns=dur, name="DP all-reduce", phase=Phase.BACKWARD, iteration=it,
                   bytes_=nbytes, deps=deps, succs=[step])

    @staticmethod
    def _memory(ctx, c, table, per_rank, tp_fraction, split=frozenset()) -> float:
        m = ctx.metrics
        state = 2 + state_factor(meta(ctx))   # weights, gradients, optimizer state
        out = {p: int(table[p].get("output_bytes") or 0) for p in leaf_paths(table)}
        act = sum(out.values())
        held = act - sum(b for p, b in out.items() if p in split) * (1 - 1 / c.tensor)
        if c.pipeline > 1:
            share = held / act if act else 1.0
            return max(m.get(f"rank{r}_weights_bytes", 0) * tp_fraction * state
                       + m.get(f"rank{r}_activations_bytes", 0) * share for r in range(c.pipeline))
        return per_rank * state + held


def get_class(name: str):
    """The Optimization class registered as ``name`` (imported on use)."""
    from . import MODULES

    return importlib.import_module(f"{__package__}.{MODULES[name]}").OPTIMIZATION


def _with_modules(trace, modules):
    """A shallow copy of ``trace`` whose metadata lists ``modules``."""
    out = copy.copy(trace)
    out.ranks = [dataclasses.replace(r, meta={**r.meta, "daydream": {**(r.meta.get("daydream") or {}),
                                                                       "modules": modules}})
                 for r in trace.ranks]
    return out


def _shares_core(ctx, processes: int) -> bool:
    """On a CPU, gloo reduces on a core: without a spare core per process it runs in line."""
    if ctx.device.kind != "cpu":
        return False
    cpu = (meta(ctx).get("device") or {}).get("cpu") or {}
    cores, threads = cpu.get("logical_cores"), cpu.get("torch_threads") or ctx.device.threads or 1
    return bool(cores) and cores - processes * threads < processes


OPTIMIZATION = PTDP
