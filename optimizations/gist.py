"""``gist``: encoded activation stashes (Gist, Jain et al., ISCA 2018).

Model
-----
Each ReLU / max-pool layer call's stashed output (kept from forward to
backward) is encoded right after its forward and decoded right before its
backward: an encode kernel is inserted on the layer's stream after its last
forward task and a decode kernel before its first backward task.  Each
streams the activation ``A`` and its encoding ``A / ratio``:
``elementwise_ns(device, A + A / ratio)`` (the device profile's streaming
bandwidth at that size, plus one op's fixed cost).  Encodings (``+``-separated
in ``encodings``) and their compression of fp32 data:

* ``binarize``: a ReLU whose output feeds a max-pool keeps 1 bit per element
  (ratio 32);
* ``sparse``: other ReLU outputs in Gist's sparse format, a 4-byte value
  and a 1-byte index per non-zero: ratio ``4 / (5 (1 - sparsity))``
  (``sparsity``: the fraction of zeros; Gist reports 50-90% after ReLU);
* ``dpr``: delayed precision reduction of what is left (pool outputs, ReLUs
  with no other encoding enabled) to ``dpr_bits`` (16, 10 or 8): ratio
  ``32 / dpr_bits``.

A layer gets the first enabled encoding that applies, in that order.

Assumptions: Gist's purpose is the memory footprint (larger batch or model);
this predicts only the time the encode/decode kernels cost, with the
backward of the layer unchanged.  Activations are fp32 (halve the ratios of
``dpr`` for fp16 traces).  Bytes are the module's output (module table) or
the op's input (``record_shapes``); forward and backward calls are paired as
in ``vdnn``.  The kernels are issued without extra CPU launch time.
"""
from __future__ import annotations

from daydream.cost import elementwise_ns
from daydream.model import EventKind, LaneKind, Phase
from daydream.primitives import insert

from ._layers import FAMILIES, layer_instances
from .base import NotApplicable, OptionError, Optimization, Param

__all__ = ["Gist", "OPTIMIZATION", "compression_ratio", "ENCODINGS"]

ENCODINGS = ("binarize", "sparse", "dpr")
#: Bytes per non-zero in Gist's sparse storage: fp32 value + 8-bit column index (Gist sec. 4.2).
SPARSE_BYTES_PER_NNZ = 5


def compression_ratio(encoding: str, sparsity: float = 0.5, dpr_bits: int = 16) -> float:
    """Size of the fp32 activation over the size of its encoding."""
    if encoding == "binarize":
        return 32.0
    if encoding == "sparse":
        return 4.0 / (SPARSE_BYTES_PER_NNZ * max(1e-9, 1.0 - sparsity))
    if encoding == "dpr":
        return 32.0 / dpr_bits
    raise OptionError(f"gist: unknown encoding {encoding!r} (valid: {', '.join(ENCODINGS)})")


class Gist(Optimization):
    name = "gist"
    summary = "Gist: encode ReLU/pool activation stashes after forward, decode them before backward"
    params = (Param("encodings", "binarize+sparse+dpr", "'+'-separated subset of binarize, sparse, dpr", str),
              Param("sparsity", 0.5, "fraction of zeros in ReLU outputs (sparse encoding)"),
              Param("dpr_bits", 16, "bits per value after delayed precision reduction", int, (8, 10, 16)))
    assumptions = __doc__

    def apply(self, ctx):
        g = ctx.graph
        enabled = [e.strip() for e in self.encodings.split("+") if e.strip()]
        for e in enabled:
            compression_ratio(e)
        if not any(ln.kind == LaneKind.GPU_STREAM for ln in g.lanes):
            raise NotApplicable("Gist encodes GPU activation stashes, and the trace has no GPU streams; "
                                "trace the job on a GPU (CUDA activity)")
        inst = layer_instances(ctx, {"relu": FAMILIES["relu"], "maxpool": FAMILIES["maxpool"]})
        inst = [x for x in inst if x.bwd and x.bytes > 0]
        if not inst:
            raise NotApplicable("no ReLU or max-pool layer with a traced forward and backward and a known "
                                "activation size; record shapes (record_shapes=True) or use `daydream trace`")
        counts = dict.fromkeys(ENCODINGS, 0)
        for i, x in enumerate(inst):
            enc = self._encoding(g, x, inst[i + 1] if i + 1 < len(inst) else None, enabled)
            if enc is None:
                continue
            counts[enc] += 1
            ratio = compression_ratio(enc, self.sparsity, self.dpr_bits)
            dur = int(round(elementwise_ns(ctx.device, x.bytes * (1 + 1 / ratio))))
            layer = g.layers[x.layer]
            for t, where, phase, what in ((x.fwd[-1], "after", Phase.FORWARD, "encode"),
                                          (x.bwd[0], "before", Phase.BACKWARD, "decode")):
                insert(g, int(g.tasks["lane"][t]), dur_ns=dur, name=f"gist {what} ({enc})", kind=EventKind.KERNEL,
                       phase=phase, layer=layer, iteration=x.iteration, bytes_=x.bytes, **{where: t})
        ctx.note("gist: encode/decode kernels for " + ", ".join(f"{v} {k}" for k, v in counts.items() if v)
                 + f" stashes (sparsity {self.sparsity}, dpr {self.dpr_bits} bits)")

    @staticmethod
    def _encoding(g, x, nxt, enabled):
        if x.family == "relu":
            feeds_pool = (nxt is not None and nxt.family == "maxpool" and nxt.rank == x.rank
                          and nxt.iteration == x.iteration and _lane_next(g, x.fwd[-1]) == nxt.fwd[0])
            if feeds_pool and "binarize" in enabled:
                return "binarize"
            if "sparse" in enabled:
                return "sparse"
        return "dpr" if "dpr" in enabled else None


def _lane_next(g, t):
    seq = g.lane_tasks[int(g.tasks["lane"][t])]
    p = seq.index(t)
    return seq[p + 1] if p + 1 < len(seq) else None


OPTIMIZATION = Gist
