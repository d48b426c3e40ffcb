"""``vdnn``: virtualized DNN memory (vDNN, Rhu et al., MICRO 2016): activations offloaded to host.

Model
-----
For each offloaded layer call (``layers=conv``: convolutions, vDNN_conv;
``all``: conv, BN, ReLU, pool and linear layers, vDNN_all) two copies are
inserted per rank on two new copy lanes (the GPU's D2H and H2D copy engines):

* **offload** (device -> host) of the layer's activation, after the layer's
  last forward task; with ``sync`` the next task on that stream waits for it
  (vDNN releases the buffer at the end of the layer, so the next layer
  starts only once the copy is done);
* **prefetch** (host -> device), issued when the backward of the next
  offloaded layer starts (vDNN prefetches one layer ahead), after the
  offload; the layer's first backward task waits for it.

A copy lasts ``bytes / pcie_gbs``.  Bytes: the module's output bytes from
the module table (``daydream trace``), else the input bytes of the layer's
top-level op (``record_shapes``; includes its weights, a small excess for
CNN activations).  Forward and backward calls are paired by module, or on
op-named traces by reverse order within a layer family.

Assumptions: copies overlap compute fully (separate copy engines, pinned
host memory), they do not slow the kernels (no memory-bandwidth contention
modelled); one copy at a time per direction; the memory saved (and any
larger batch it allows) is not modelled here, only the time cost.  The
first convolution's input (the batch itself) has no backward and is not
offloaded.
"""
from __future__ import annotations

from daydream.model import EventKind, Lane, LaneKind, Phase
from daydream.primitives import insert

from ._layers import FAMILIES, add_edges_checked, layer_instances
from .base import NotApplicable, Optimization, Param

__all__ = ["VDNN", "OPTIMIZATION", "DEFAULT_PCIE_GBS"]

#: Host<->device copy bandwidth by default: PCIe 3.0 x16 moves ~12 GB/s with pinned memory
#: (15.75 GB/s theoretical; vDNN's evaluation measured ~12.8 GB/s).
DEFAULT_PCIE_GBS = 12.0


class VDNN(Optimization):
    name = "vdnn"
    summary = "vDNN: offload activations to host after forward, prefetch them before backward"
    params = (Param("pcie_gbs", DEFAULT_PCIE_GBS, "host<->device copy bandwidth, GB/s (inf: free copies)"),
              Param("layers", "conv", "conv: convolution inputs (vDNN_conv); all: every conv/BN/ReLU/pool/linear",
                    str, ("conv", "all")),
              Param("sync", True, "the next layer waits for the offload (vDNN frees the buffer at layer end)", bool))
    assumptions = __doc__

    def apply(self, ctx):
        g = ctx.graph
        streams = [i for i, ln in enumerate(g.lanes) if ln.kind == LaneKind.GPU_STREAM]
        if not streams:
            raise NotApplicable("vDNN offloads GPU memory, and the trace has no GPU streams; "
                                "trace the job on a GPU (CUDA activity)")
        fams = {"conv": FAMILIES["conv"]} if self.layers == "conv" else FAMILIES
        inst = [i for i in layer_instances(ctx, fams) if i.bwd and i.bytes > 0]
        if not inst:
            raise NotApplicable(f"no {self.layers} layer has both a traced forward and backward with a known "
                                "activation size; record shapes (record_shapes=True) or use `daydream trace`, "
                                "which stores the module table")
        groups = {}
        for x in inst:
            groups.setdefault((x.rank, x.iteration), []).append(x)
        lanes = {}
        src, dst, s_src, s_dst = [], [], [], []
        total = 0
        for (rank, it), xs in groups.items():
            if rank not in lanes:
                lanes[rank] = self._copy_lanes(g, rank, int(g.tasks["lane"][xs[0].fwd[0]]))
            d2h, h2d = lanes[rank]
            offs = [self._offload(g, d2h, x, src, dst) for x in xs]
            for j in range(len(xs) - 1, -1, -1):
                x = xs[j]
                pre = insert(g, h2d, dur_ns=self._copy_ns(x.bytes), name="Memcpy HtoD (vDNN prefetch)",
                             kind=EventKind.MEMCPY, phase=Phase.BACKWARD, layer=g.layers[x.layer],
                             iteration=it, bytes_=x.bytes)
                src += [offs[j], pre]
                dst += [pre, x.bwd[0]]
                if j + 1 < len(xs):
                    s_src.append(xs[j + 1].bwd[0])
                    s_dst.append(pre)
            total += sum(x.bytes for x in xs)
        add_edges_checked(g, src, dst)
        from daydream.graph.graph import Anchor

        add_edges_checked(g, s_src, s_dst, anchor=Anchor.START)
        n_it = max(1, len(groups) // max(1, len(lanes)))
        ctx.note(f"vdnn ({self.layers}): {len(inst)} layer activations offloaded and prefetched, "
                 f"{total / n_it / 1e9:.2f} GB per iteration per rank each way at {self.pcie_gbs} GB/s")

    def _copy_ns(self, nbytes: int) -> int:
        return int(round(nbytes / (self.pcie_gbs * 1e9) * 1e9))

    def _offload(self, g, d2h, x, src, dst) -> int:
        off = insert(g, d2h, dur_ns=self._copy_ns(x.bytes), name="Memcpy DtoH (vDNN offload)",
                     kind=EventKind.MEMCPY, phase=Phase.FORWARD, layer=g.layers[x.layer],
                     iteration=x.iteration, bytes_=x.bytes)
        last = x.fwd[-1]
        src.append(last)
        dst.append(off)
        if self.sync:
            seq = g.lane_tasks[int(g.tasks["lane"][last])]
            p = seq.index(last)
            if p + 1 < len(seq):
                src.append(off)
                dst.append(seq[p + 1])
        return off

    @staticmethod
    def _copy_lanes(g, rank: int, stream: int) -> tuple:
        ln = g.lanes[stream]
        return tuple(g.add_lane(Lane(rank, LaneKind.COPY, ln.pid, f"vdnn {d}", f"vDNN {d} copies", ln.device))
                     for d in ("D2H", "H2D"))


OPTIMIZATION = VDNN
