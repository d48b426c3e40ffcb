"""``tensor-parallel``: Megatron-style tensor (intra-layer) parallelism over T ranks.

Model
-----
* **Which layers split.**  Linear modules of the trace's module table are
  paired Megatron-style: two ``Linear`` children of one parent (attention's
  QKV and output projection, an MLP's two linears) form a column-parallel /
  row-parallel pair.  When no module has two linear children (a plain MLP of
  one-linear blocks) consecutive linears are paired instead, the last one
  (the classifier head) staying whole.  Everything the forward runs between
  the column linear's first task and the row linear's last task (activations,
  the attention core on ``heads / T`` heads, the parent's own reshapes)
  works on 1/T of the features and is split too; every other layer
  (embeddings, norms, residual adds, loss, head) is replicated.
* **Split work.**  A split task with FLOPs (GEMMs) takes the time of the
  smaller GEMM at the device's throughput curve: ``d * rate(f) / rate(f/T) / T``.
  One with bytes but no FLOPs (copies, activations, the attention core)
  streams 1/T of its bytes, the device's per-op overhead kept: by default
  (``streaming=roofline``, since session 88) at the slower of its traced rate
  and the streaming curve's at 1/T of the bytes (:func:`split_stream_ns`), so
  about 1/T of its time past the overhead; with ``streaming=curve``
  ``d * bw_time(b/T) / bw_time(b)``, the hot-cache curve's speed-up at the
  smaller size.  On session 85's Intel host (2 MiB of L2 a core) the curve
  put the validation transformer's split ``gelu``, ``gelu_backward`` and
  ``sum`` at 0.31-0.38 of their traced time, where the real 2-rank run took
  0.48-0.62 (docs/validation-log.md, "Session 88"), as ``hfta``'s fused ops
  had not slowed as the curve said (its ``streaming``).  Dispatch slices (no
  bytes, no FLOPs) and the Python gaps between ops stay.  Forward and
  backward alike.
* **Communication.**  One all-reduce of the row linear's output in forward
  (``g`` in Megatron) and one of the column linear's input gradient in
  backward (``f``), each ``device.allreduce_ns(bytes, T, backend)`` on the
  activation bytes of the row linear's output (module table).  They are
  inserted in line on the lane of the work they follow: the next op needs
  their result (no asynchronous overlap, as in Megatron-LM without
  sequence-parallel overlap).  With ``api=torch`` on gloo figures the
  all-reduce of the first pair's size costs what it was measured to cost
  here as torch's TP API runs it in training (functional collectives, right
  after the matmul that makes its input; :func:`api_overhead_ns`), other
  sizes and degrees scaled from it by the profile's ring model: the
  profile's figure is timed back to back, which read 1.4-2.5 ms for 1 MiB on
  the development VM where the real runs' in-line all-reduces took 2.6-3.5.
* **Co-run** (``corun=profile``, the default; as ``data-parallel``): on a
  CPU host the T ranks compute on its cores at once, sharing its cache and
  memory bandwidth, so every rank's traced thread work (the split and
  replicated ops, the Python gaps) runs at the co-run rate
  (:mod:`optimizations._corun`; with ``corun=trace`` each phase's at its
  own); 1 off CPU.  The inserted all-reduces
  (calibrated on two processes) and DTensor overhead keep their figures.
* **Stragglers** (``stragglers=true``, the default): the all-reduces are
  barriers; before the last one of an iteration a rank waits for the slowest
  of the T, the expected wait from the traced rank's own spread of whole
  iterations and the profile's ``process_spread``
  (:func:`optimizations._stragglers.wait_for_stragglers`; a one-rank trace only).
* **Optimizer.**  Its bytes-moving tasks scale with the parameter bytes a rank
  still holds: ``(replicated + split / T) / total``.
* **Implementation overhead** (``api=torch``, the default): torch's TP API
  wraps weights and activations in ``DTensor``; its host time per pair
  (forward, backward) is measured once on this machine by a micro-benchmark
  (:func:`daydream.workloads.tensor_parallel.measure_api_overhead`: the
  pair under DTensor against the same pair split by hand, on a 2-rank mesh,
  under the profiler like the trace, on an input of the traced linears' rank,
  each call after other data went through the caches; since session 88 on a
  pair of the first traced column linear's sizes, its input and output
  features, where the trace has shapes: DTensor copies whole activations and
  gradients, which the pair of 8 features it used until then left out: on
  the validation transformer's pair DTensor's figures read 1.5-2x the tiny
  pair's in the same minutes, docs/validation-log.md, "Session 88") and
  inserted before the column linear's forward and after its backward.  ``api=megatron`` (plain tensors)
  adds nothing.

Metrics: ``param_bytes_per_rank``, ``allreduce_bytes_per_iteration``,
``allreduce_ms_per_iteration``.

Assumptions and limits: the module table and op shapes come from
``daydream trace``; each split module runs once per iteration; the all-reduce
costs the calibrated (gloo) or published (NCCL) ring figures and, on a CPU,
runs on the training thread's core; a slower rank is waited for only at the
last all-reduce of an iteration (``stragglers``); the DTensor overhead is that
of a 2-rank mesh on this host, taken as the same at other degrees (a GPU
trace's host may differ); sequence parallelism and embedding/vocabulary
splitting are not modelled.
"""
from __future__ import annotations

