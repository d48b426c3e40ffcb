"""``checkpointing``: activation checkpointing, the forward of chosen modules recomputed in backward.

Model
-----
For each checkpointed module and iteration, copies of the module's forward
tasks (its CPU op slices with their Python gaps, and the kernels they launch,
with the same launch offsets) are inserted on the same lanes right before the
module's first backward task there, as non-reentrant
``torch.utils.checkpoint`` does when backward first unpacks a saved tensor.
Durations come from the trace (the forward as measured).  Checkpointing's
own bookkeeping on the CPU thread (the ``checkpoint`` call, its RNG-state
save and saved-tensor hooks in forward; unpacking and setting up the
recompute in backward) is one task before the module's forward and one
before its recompute, lasting the device profile's ``checkpoint_call_ns``
plus ``checkpoint_op_ns`` for each top-level op of the module's traced
forward (``daydream calibrate`` times checkpointed tiny modules of 2 and 16
ops against the plain ones: the saved-tensor hooks run per saved tensor, and
the recompute's framework work grows with the segment; until session 12 the
cost was per call only, from the 2-op module, and the bundled CNN's
recompute of 3 blocks was under-predicted by about 2.5 ms a step, its
``ReluBackward0`` (where the recompute is triggered) spending 2.7 ms).

Assumptions: the recomputed forward costs what the traced forward cost
(the cheaper no-grad forward is ignored); memory effects (less pressure, no
rematerialisation stalls) are not modelled.  ``modules=auto`` picks the
children of the module container (ModuleList/Sequential) holding the most
parameters, e.g. the transformer blocks.
"""
from __future__ import annotations

import re

import numpy as np

from daydream.graph import Anchor, EdgeKind
from daydream.model import LaneKind, Phase
from daydream.primitives import insert

from ._common import by_rank_iteration, layer_mask, module_table
from ._layers import op_figures
from .base import NotApplicable, Optimization, Param

__all__ = ["Checkpointing", "OPTIMIZATION", "auto_modules"]

_CONTAINERS = ("ModuleList", "Sequential")


def auto_modules(table: dict) -> list:
    """Children of the parameter-heaviest ModuleList/Sequential with at least two children."""
    best, best_bytes = None, -1
    for path, m in table.items():
        if not str(m.get("type", "")).endswith(_CONTAINERS):
            continue
        kids = [p for p in table if p.startswith(path + ".") and "." not in p[len(path) + 1:]]
        b = m.get("param_bytes_total") or 0
        if len(kids) >= 2 and b > best_bytes:
            best, best_bytes = kids, b
    return sorted(best or [])


