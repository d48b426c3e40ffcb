"""FLOPs of matrix-multiply and convolution ops from their recorded shapes.

Kineto records ``Input Dims`` (and ``Concrete Inputs`` for scalars) when
profiling with ``record_shapes=True``; a ``flops`` argument (``with_flops``)
wins where present.  Other ops get 0: cost models treat them as memory bound.
"""
from __future__ import annotations

import ast
import math

__all__ = ["op_flops", "op_signature", "COMPUTE_OPS", "ATTENTION_OPS", "clip_count"]

#: Counts are clipped into ``[-1, COUNT_CLIP]`` so that int64 columns hold them; the
#: loader then treats negative or implausibly large ones as absent (and counts that).
COUNT_CLIP = 2**62


def clip_count(n: int) -> int:
    """``n`` clipped into ``[-1, COUNT_CLIP]`` (out-of-range shapes from a damaged trace).

    >>> clip_count(2**70), clip_count(-5), clip_count(7)
    (4611686018427387904, -1, 7)
    """
    try:
        n = int(n)
    except (TypeError, ValueError, OverflowError):   # NaN, infinity, not a number
        return -1
    return -1 if n < 0 else min(n, COUNT_CLIP)

#: Ops whose cost is dominated by arithmetic (matmul family, convolutions).
COMPUTE_OPS = frozenset({
    "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
    "aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::convolution", "aten::_convolution",
    "aten::mkldnn_convolution", "aten::cudnn_convolution", "aten::convolution_backward",
    "aten::_addmm_activation",
})

#: Attention ops: (position of the query among the inputs, of ``is_causal``, FLOPs relative to the
#: forward's).  The forward's two matmuls (``Q K^T``, ``P V``) count ``2 B H L S (E + Ev)``; the
#: backward's five count 2.5 times that; a causal mask halves both (the kernels skip masked blocks).
ATTENTION_OPS = {
    "aten::scaled_dot_product_attention": (0, 5, 1.0),
    "aten::_scaled_dot_product_flash_attention": (0, 4, 1.0),
    "aten::_scaled_dot_product_flash_attention_for_cpu": (0, 4, 1.0),
    "aten::_scaled_dot_product_efficient_attention": (0, 6, 1.0),
    "aten::_scaled_dot_product_flash_attention_backward": (1, 11, 2.5),
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": (1, 7, 2.5),
    "aten::_scaled_dot_product_efficient_attention_backward": (1, 11, 2.5),
}
COMPUTE_OPS = COMPUTE_OPS | frozenset(ATTENTION_OPS)


def _ints(v):
    if isinstance(v, list):
        return v
    try:
        x = ast.literal_eval(v) if isinstance(v, str) and v else None
    except (ValueError, SyntaxError):
        return None
    return x if isinstance(x, (list, tuple)) else None