import json
import re

import numpy as np

from daydream.cost import elementwise_ns
from daydream.model import EventKind, Phase
from daydream.primitives import insert

from ._common import OPTIMIZER_STEP_RE, module_table
from ._corun import PHASE_SOURCES, corun_rates, slow_thread_work
from ._layers import lane_position, op_figures, work_mask
from ._stragglers import wait_for_stragglers
from ._streaming import MOVED_PER_INPUT_BYTE, stream_ratio
from .base import NotApplicable, Optimization, Param

__all__ = ["TensorParallel", "OPTIMIZATION", "megatron_pairs", "linear_modules", "api_overhead_ns",
           "forget_api_overhead", "API_MESH_RANKS", "split_stream_ns"]

#: Calls a timed block of :func:`api_overhead_ns` makes on a pair of the traced sizes (compute
#: there takes milliseconds a call, where the tiny pair's takes microseconds).
SIZED_CALLS = 20

#: Ranks of the mesh on which torch's TP API overhead is measured (:func:`api_overhead_ns`): with
#: one rank DTensor skips the redistributions, most of its cost; assumed the same at other degrees.
API_MESH_RANKS = 2

_LINEAR_TYPE = re.compile(r"(^|\.)(\w*Linear)$")
_ATTENTION_OP = re.compile(r"scaled_dot_product|flash_attention|efficient_attention|attention")


def linear_modules(table: dict, pattern: str = "") -> list:
    """Paths of ``Linear`` modules in module-table (registration) order, optionally filtered."""
    rx = re.compile(pattern) if pattern else None
    return [p for p, m in table.items() if _LINEAR_TYPE.search(str(m.get("type", "")))
            and (rx is None or rx.search(p))]


def megatron_pairs(paths: list) -> list:
    """Column/row-parallel pairs: linear siblings two by two, else consecutive linears but the last.

    >>> megatron_pairs(["m.attn.qkv", "m.attn.proj", "m.mlp.0", "m.mlp.2", "m.head"])
    [('m.attn.qkv', 'm.attn.proj'), ('m.mlp.0', 'm.mlp.2')]
    >>> megatron_pairs(["b.0.0", "b.1.0", "b.2.0", "b.3.0", "head"])
    [('b.0.0', 'b.1.0'), ('b.2.0', 'b.3.0')]
    """
    by_parent = {}
    for p in paths:
        by_parent.setdefault(p.rpartition(".")[0], []).append(p)
    pairs = [(kids[i], kids[i + 1]) for kids in by_parent.values() for i in range(0, len(kids) - 1, 2)]
    if pairs:
        return pairs
    body = paths[:-1]
    return [(body[i], body[i + 1]) for i in range(0, len(body) - 1, 2)]