class Checkpointing(Optimization):
    name = "checkpointing"
    summary = "activation checkpointing: recompute module forwards during backward"
    params = (Param("modules", "auto", "regex of module paths to checkpoint, or auto (the repeated blocks)", str),)
    assumptions = __doc__

    def apply(self, ctx):
        g = ctx.graph
        if self.modules == "auto":
            mods = auto_modules(module_table(ctx, "checkpointing=auto"))
            if not mods:
                raise NotApplicable("no ModuleList/Sequential of blocks in the module table; "
                                    "name modules with checkpointing:modules=REGEX")
        else:
            rx = re.compile(self.modules)
            mods = sorted({g.layers[i] for i in range(len(g.layers)) if rx.search(g.layers[i])})
            mods = [m for m in mods if not any(m.startswith(o + ".") for o in mods)]
            if not mods:
                raise NotApplicable(f"no layer of the trace matches {self.modules!r}")
        launches = self._launch_lags(g)
        cpu = np.array([ln.kind == LaneKind.CPU_THREAD for ln in g.lanes], bool)
        top = op_figures(ctx)[2]
        dev = ctx.device
        done = 0
        for mod in mods:
            inside = layer_mask(g, "^" + re.escape(mod) + r"(\.|$)")
            fwd = np.flatnonzero(inside & (g.tasks["phase"] == Phase.FORWARD) & (g.tasks["iteration"] >= 0))
            bwd = np.flatnonzero(inside & (g.tasks["phase"] == Phase.BACKWARD))
            for (rank, it), tasks in by_rank_iteration(g, fwd).items():
                first_bwd = self._first_per_lane(g, bwd[g.tasks["iteration"][bwd] == it])
                if first_bwd:
                    copies = self._recompute(g, tasks, first_bwd, launches, it)
                    tasks = np.asarray(tasks)
                    on_cpu = tasks[cpu[g.tasks["lane"][tasks]]]
                    ops = np.unique(top[on_cpu][top[on_cpu] >= 0]).size
                    cost = [c + ops * o for c, o in zip(dev.checkpoint_call_ns, dev.checkpoint_op_ns)]
                    self._bookkeeping(g, cost, on_cpu, list(copies.values()), it)
                    done += 1
        if not done:
            raise NotApplicable("the checkpointed modules have no backward tasks in the trace's iterations")
        if not any(dev.checkpoint_call_ns):
            ctx.note("checkpointing: no checkpoint call overhead in the device profile (run `daydream calibrate`)")
        ctx.note(f"checkpointing: forward of {len(mods)} module(s) recomputed in backward ({', '.join(mods[:4])}"
                 f"{', ...' if len(mods) > 4 else ''})")

    @staticmethod
    def _bookkeeping(g, call_ns, fwd_cpu, copies, it):
        """The checkpoint call's CPU cost: before the module's forward and before its recompute,
        on the thread that ran the forward."""
        if not len(fwd_cpu):
            return
        li = int(g.tasks["lane"][fwd_cpu[0]])
        for ns, tasks, phase, name in ((call_ns[0], set(fwd_cpu.tolist()), Phase.FORWARD, "checkpoint: call"),
                                       (call_ns[1], set(copies), Phase.BACKWARD, "checkpoint: recompute set-up")):
            first = next((t for t in g.lane_tasks[li] if t in tasks), None)
            if ns and first is not None:
                insert(g, li, dur_ns=int(ns), name=name, before=first, phase=phase, iteration=it)

    @staticmethod
    def _launch_lags(g):
        E = g.edges
        m = E["kind"] == EdgeKind.LAUNCH
        return {d: (s, lag) for s, d, lag in zip(E["src"][m].tolist(), E["dst"][m].tolist(), E["lag_ns"][m].tolist())}

    @staticmethod
    def _first_per_lane(g, tasks):
        first = {}
        want = set(np.asarray(tasks).tolist())
        lanes = {int(g.tasks["lane"][t]) for t in want}
        for li in lanes:
            for t in g.lane_tasks[li]:
                if t in want:
                    first[li] = t
                    break
        return first

    @staticmethod
    def _recompute(g, tasks, first_bwd, launches, it):
        T = g.tasks
        by_lane = {}
        for t in tasks:
            by_lane.setdefault(int(T["lane"][t]), []).append(t)
        copies = {}
        for li, ts in by_lane.items():
            before = first_bwd.get(li)
            if before is None:
                continue
            order = {t: p for p, t in enumerate(g.lane_tasks[li])}
            for t in sorted(ts, key=order.__getitem__):
                layer = int(T["layer"][t])
                copies[t] = insert(g, li, dur_ns=int(T["dur_ns"][t]), name=g.task_name(t), kind=int(T["kind"][t]),
                                   before=before, gap_ns=int(T["gap_ns"][t]), phase=Phase.BACKWARD,
                                   layer=g.layers[layer] if layer >= 0 else None, iteration=it)
                for col in ("flops", "bytes"):
                    T = g.tasks
                    T[col][copies[t]] = T[col][t]
        for t, c in copies.items():
            src = launches.get(t)
            if src is not None and src in copies:
                g.add_edges(copies[src], c, EdgeKind.LAUNCH, lag_ns=launches[t][1], anchor=Anchor.START)
        return copies


OPTIMIZATION = Checkpointing