def _conv_flops(dims, concrete):
    if len(dims) < 2 or len(dims[0]) < 3 or len(dims[1]) != len(dims[0]):
        return 0
    x, w = dims[0], dims[1]
    spatial = len(x) - 2
    stride = _ints(concrete[3]) if len(concrete) > 3 else None
    padding = _ints(concrete[4]) if len(concrete) > 4 else None
    dilation = _ints(concrete[5]) if len(concrete) > 5 else None
    out = []
    for i in range(spatial):
        s = stride[i] if stride and i < len(stride) else 1
        p = padding[i] if padding and i < len(padding) else w[2 + i] // 2
        d = dilation[i] if dilation and i < len(dilation) else 1
        out.append(max((x[2 + i] + 2 * p - d * (w[2 + i] - 1) - 1) // max(s, 1) + 1, 1))
    return 2 * x[0] * w[0] * math.prod(out) * w[1] * math.prod(w[2:])


def op_flops(name: str, args: dict) -> int:
    """FLOPs of one op (0 when unknown or not compute bound; clipped by :func:`clip_count`).

    >>> op_flops("aten::addmm", {"Input Dims": [[512], [64, 256], [256, 512]]})
    16777216
    >>> op_flops("aten::convolution", {"Input Dims": [[8, 3, 32, 32], [16, 3, 3, 3], [16]],
    ...          "Concrete Inputs": ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]"]})
    7077888
    """
    return clip_count(_op_flops(name, args))


def _op_flops(name: str, args: dict) -> int:
    f = args.get("flops")
    if isinstance(f, (int, float)) and not isinstance(f, bool) and f > 0:
        return f        # clipped by op_flops (infinity included)
    if name not in COMPUTE_OPS:
        return 0
    dims = args.get("Input Dims")
    if not isinstance(dims, list):
        return 0
    dims = [d if isinstance(d, list) else [] for d in dims]
    try:
        if name in ("aten::mm", "aten::matmul") and len(dims) >= 2 and len(dims[0]) == 2 and len(dims[1]) == 2:
            return 2 * dims[0][0] * dims[0][1] * dims[1][1]
        if name in ("aten::addmm", "aten::_addmm_activation") and len(dims) >= 3 and len(dims[1]) == 2:
            return 2 * dims[1][0] * dims[1][1] * dims[2][1]
        if name == "aten::bmm" and len(dims) >= 2 and len(dims[0]) == 3:
            return 2 * dims[0][0] * dims[0][1] * dims[0][2] * dims[1][2]
        if name == "aten::baddbmm" and len(dims) >= 3 and len(dims[1]) == 3:
            return 2 * dims[1][0] * dims[1][1] * dims[1][2] * dims[2][2]
        if name == "aten::linear" and len(dims) >= 2 and dims[0] and len(dims[1]) == 2:
            return 2 * math.prod(dims[0][:-1]) * dims[1][1] * dims[1][0]
        if name == "aten::convolution_backward" and len(dims) >= 3 and len(dims[0]) >= 3:
            g_out, w = dims[0], dims[2]
            return 2 * 2 * g_out[0] * g_out[1] * math.prod(g_out[2:]) * w[1] * math.prod(w[2:])
        if name in ATTENTION_OPS:
            return _attention_flops(name, dims, args.get("Concrete Inputs"))
        if "conv" in name:
            concrete = args.get("Concrete Inputs") or []
            return _conv_flops(dims, concrete if isinstance(concrete, list) else [])
    except (TypeError, IndexError):
        return 0
    return 0


def _attention_flops(name: str, dims: list, concrete) -> int:
    """FLOPs of a scaled-dot-product attention op (:data:`ATTENTION_OPS`) from q, k, v ``[B, H, L, E]``.

    >>> _attention_flops("aten::_scaled_dot_product_flash_attention_for_cpu",
    ...                  [[8, 4, 64, 32], [8, 4, 64, 32], [8, 4, 64, 32]], ["", "", "", "0.", "True"])
    8388608
    """
    qi, ci, factor = ATTENTION_OPS[name]
    q, k, v = dims[qi:qi + 3]
    if len(q) != 4 or len(k) != 4 or len(v) != 4:
        return 0
    b, h, lq, e = q
    flops = 2 * b * h * lq * k[2] * (e + v[3]) * factor
    causal = isinstance(concrete, list) and len(concrete) > ci and str(concrete[ci]) == "True"
    return int(flops / 2 if causal else flops)


#: Ops without FLOPs whose call signature is kept all the same: ``fusion``
#: recognises layout conversions (NCHW <-> channels-last copies) by it; ``amp``
#: re-runs batch norms that take a convolution's low-precision output.
SIGNED_OPS = frozenset({"aten::copy_", "aten::native_batch_norm"})


def keeps_signature(name: str, flops: int, nbytes: int = 0) -> bool:
    """Whether the loader keeps a CPU op's call signature: ops with FLOPs or input bytes (the
    ``device`` what-if re-runs element-wise ops too: on two threads they slow down as a matmul
    does not) and :data:`SIGNED_OPS`.

    >>> keeps_signature("aten::mm", 12), keeps_signature("aten::copy_", 0), keeps_signature("aten::add", 0, 64)
    (True, True, True)
    >>> keeps_signature("aten::view", 0)
    False
    """
    return bool(flops) or nbytes > 0 or name in SIGNED_OPS


def op_signature(name: str, args: dict) -> str:
    """A JSON call signature (op, input dims, types, strides, scalar inputs) to re-run the op.

    >>> op_signature("aten::mm", {"Input Dims": [[2, 3], [3, 4]], "Input type": ["float", "float"]})
    '["aten::mm", [[2, 3], [3, 4]], ["float", "float"], null, null]'
    """
    import json

    return json.dumps([name, args.get("Input Dims"), args.get("Input type"), args.get("Input Strides"),
                       args.get("Concrete Inputs")])