def split_stream_ns(device, dur_ns: float, input_bytes: float, degree: int) -> float:
    """A memory-bound op's time when each of ``degree`` ranks streams 1/``degree`` of its
    bytes (``streaming=roofline``): the device's per-op overhead once, the rest a share of
    the traced time, at the slower of the traced rate and the streaming curve's at the
    smaller size (:func:`optimizations._streaming.stream_ratio`).

    >>> from daydream.device import Curve, DeviceProfile
    >>> dev = DeviceProfile("d", "cpu", {}, {"float32": Curve(((1e5, 1e11), (1e7, 1e10)))}, op_overhead_ns=500)
    >>> split_stream_ns(dev, 10_500.0, 2e5, 2)      # 0.3 MB in 10 us: 30 GB/s, under the curve's rate
    5500.0
    """
    once = min(dur_ns, float(device.op_overhead_ns))
    stream = dur_ns - once
    moved = input_bytes * MOVED_PER_INPUT_BYTE
    ratio = stream_ratio(moved, stream, device.mem_bw_bytes_per_s(moved), device.mem_bw_bytes_per_s(moved / degree),
                         "roofline", "tensor-parallel")
    return once + stream / degree * ratio


class TensorParallel(Optimization):
    name = "tensor-parallel"
    summary = "Megatron-style tensor parallelism: column/row-split linears and attention over T ranks"
    params = (Param("degree", 2, "tensor-parallel ranks T", int),
              Param("backend", "auto", "collective figures to use: auto, gloo, nccl", str, ("auto", "gloo", "nccl")),
              Param("corun", "profile", "CPU: ranks on one host's cores compute at the co-run rate of the "
                    "device profile (profile), of the trace's own ops re-run beside a twin, per phase (trace) or "
                    "one rate of the compute ops (compute), or alone (off)", str, PHASE_SOURCES),
              Param("stragglers", True, "wait at each iteration's last all-reduce for the slowest rank, from "
                    "the trace's own iteration-to-iteration spread and the profile's process_spread", bool),
              Param("layers", "", "regex of module paths that may be split (default: every Linear)", str),
              Param("api", "torch", "TP implementation: torch (DTensor: its host overhead and, on gloo, its in-line "
                    "all-reduces as measured on this machine) or megatron (plain tensors: no overhead, the "
                    "profile's all-reduce)", str, ("torch", "megatron")),
              Param("streaming", "roofline", "memory-bound split ops' time per byte: the slower of the traced "
                    "rate and the streaming curve's at 1/T of the bytes (roofline), or the curve's speed-up from "
                    "the traced bytes to 1/T of them (curve)", str, ("curve", "roofline")),
              Param("heads", 0, "attention heads per layer, to refuse degrees that do not divide them "
                    "(0: from the trace's attention shapes when recorded)", int))
    assumptions = __doc__

    def apply(self, ctx):
        T_ = self.degree
        if T_ < 1:
            raise NotApplicable(f"tensor-parallel: degree must be at least 1, got {T_}")
        table = module_table(ctx, "tensor-parallel")
        pairs = megatron_pairs(linear_modules(table, self.layers))
        if not pairs:
            raise NotApplicable("tensor-parallel: the module table has no pair of Linear modules to split")
        if T_ == 1:
            ctx.note("tensor-parallel: degree 1 changes nothing")
            return
        g = ctx.graph
        check_divisible(ctx, pairs, T_, self.heads)
        split = self._split_layers(g, pairs)
        self.split_paths = frozenset(g.layers[i] for i in split)   # read by ``ptd-p``
        flops, nbytes, _ = op_figures(ctx)
        self._scale_split(ctx, split, flops, nbytes)
        pbytes = self._scale_optimizer(ctx, table, split, nbytes)
        slow_thread_work(ctx, corun_rates(ctx, self.corun), f"tensor-parallel: {T_} ranks", self.corun)
        cost = self._api_cost(ctx, pairs, table) if self.api == "torch" else None
        n, ar_bytes, ar_ns, iters = self._insert_allreduces(ctx, pairs, table, self._in_line_scale(ctx, cost))
        if self.api == "torch":
            self._insert_api_overhead(ctx, pairs, cost)
        ctx.metrics["param_bytes_per_rank"] = int(pbytes)
        ctx.metrics["allreduce_bytes_per_iteration"] = int(ar_bytes / iters)
        ctx.metrics["allreduce_ms_per_iteration"] = ar_ns / iters / 1e6
        ctx.note(f"tensor-parallel: {len(pairs)} column/row pair(s) over {T_} ranks "
                 f"({', '.join(c + '|' + r for c, r in pairs[:4])}{', ...' if len(pairs) > 4 else ''}); "
                 f"{n} all-reduce(s) inserted")

    # -------------------------------------------------------------- layers
    @staticmethod
    def _split_layers(g, pairs) -> set:
        """Layer ids of the work between each pair's column and row linear (forward order)."""
        T = g.tasks
        work = work_mask(g) & (T["phase"] == Phase.FORWARD) & (T["layer"] >= 0)
        pos = lane_position(g)
        out = set()
        for col, row in pairs:
            c, r = g.layers.get(col), g.layers.get(row)
            parent = _common_parent(col, row)
            ancestors = {g.layers.get(a) for a in _ancestors(parent)}
            for key in _rank_iterations(T, work):
                m = work & (T["rank"] == key[0]) & (T["iteration"] == key[1])
                ct, rt = np.flatnonzero(m & (T["layer"] == c)), np.flatnonzero(m & (T["layer"] == r))
                if not len(ct) or not len(rt):
                    continue
                lane = int(T["lane"][ct[0]])
                span = m & (T["lane"] == lane) & (pos >= pos[ct].min()) & (pos <= pos[rt].max())
                out |= {int(x) for x in np.unique(T["layer"][span])} - ancestors
                break
            else:
                raise NotApplicable(f"tensor-parallel: no forward work of {col} and {row} in the trace")
        return out

    def _scale_split(self, ctx, split, flops, nbytes):
        g, dev, T_ = ctx.graph, ctx.device, self.degree
        T = g.tasks
        sel = np.flatnonzero(work_mask(g) & np.isin(T["layer"], sorted(split))
                             & np.isin(T["phase"], (Phase.FORWARD, Phase.BACKWARD)))
        for t in sel.tolist():
            f, b, d = float(flops[t]), float(nbytes[t]), float(T["dur_ns"][t])
            if f > 0:
                d *= dev.matmul_flops_per_s("float32", f) / dev.matmul_flops_per_s("float32", f / T_) / T_
            elif b <= 0:
                continue
            elif self.streaming == "curve":
                d *= elementwise_ns(dev, b / T_) / elementwise_ns(dev, b)
            else:
                d = split_stream_ns(dev, d, b, T_)
            T["dur_ns"][t] = int(round(d))

    # -------------------------------------------------------- all-reduces
    @property
    def _backend(self) -> str | None:
        """The ``backend`` parameter as the device profile takes it (None: its first figures)."""
        return None if self.backend == "auto" else self.backend

    def _insert_allreduces(self, ctx, pairs, table, ratio: float = 1.0):
        """Megatron's g (forward, after the row linear) and f (backward, after the column linear),
        each ``ratio`` times the profile's all-reduce time (:meth:`_in_line_scale`).

        Returns (count, bytes, ns, rank-iterations) of the inserted all-reduces."""
        g, dev = ctx.graph, ctx.device
        T = g.tasks
        work = work_mask(g) & (T["layer"] >= 0)
        pos = lane_position(g)
        todo, barriers = [], []
        for col, row in pairs:
            nb = _output_bytes(table, row)
            dur = int(dev.allreduce_ns(nb, self.degree, self._backend) * ratio)
            for phase, layer in ((Phase.FORWARD, row), (Phase.BACKWARD, col)):
                m = work & (T["phase"] == phase) & (T["layer"] == g.layers.get(layer))
                for rank, it in _rank_iterations(T, m):
                    tasks = np.flatnonzero(m & (T["rank"] == rank) & (T["iteration"] == it))
                    todo.append((int(tasks[np.argmax(pos[tasks])]), dur, phase, layer, it, nb))
        for last, dur, phase, layer, it, nb in todo:
            ar = insert(g, int(g.tasks["lane"][last]), dur_ns=dur, name=f"TP all-reduce ({phase.label})",
                        after=last, phase=phase, layer=layer, iteration=it, bytes_=nb)
            barriers.append((last, ar))
        if self.stragglers:
            wait_for_stragglers(ctx, barriers, self.degree, "tensor-parallel")
        rank_iterations = len({(int(g.tasks["rank"][x[0]]), x[4]) for x in todo})
        return len(todo), sum(x[5] for x in todo), sum(x[1] for x in todo), max(1, rank_iterations)

    # ------------------------------------------------------- API overhead
    def _api_cost(self, ctx, pairs, table):
        """:func:`api_overhead_ns` for the traced pairs: the first one's sizes (:func:`_pair_shape`;
        else their input rank) and, where the all-reduces take gloo's figures (a CPU profile), its
        all-reduce size; None if it cannot be measured here."""
        nb = _output_bytes(table, pairs[0][1])          # refused here, before 30 s of measuring
        gloo = ctx.device.collective_backend(self._backend) == "gloo"
        shape, hidden = _pair_shape(ctx, pairs)
        return api_overhead_ns(ctx.device.threads or 1, len(shape) if shape else _input_dims(ctx, pairs),
                               nb if gloo else 0, shape, hidden)

    def _in_line_scale(self, ctx, cost) -> float:
        """The all-reduce as torch's TP API runs it in training, measured here (``cost``), over the
        profile's figure for the same bytes on the measurement's ranks; 1 where not measured."""
        if not cost or "allreduce_in_line_ns" not in cost:
            return 1.0
        return cost["allreduce_in_line_ns"] / ctx.device.allreduce_ns(cost["allreduce_bytes"], API_MESH_RANKS,
                                                                      self._backend)

    def _insert_api_overhead(self, ctx, pairs, cost) -> None:
        """Host time of torch's TP API (DTensor) per pair (``cost``: :meth:`_api_cost`): before the
        column linear's forward, after its backward, on the CPU thread that runs them; before the
        optimizer step."""
        if cost is None:
            ctx.note("tensor-parallel: torch's TP API overhead could not be measured here; not modelled")
            return
        g = ctx.graph
        T = g.tasks
        cpu = T["kind"] == EventKind.CPU_OP
        pos = lane_position(g)
        todo = []
        for col, _ in pairs:
            for phase, key, where in ((Phase.FORWARD, "forward_ns", "before"), (Phase.BACKWARD, "backward_ns", "after")):
                m = cpu & (T["phase"] == phase) & (T["layer"] == g.layers.get(col))
                for rank, it in _rank_iterations(T, m):
                    tasks = np.flatnonzero(m & (T["rank"] == rank) & (T["iteration"] == it))
                    anchor = tasks[np.argmin(pos[tasks])] if where == "before" else tasks[np.argmax(pos[tasks])]
                    todo.append((int(anchor), where, int(cost[key]), phase, col, it))
        opt = cpu & (T["phase"] == Phase.OPTIMIZER)
        for rank, it in _rank_iterations(T, opt):
            tasks = np.flatnonzero(opt & (T["rank"] == rank) & (T["iteration"] == it))
            todo.append((int(tasks[np.argmin(pos[tasks])]), "before", int(cost.get("optimizer_ns", 0)) * len(pairs),
                         Phase.OPTIMIZER, None, it))
        for anchor, where, dur, phase, col, it in todo:
            insert(g, int(g.tasks["lane"][anchor]), dur_ns=dur, name=f"DTensor dispatch ({phase.label})",
                   phase=phase, layer=col, iteration=it, **{where: anchor})
        ctx.note(f"tensor-parallel: torch TP API (DTensor) host overhead per pair, measured here: "
                 f"{cost['forward_ns'] / 1e3:.0f} us forward, {cost['backward_ns'] / 1e3:.0f} us backward, "
                 f"{cost.get('optimizer_ns', 0) / 1e3:.0f} us optimizer step"
                 + (f"; its in-line all-reduce of {cost['allreduce_bytes'] / 2**20:.2f} MiB as run in training "
                    f"{cost['allreduce_in_line_ns'] / 1e6:.2f} ms (the profile's figure scaled to it)"
                    if "allreduce_in_line_ns" in cost else ""))

    # ---------------------------------------------------------- optimizer
    def _scale_optimizer(self, ctx, table, split, nbytes) -> int:
        """Optimizer memory traffic scales with the parameter bytes left on a rank; returns them."""
        g = ctx.graph
        names = {g.layers[i] for i in split}
        total = sum(int(m.get("param_bytes") or 0) for m in table.values())
        split_bytes = sum(int(m.get("param_bytes") or 0) for p, m in table.items() if p in names)
        per_rank = total - split_bytes + split_bytes / self.degree
        if total:
            T = g.tasks
            opt = np.flatnonzero((T["phase"] == Phase.OPTIMIZER) & work_mask(g) & (nbytes > 0))
            rx = re.compile(OPTIMIZER_STEP_RE)
            opt = [t for t in opt.tolist() if T["layer"][t] >= 0 and rx.search(g.layers[int(T["layer"][t])])]
            T["dur_ns"][opt] = np.rint(T["dur_ns"][opt] * (per_rank / total)).astype(np.int64)
        return int(per_rank)


