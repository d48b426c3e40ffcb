"""``batchnorm``: restructured BatchNorm (BN fission-and-fusion, Jung et al.; Daydream sec. 6).

Model
-----
BatchNorm is memory-bound: its kernels stream the activation ``A`` (bytes of
the BN op's input) a fixed number of times.  Restructuring fuses

* the ReLU that directly follows a BN forward (and the ReLU backward that
  directly precedes a BN backward) on the same stream/thread into the BN
  kernel: those elementwise tasks and their launch calls are removed;
* BN's statistics pass into the preceding convolution (forward: one read of
  ``A`` saved of BN's 3 passes) and BN backward's reduction pass into the
  next convolution's backward (two reads saved of 5 passes).

Each BN op's kernels are shortened by ``saved passes x A`` at the device's
streaming bandwidth, never by more than the saved share of their measured
time; where ``A`` is unknown (no shapes recorded) by that share alone.

Assumptions: the fused conv/BN kernels absorb the extra work at no cost
(the paper's claim for conv epilogues); only ReLUs *adjacent* to a BN are
fused (the ReLU after a residual add stays); the framework's CPU-side op
dispatch of the fused ReLU remains (only its kernel launch goes).  Invalid
for BN implementations that keep statistics in a single-pass kernel (then
the saved pass does not exist).
"""
from __future__ import annotations

import re

import numpy as np

from daydream.model import Phase
from daydream.primitives import remove, set_duration

from ._common import launch_of
from ._layers import op_figures, work_mask
from .base import NotApplicable, Optimization, Param

__all__ = ["RestructuredBatchNorm", "OPTIMIZATION", "BN_RE", "RELU_RE", "BN_PASSES"]

#: Names of BatchNorm work: cuDNN kernels, ATen's native kernels and ops.
BN_RE = re.compile(r"(?i)\bbn_(fw|bw)|batch_?norm")
#: ReLU forward/backward work fused into BN.
RELU_RE = re.compile(r"(?i)relu|threshold|clamp_min")
#: (passes over A, passes saved) of BN forward / backward under BN fission-and-fusion
#: (Jung et al., "Restructuring Batch Normalization to Accelerate CNN Training", SysML 2019, sec. 3):
#: forward = statistics read + normalize read/write; backward = reduction reads of dY, X +
#: gradient read dY, X / write dX.
BN_PASSES = {Phase.FORWARD: (3, 1), Phase.BACKWARD: (5, 2)}


class RestructuredBatchNorm(Optimization):
    name = "batchnorm"
    summary = "restructured BatchNorm: BN fused with adjacent ReLU and convolution (Jung et al.)"
    params = (Param("fuse_relu", True, "remove the ReLU forward/backward adjacent to each BN", bool),
              Param("fuse_conv", True, "fold BN's statistics/reduction passes into the adjacent convolutions", bool))
    assumptions = __doc__

    def apply(self, ctx):
        g = ctx.graph
        T = g.tasks
        names = np.array([bool(BN_RE.search(s)) for s in g.names.strings] + [False])
        work = work_mask(g)
        bn = np.flatnonzero(work & names[np.where(T["name"] >= 0, T["name"], -1)]
                            & np.isin(T["phase"], (Phase.FORWARD, Phase.BACKWARD)))
        if not len(bn):
            raise NotApplicable("the trace has no BatchNorm work in forward/backward (cuDNN bn_fw/bn_bw kernels, "
                                "aten::batch_norm / native_batch_norm ops); restructured BN needs a model with "
                                "BatchNorm layers, traced through a training iteration")
        _, nbytes, op = op_figures(ctx)
        n_short = self._shorten(ctx, bn, nbytes, op) if self.fuse_conv else 0
        gone = self._fused_relus(g, bn, work, op) if self.fuse_relu else []
        if gone:
            launches = launch_of(g)
            calls = [launches[t] for t in gone if t in launches]
            remove(g, sorted(set(gone) | set(calls)), keep_gap=True)
        ctx.note(f"batchnorm: {n_short} BN ops shortened, {len(gone)} adjacent ReLU tasks fused away")

    def _shorten(self, ctx, bn, nbytes, op) -> int:
        g = ctx.graph
        T = g.tasks
        groups = {}
        for t in bn.tolist():
            key = (int(op[t]), int(T["phase"][t])) if op[t] >= 0 else (-1 - t, int(T["phase"][t]))
            groups.setdefault(key, []).append(t)
        for (_, phase), tasks in groups.items():
            passes, saved = BN_PASSES[Phase(phase)]
            dur = T["dur_ns"][tasks].astype(float)
            total = dur.sum()
            a_bytes = float(nbytes[tasks].max())
            cut = total * saved / passes
            if a_bytes > 0:
                cut = min(cut, saved * a_bytes / ctx.device.mem_bw_bytes_per_s(a_bytes) * 1e9)
            if total > 0:
                set_duration(g, tasks, np.rint(dur * (1 - cut / total)).astype(np.int64))
        return len(groups)

    @staticmethod
    def _fused_relus(g, bn, work, op) -> list:
        T = g.tasks
        relu = np.array([bool(RELU_RE.search(s)) for s in g.names.strings] + [False])
        lrelu = np.array([bool(RELU_RE.search(s)) for s in g.layers.strings] + [False])
        is_relu = lambda t: relu[T["name"][t]] or (T["layer"][t] >= 0 and lrelu[T["layer"][t]])  # noqa: E731
        bn_set = set(bn.tolist())
        gone = []
        for seq in g.lane_tasks:
            ws = [t for t in seq if work[t]]
            for i, t in enumerate(ws):
                if t not in bn_set:
                    continue
                fwd = T["phase"][t] == Phase.FORWARD
                j = i + 1 if fwd else i - 1
                if 0 <= j < len(ws) and ws[j] not in bn_set and is_relu(ws[j]) and T["phase"][ws[j]] == T["phase"][t]:
                    gone.append(ws[j])
        if not gone:
            return []
        keys = {(int(op[t]), int(T["layer"][t])) for t in gone if op[t] >= 0}
        cand = np.flatnonzero(work & np.isin(op, [k[0] for k in keys]))
        same_op = [int(t) for t in cand if (int(op[t]), int(T["layer"][t])) in keys]
        return sorted(set(gone) | set(same_op))


OPTIMIZATION = RestructuredBatchNorm