def api_overhead_ns(threads: int = 1, input_dims: int = 2, allreduce_bytes: int = 0, input_shape=None,
                    hidden: int = 0):
    """``{"forward_ns", "backward_ns", "optimizer_ns"}`` torch's TP API adds per column/row pair here,
    and with ``allreduce_bytes`` an all-reduce of that size as it runs one in training (``"allreduce_in_line_ns"``).

    Measured once per thread count, input rank (``input_dims``: the split
    linears' input, 3 for a transformer's ``(batch, sequence, features)``),
    all-reduce size, pair size (``input_shape`` and ``hidden``: the first
    column linear's traced input and output features, where the trace has
    shapes; since session 88) and torch version by
    :func:`daydream.workloads.tensor_parallel.measure_api_overhead` in a
    subprocess (on a mesh of :data:`API_MESH_RANKS` processes, about 30 s),
    under the profiler as the trace's own ops were, and cached next to the
    calibrated profiles; None if it cannot run here.
    """
    import os
    import subprocess
    import sys

    shape = [int(d) for d in input_shape] if input_shape else None
    size = f"{'x'.join(map(str, shape))}s-{int(hidden)}h-" if shape else ""
    path = str(_api_overhead_dir() / f"tp-api-overhead-{threads}t-{input_dims}d-{size}{allreduce_bytes}b.json")
    sized = f", input_shape={shape}, hidden={int(hidden)}, calls={SIZED_CALLS}" if shape else ""
    code = ("import json; from daydream.workloads.tensor_parallel import measure_api_overhead as m; "
            f"print(json.dumps(m({int(threads)}, input_dims={int(input_dims)}, "
            f"allreduce_bytes={int(allreduce_bytes)}{sized})))")
    try:
        with open(path) as f:
            cached = json.load(f)
        if cached.get("torch") == _torch_version() and cached.get("profiled") and "evict_bytes" in cached \
                and cached.get("mesh_ranks") == API_MESH_RANKS and cached.get("input_dims") == input_dims \
                and cached.get("allreduce_bytes") == allreduce_bytes and cached.get("input_shape") == shape \
                and int(cached.get("hidden") or 0) == (int(hidden) if shape else 0):
            return cached
    except (OSError, ValueError):
        pass
    print(f"tensor-parallel: measuring torch's TP API (DTensor) overhead on this machine "
          f"(2 processes, about 30 s; cached in {path})", file=sys.stderr, flush=True)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if proc.returncode != 0:
        return None
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    from daydream.fileio import atomic_write_bytes

    atomic_write_bytes(path, json.dumps(out).encode())
    return out


def forget_api_overhead(threads: int) -> list:
    """Delete the cached :func:`api_overhead_ns` figures of ``threads`` (every input rank and
    all-reduce size), so that the next prediction measures them again; returns the paths removed."""
    gone = sorted(_api_overhead_dir().glob(f"tp-api-overhead-{int(threads)}t-*.json"))
    for path in gone:
        path.unlink(missing_ok=True)
    return gone


def _api_overhead_dir():
    """Where :func:`api_overhead_ns` caches its figures: next to the calibrated profiles."""
    from pathlib import Path

    from daydream.device import default_profile_path

    return Path(default_profile_path("cpu", 1)).parent


def _torch_version():
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError:
        return None


def check_divisible(ctx, pairs, degree: int, heads: int = 0) -> None:
    """Refuse a degree that does not divide a split linear's features or the attention heads.

    Uses the weight shapes of traced ``aten::linear`` calls and the head count
    of traced attention calls (``daydream trace`` records shapes); silent when
    the trace has no shapes.
    """
    if heads and heads % degree:
        raise NotApplicable(f"tensor-parallel: degree {degree} does not divide the {heads} attention heads")
    g = ctx.graph
    sig = _signatures(ctx)
    if not sig:
        ctx.note("tensor-parallel: no op shapes in the trace; divisibility of features and heads not checked")
        return
    T = g.tasks
    for col, row in pairs:
        for path, dim, what in ((col, 0, "output features"), (row, 1, "input features")):
            w = _first_dims(g, T, sig, path, "aten::linear", 1)
            if w and w[dim] % degree:
                raise NotApplicable(f"tensor-parallel: degree {degree} does not divide the {w[dim]} {what} "
                                    f"of {path}")
        q = _first_dims(g, T, sig, _common_parent(col, row), _ATTENTION_OP, 0)
        if q and len(q) == 4 and q[1] % degree:
            raise NotApplicable(f"tensor-parallel: degree {degree} does not divide the {q[1]} attention heads "
                                f"of {_common_parent(col, row)}")


def _output_bytes(table: dict, row: str) -> int:
    """The row linear's output bytes (module table): what its all-reduce moves."""
    nb = int(table[row].get("output_bytes") or 0)
    if not nb:
        raise NotApplicable(f"tensor-parallel: the module table has no output size for {row}")
    return nb


def _pair_shape(ctx, pairs) -> tuple:
    """``(input shape, hidden features)`` of the first column linear as traced (its input's every
    dimension, its output features), for :func:`api_overhead_ns`; ``(None, 0)`` where the trace
    has no shapes or they do not fit a pair split over :data:`API_MESH_RANKS`."""
    sig = _signatures(ctx)
    if not sig:
        return None, 0
    col = pairs[0][0]
    x = _first_dims(ctx.graph, ctx.graph.tasks, sig, col, "aten::linear", 0)
    w = _first_dims(ctx.graph, ctx.graph.tasks, sig, col, "aten::linear", 1)
    if not x or not w or len(x) < 2 or len(w) != 2 or x[-1] != w[1] or w[0] % API_MESH_RANKS:
        return None, 0
    return [int(d) for d in x], int(w[0])


def _input_dims(ctx, pairs) -> int:
    """Dimensions of the first column linear's traced input (2 where the trace has no shapes)."""
    sig = _signatures(ctx)
    x = _first_dims(ctx.graph, ctx.graph.tasks, sig, pairs[0][0], "aten::linear", 0) if sig else None
    return max(2, len(x)) if x else 2


def _signatures(ctx) -> dict:
    out = {}
    for r in getattr(ctx.trace, "ranks", None) or []:
        if "sig" in r.cols and len(r.signatures):
            out[r.rank] = (r.cols["sig"], r.signatures)
    return out


def _first_dims(g, T, sig, layer, name_rx, arg):
    """Dims of argument ``arg`` of the first traced call matching ``name_rx`` in ``layer``."""
    lid = g.layers.get(layer)
    rx = re.compile(name_rx) if isinstance(name_rx, str) else name_rx
    for t in np.flatnonzero((T["layer"] == lid) & (T["event"] >= 0)).tolist():
        cols = sig.get(int(T["rank"][t]))
        if cols is None or not rx.search(g.task_name(t)):
            continue
        s = int(cols[0][int(T["event"][t])])
        if s >= 0:
            dims = json.loads(cols[1][s])[1]
            if len(dims) > arg and isinstance(dims[arg], list) and dims[arg]:
                return dims[arg]
    return None


def _common_parent(a: str, b: str) -> str:
    pa, pb = a.split("."), b.split(".")
    k = 0
    while k < min(len(pa), len(pb)) - 1 and pa[k] == pb[k]:
        k += 1
    return ".".join(pa[:k])


def _ancestors(path: str) -> list:
    """Strict ancestors of ``path`` (``a.b.c`` -> ``a``, ``a.b``)."""
    parts = path.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _rank_iterations(T, mask) -> list:
    sel = np.flatnonzero(mask)
    return sorted({(int(r), int(i)) for r, i in zip(T["rank"][sel], T["iteration"][sel])})


OPTIMIZATION = TensorParallel
