"""Re-running traced ops on this machine (habitat-style operation measurement).

A compute op's call signature (``Input Dims``, ``Input type``, ``Input
Strides``, ``Concrete Inputs`` of a trace recorded with shapes) is enough to
call it again with random data, in another dtype.  The time ratio measured
here scales the op's traced duration, so predictions keep the trace's own
absolute times.  Used by ``amp`` on CPU traces; needs torch.
"""
from __future__ import annotations

import ast
import json
import math
import statistics

from .errors import DaydreamError

__all__ = ["call_for", "KEEP_DTYPE_INPUTS", "time_signature_ns", "dtype_time_ratios", "dtype_time_pairs", "channels_last_time_pairs",
           "thread_time_ratios", "float_inputs", "cast_ns", "scaled_signature", "batch_time_ratios",
           "fused_signature", "fused_time_ratios", "LINEAR_LAYOUTS", "inductor_ns", "inductor_time_ratios", "PAIR_ROUNDS", "PAIR_SPAN_S"]

_TENSOR_TYPES = {"float": "float32", "double": "float64", "c10::half": "float16", "c10::bfloat16": "bfloat16",
                 "long int": "int64", "int": "int32", "bool": "bool", "unsigned char": "uint8",
                 "signed char": "int8", "short int": "int16"}


def _scalar(text):
    if text in ("", None):
        return None
    if text in ("True", "False"):
        return text == "True"
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


#: Inputs (positions) that keep their traced dtype when an op is re-run in another one: the
#: attention backward's logsumexp stays in the accumulation type (float32) under bf16/fp16;
#: under autocast, batch norm's weight, bias and running statistics stay float32.
KEEP_DTYPE_INPUTS = {
    "aten::native_batch_norm": (1, 2, 3, 4),
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": (5,),
    "aten::_scaled_dot_product_flash_attention_backward": (5,),
    "aten::_scaled_dot_product_efficient_attention_backward": (6,),
}


def call_for(signature: str, dtype: str | None = None, channels_last: bool = False):
    """``(op, args)`` re-creating a traced call; float tensors in ``dtype`` if given.

    ``channels_last``: 4-D float tensors in the NHWC memory format (what
    ``torch.compile`` gives convolutions on CPU).

    Raises
    ------
    DaydreamError
        If the op or its arguments cannot be rebuilt.
    """
    import torch

    name, dims, types, strides, concrete = json.loads(signature)
    op = getattr(torch.ops.aten, name.split("::", 1)[-1], None)
    if op is None or not isinstance(dims, list) or not isinstance(types, list):
        raise DaydreamError(f"cannot rebuild {name}")
    strides = strides if isinstance(strides, list) else [None] * len(dims)
    concrete = concrete if isinstance(concrete, list) else [""] * len(dims)
    args = []
    keep = KEEP_DTYPE_INPUTS.get(name, ())
    for i, (d, t) in enumerate(zip(dims, types)):
        tt = _TENSOR_TYPES.get(str(t).lower())
        if tt is None:
            args.append(_scalar(concrete[i] if i < len(concrete) else ""))
            continue
        tdt = getattr(torch, tt)
        if dtype and tdt.is_floating_point and i not in keep:
            tdt = getattr(torch, dtype)
        st = strides[i] if i < len(strides) and isinstance(strides[i], list) and len(strides[i]) == len(d) else None
        if st:     # over the whole storage: expanded inputs (stride 0) share elements
            n = 1 + sum((k - 1) * abs(s) for k, s in zip(d, st)) if all(k > 0 for k in d) else 0
            base = torch.randn(n).to(tdt) if tdt.is_floating_point else torch.zeros(n, dtype=tdt)
            x = torch.as_strided(base, d, st)
        else:
            x = torch.randn(d).to(tdt) if tdt.is_floating_point else torch.zeros(d, dtype=tdt)
        if channels_last and x.dim() == 4 and x.is_floating_point():
            x = x.contiguous(memory_format=torch.channels_last)
        args.append(x)
    return op, args


def _bind(packet, args):
    """The overload of ``packet`` accepting ``args``, keyword-only ones passed by name."""
    op, pos, kw = _overload(packet, args)
    return lambda: op(*pos, **kw)


def _overload(packet, args) -> tuple:
    """``(op, positional args, keyword args)``: the overload of ``packet`` accepting ``args``
    (run once to find it)."""
    for name in packet.overloads():
        op = getattr(packet, name)
        params = op._schema.arguments
        if len(args) > len(params):
            continue
        pos = [a for p, a in zip(params, args) if not p.kwarg_only]
        kw = {p.name: a for p, a in zip(params, args) if p.kwarg_only and a is not None}
        try:
            op(*pos, **kw)
        except (RuntimeError, TypeError, ValueError, IndexError):
            continue
        return op, pos, kw
    raise DaydreamError(f"no overload of {packet} accepts the traced arguments")


def time_signature_ns(signature: str, dtype: str | None = None, min_time_s: float = 0.02,
                      channels_last: bool = False) -> float:
    """Typical (median-of-repeats) time of one traced call re-run on this machine.

    The median, not the best: a prediction of a run's mean iteration adds
    these times to traced ones, and the best of 7 sat 3-17 % below the median
    for the bundled models' bf16 ops here (the amp rows of ``daydream
    validate`` under-predicted in 7 of 9 readings).
    """
    import torch

    from .calibrate import time_call_ns

    op, args = call_for(signature, dtype, channels_last)
    try:
        return time_call_ns(_bind(op, args), torch.device("cpu"), min_time_s, typical=True)
    except (RuntimeError, TypeError, ValueError, IndexError) as exc:
        raise DaydreamError(f"cannot re-run {json.loads(signature)[0]}: {str(exc).splitlines()[0]}") from None


#: Rounds in which an op and its variant are timed in turn; the round with the median ratio is kept.
PAIR_ROUNDS = 3
#: Least time (s) the rounds of :func:`_pairs` are spread over: each round times every
#: signature once, and rounds go on until this long after the first one, so that each op's
#: rounds fall in different spells of a machine whose speed moves for a second or so at a
#: time (amp's bf16 re-runs of the transformer, all rounds of an op back to back: 428 and
#: 482 ms predicted by two calls on one trace).
PAIR_SPAN_S = 2.0


def _pairs(signatures, other_ns, threads: int | None = None, rounds: int = PAIR_ROUNDS,
           typical: bool = False) -> dict:
    """Per signature: ``(t(sig as traced), other_ns(sig))``, both re-run now.

    The two are timed in turn, in rounds that each time every signature once,
    at least ``rounds`` of them and more until :data:`PAIR_SPAN_S` after the
    first; the round whose ratio is the median is kept: a slow spell of the
    machine then falls on both sides of one round instead of on one side of
    the ratio (one timing of each put an 8-model ``hfta`` prediction anywhere
    from 67 to 101 ms on this VM).  ``typical``: each side's median over the
    rounds instead (what an op costs now, for a prediction that adds times).
    ``other_ns`` returns None where the signature has no variant; those and
    signatures that fail to run are left out.
    """
    import time

    import torch

    if threads:
        torch.set_num_threads(threads)
    got = {sig: [] for sig in dict.fromkeys(signatures)}
    r, t_end = 0, None
    while got and (r < max(1, rounds) or time.perf_counter() < t_end):
        for sig in list(got):
            try:
                other = other_ns(sig)
                if other is None:
                    del got[sig]
                    continue
                got[sig].append((max(time_signature_ns(sig), 1.0), other))
            except DaydreamError:
                del got[sig]
        if t_end is None:
            t_end = time.perf_counter() + PAIR_SPAN_S
        r += 1
    if typical:
        return {sig: (statistics.median(a for a, _ in v), statistics.median(b for _, b in v)) for sig, v in got.items()}
    out = {}
    for sig, v in got.items():
        v.sort(key=lambda ab: ab[1] / ab[0])
        out[sig] = v[(len(v) - 1) // 2]
    return out


def _ratios(signatures, other_ns, threads: int | None = None) -> dict:
    """Per signature: ``other_ns(sig) / t(sig as traced)`` (see :func:`_pairs`)."""
    return {s: b / a for s, (a, b) in _pairs(signatures, other_ns, threads).items()}


def dtype_time_ratios(signatures, dtype: str, threads: int | None = None) -> dict:
    """Per signature: ``t(dtype) / t(as traced)`` measured now; signatures that fail are left out."""
    return _ratios(signatures, lambda sig: time_signature_ns(sig, dtype), threads)


def dtype_time_pairs(signatures, dtype: str, threads: int | None = None) -> dict:
    """Per signature: ``(t(as traced), t(dtype))`` in ns, each the median of its rounds, measured
    now (:func:`_pairs`); failures left out."""
    return _pairs(signatures, lambda sig: time_signature_ns(sig, dtype), threads, typical=True)


def thread_time_ratios(signatures, threads: int, to_threads: int, sequence=None, chained: bool = False,
                       recycle: bool = True, warm: bool = False) -> dict:
    """Per signature: ``t(at to_threads intra-op threads) / t(at threads)``, measured now in turns.

    ``sequence``: the signatures of one traced iteration in order; the ops are
    then re-run as that sequence, at one thread count and then the other
    (:func:`daydream.opseq.sequence_ratios`), ``chained`` along the data flow
    the layouts imply where asked (and then each signature's ratio weighs its
    occurrences by their time: ``by_time``); ``recycle``: as for
    :func:`daydream.opseq.flow_calls`; ``warm``: each side's timed pass after
    an untimed one of its own (:func:`daydream.opseq.sequence_ratios`).
    """
    import torch

    got = _in_sequence(signatures, sequence, lambda sig: sig, threads, variant_threads=to_threads, chained=chained,
                       by_time=chained, recycle=recycle, warm=warm)
    if got is not None:
        return got

    def other(sig):
        torch.set_num_threads(to_threads)
        try:
            return time_signature_ns(sig)
        finally:
            torch.set_num_threads(threads)

    return _ratios(signatures, other, threads)


def channels_last_time_pairs(signatures, threads: int | None = None) -> dict:
    """Per signature: ``(t(as traced), t(4-D inputs channels-last))`` in ns, each the median of its
    rounds, measured now (:func:`_pairs`); failures left out."""
    return _pairs(signatures, lambda sig: time_signature_ns(sig, channels_last=True), threads, typical=True)


_INDUCTOR: dict = {}


def inductor_ns(signature: str, channels_last: bool = False) -> float:
    """Typical time of one traced call compiled alone by Inductor, re-run on this machine.

    The op's aten graph (``make_fx``) goes to ``torch._inductor.compile``: the
    generated code only, without Dynamo's frame and guards (``fusion``
    accounts those once per compiled graph).  Compiled once per signature,
    layout and thread count.  ``channels_last``: 4-D inputs in NHWC, as
    Inductor lays out a CPU convolution's output.

    Raises
    ------
    DaydreamError
        If the call cannot be rebuilt or Inductor cannot compile it (no C++ compiler, say).
    """
    import torch

    from .calibrate import time_call_ns

    key = (signature, channels_last, torch.get_num_threads())
    if key not in _INDUCTOR:
        _INDUCTOR[key] = _inductor_compile(signature, channels_last)
    fn, tensors = _INDUCTOR[key]
    return time_call_ns(lambda: fn(*tensors), torch.device("cpu"), 0.02, typical=True)


def _inductor_compile(signature: str, channels_last: bool):
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    op, args = call_for(signature, channels_last=channels_last)
    at = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]

    def work(*tensors):
        a = list(args)
        for i, t in zip(at, tensors):
            a[i] = t
        return op(*a)

    tensors = [args[i] for i in at]
    try:
        return torch._inductor.compile(make_fx(work)(*tensors), tensors), tensors
    except Exception as exc:    # Inductor's failures have many types (compiler missing, lowering, ...)
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise DaydreamError(f"cannot compile {json.loads(signature)[0]} with Inductor: {first}") from None


def inductor_time_ratios(signatures, threads: int | None = None, channels_last: bool = False) -> dict:
    """Per signature: ``t(compiled alone by Inductor) / t(eager, as traced)``, both re-run now
    (:func:`_pairs`); signatures that fail are left out."""
    return _ratios(signatures, lambda sig: inductor_ns(sig, channels_last), threads)


def _layout_strides(dims, strides) -> list:
    """Contiguous strides for ``dims`` in the memory order of ``strides`` (a transposed input stays transposed)."""
    order = sorted(range(len(dims)), key=lambda i: (-strides[i], i)) if strides else range(len(dims))
    out, step = [0] * len(dims), 1
    for i in reversed(list(order)):
        if strides and strides[i] == 0:     # an expanded (broadcast) dimension stays expanded
            continue
        out[i] = step
        step *= max(int(dims[i]), 1)
    return out


def scaled_signature(signature: str, batch_values, factor: float) -> str | None:
    """``signature`` with every tensor dimension in ``batch_values`` multiplied by ``factor``.

    The call at another batch size: strides are rebuilt in the traced memory
    order.  ``None`` when no dimension is a batch value or a scaled one is not
    a positive integer.

    >>> sig = json.dumps(["aten::mm", [[64, 512], [512, 1024]], ["float", "float"], [[512, 1], [1, 512]], ["", ""]])
    >>> json.loads(scaled_signature(sig, {64}, 0.25))[1:4]
    [[[16, 512], [512, 1024]], ['float', 'float'], [[512, 1], [1, 512]]]
    >>> scaled_signature(sig, {64}, 0.3) is None
    True
    """
    name, dims, types, strides, concrete = json.loads(signature)
    if not isinstance(dims, list):
        return None
    strides = strides if isinstance(strides, list) else [None] * len(dims)
    new_dims, new_strides, changed = [], [], False
    for d, st in zip(dims, strides + [None] * (len(dims) - len(strides))):
        if not isinstance(d, list) or not d:
            new_dims.append(d)
            new_strides.append(st)
            continue
        nd = []
        for x in d:
            if x in batch_values:
                y = x * factor
                if y < 1 or abs(y - round(y)) > 1e-9:
                    return None
                nd.append(int(round(y)))
                changed = True
            else:
                nd.append(x)
        new_dims.append(nd)
        ok = isinstance(st, list) and len(st) == len(d)
        new_strides.append(_layout_strides(nd, st if ok else None) if ok else st)
    if not changed:
        return None
    return json.dumps([name, new_dims, types, new_strides, concrete])


def batch_time_ratios(signatures, batch_values, factor: float, threads: int | None = None,
                      sequence=None, repeats: int = 1) -> dict:
    """Per signature: ``t(at factor x the batch) / t(as traced)``, both re-run now.

    Signatures without a batch dimension, or that fail to run, are left out.
    ``sequence``: the signatures of one traced iteration in order; the ops
    are then re-run as that sequence (:func:`daydream.opseq.sequence_ratios`),
    the scaled one ``repeats`` times back to back (micro-batches).
    """
    return _ratios_by(signatures, lambda sig: scaled_signature(sig, batch_values, factor), threads, sequence,
                      variant_repeats=repeats)


def _in_sequence(signatures, sequence, variant, threads, **kw) -> dict | None:
    """:func:`daydream.opseq.sequence_ratios` of ``sequence`` for ``signatures``; None without a
    sequence or where it does not fit (the caller then times each op alone)."""
    if not sequence:
        return None
    from .opseq import sequence_ratios

    got = sequence_ratios(sequence, variant, threads, **kw)
    if got is None:
        return None
    wanted = set(signatures)
    return {s: r for s, r in got.items() if s in wanted}


def _ratios_by(signatures, variant, threads, sequence, **kw) -> dict:
    """``t(variant(sig)) / t(sig)`` per signature: in sequence where one is given and fits (``kw``:
    for :func:`daydream.opseq.sequence_ratios`), else each alone."""
    got = _in_sequence(signatures, sequence, variant, threads, **kw)
    if got is not None:
        return got
    return _ratios(signatures, lambda sig: _time_or_none(variant(sig)), threads)


#: How :func:`fused_signature` lays out the N copies of a linear layer's GEMM operands.
LINEAR_LAYOUTS = ("hfta", "traced")


def _row_major(strides) -> bool:
    return isinstance(strides, list) and len(strides) == 2 and strides[1] == 1


def _hfta_gemm(name: str, dims: list, strides: list, n: int) -> tuple | None:
    """``(name, dims, strides)`` of the leading tensor operands of a linear layer's traced ``addmm``
    or ``mm`` as HFTA's fused ``Linear`` runs them over ``n`` copies; None for other shapes.

    HFTA keeps each copy's weight ``[in, out]`` row-major, the transpose of
    ``nn.Linear``'s ``[out, in]`` (``hfta.nn.Linear``: ``weight [B, in, out]``,
    ``bias [B, 1, out]``, forward ``baddbmm(bias, x, weight)``).  So the forward
    reads every operand row-major; the input's gradient ``g @ W`` reads the
    weight in the other layout than traced; and the weight's gradient, traced
    as ``g.t() @ x`` (its first operand transposed), is computed as its
    transpose ``x.t() @ g``, whose output is ``[in, out]``.  For a narrow layer
    that matters: a ``512 -> 10`` head's weight gradient ran 5x longer this way
    on the development VM, fused 2- and 8-fold (session 82).

    >>> _hfta_gemm("aten::mm", [[10, 64], [64, 512]], [[1, 10], [512, 1]], 2)   # g.t() @ x
    ('aten::bmm', [[2, 512, 64], [2, 64, 10]], [[32768, 1, 512], [640, 10, 1]])
    >>> _hfta_gemm("aten::mm", [[64, 10], [10, 512]], [[10, 1], [512, 1]], 2)   # g @ W
    ('aten::bmm', [[2, 64, 10], [2, 10, 512]], [[640, 10, 1], [5120, 1, 10]])
    """
    if name == "aten::addmm":
        if len(dims) < 3 or not all(isinstance(d, list) and len(d) == w for d, w in zip(dims, (1, 2, 2))):
            return None
        (o,), (m, k) = dims[0], dims[1]
        return "aten::baddbmm", [[n, 1, o], [n, m, k], [n, k, o]], [[o, o, 1], [m * k, k, 1], [k * o, o, 1]]
    if len(dims) != 2 or not all(isinstance(d, list) and len(d) == 2 for d in dims):
        return None
    (m, k), (_, o) = dims
    if strides[0] is not None and not _row_major(strides[0]):     # the weight's gradient, transposed
        return "aten::bmm", [[n, o, k], [n, k, m]], [[k * o, 1, o], [k * m, m, 1]]
    weight = [k * o, 1, k] if strides[1] is None or _row_major(strides[1]) else [k * o, o, 1]
    return "aten::bmm", [[n, m, k], [n, k, o]], [[m * k, k, 1], weight]


#: Convolution ops: position of ``groups`` among their arguments.
_CONV_GROUPS_ARG = {"aten::conv2d": 6, "aten::convolution": 8, "aten::_convolution": 8,
                    "aten::mkldnn_convolution": 6}


def _times(dims: list, axis: int, n: int) -> list:
    out = list(dims)
    out[axis] = out[axis] * n
    return out


def _stacked(dims: list, strides: list) -> list:
    """Strides ranking a new leading dimension outermost over a tensor of ``dims`` laid out as
    ``strides`` (N stacked copies, the traced layout inside), for :func:`_layout_strides`."""
    return [max(strides) * max(dims) + 1] + list(strides)


def fused_signature(signature: str, copies: int, layout: str = "hfta") -> str | None:
    """The call computing ``copies`` copies of a traced op at once, as HFTA fuses them.

    A convolution (forward or ``convolution_backward``) becomes a grouped one
    (channels and ``groups`` x N); ``mm`` becomes ``bmm`` and ``addmm``
    ``baddbmm`` over N stacked operands, laid out as ``layout`` says
    (:data:`LINEAR_LAYOUTS`): ``"hfta"`` as HFTA's fused ``Linear`` keeps its
    weights (:func:`_hfta_gemm`), ``"traced"`` each operand in its traced
    layout with a leading dimension of N.  ``None`` for any other op.

    >>> sig = json.dumps(["aten::mm", [[16, 64], [64, 10]], ["float", "float"], [[64, 1], [1, 64]], ["", ""]])
    >>> json.loads(fused_signature(sig, 4, "traced"))[:4]
    ['aten::bmm', [[4, 16, 64], [4, 64, 10]], ['float', 'float'], [[1024, 64, 1], [640, 1, 64]]]
    >>> json.loads(fused_signature(sig, 4))[:4]      # x @ W.t() of a bias-less linear: HFTA's W is [in, out]
    ['aten::bmm', [[4, 16, 64], [4, 64, 10]], ['float', 'float'], [[1024, 64, 1], [640, 10, 1]]]
    """
    if layout not in LINEAR_LAYOUTS:
        raise ValueError(f"fused_signature: layout must be one of {', '.join(LINEAR_LAYOUTS)}, got {layout!r}")
    name, dims, types, strides, concrete = json.loads(signature)
    if not isinstance(dims, list) or not isinstance(concrete, list):
        return None
    strides = strides if isinstance(strides, list) and len(strides) == len(dims) else [None] * len(dims)
    new = [list(d) if isinstance(d, list) else d for d in dims]
    concrete = list(concrete) + [""] * (len(dims) - len(concrete))
    n = copies
    try:
        if name in _CONV_GROUPS_ARG and len(new) > _CONV_GROUPS_ARG[name]:
            k = _CONV_GROUPS_ARG[name]
            new[0], new[1] = _times(new[0], 1, n), _times(new[1], 0, n)
            if isinstance(new[2], list) and new[2]:
                new[2] = _times(new[2], 0, n)
            concrete[k] = str(int(concrete[k] or 1) * n)
        elif name == "aten::convolution_backward" and len(new) > 9:
            new[0], new[1], new[2] = _times(new[0], 1, n), _times(new[1], 1, n), _times(new[2], 0, n)
            bias = _scalar(concrete[3])
            if isinstance(bias, list) and bias and bias[0]:
                concrete[3] = str([bias[0] * n])
            concrete[9] = str(int(concrete[9] or 1) * n)
        elif layout == "hfta" and name in ("aten::mm", "aten::addmm"):
            got = _hfta_gemm(name, new, strides, n)
            if got is None:
                return None
            name, head, fixed = got
            return json.dumps([name, head + new[len(head):], types, fixed + strides[len(fixed):], concrete])
        elif name == "aten::mm" and len(new) == 2:
            name, new = "aten::bmm", [[n] + new[0], [n] + new[1]]
        elif name == "aten::addmm" and len(new) >= 3 and len(new[0]) == 1:
            name, new[:3] = "aten::baddbmm", [[n, 1, new[0][0]], [n] + new[1], [n] + new[2]]
        else:
            return None
    except (TypeError, ValueError, IndexError):
        return None
    st = []
    for d, old, s in zip(new, dims, strides):
        cand = ((_stacked(old, s) if len(d) == len(s) + 1 else s)
                if isinstance(d, list) and d and isinstance(s, list) and len(s) == len(old) and s else None)
        st.append(_layout_strides(d, cand) if cand and len(cand) == len(d) else None)
    return json.dumps([name, new, types, st, concrete])


def fused_data_signature(signature: str, copies: int) -> str | None:
    """A data-moving op (elementwise, reduction, copy, batch norm, an optimizer's update) over
    ``copies`` copies' data at once, laid out as HFTA's fused job keeps it.

    The largest tensor input sets the layout: a 4-D or 5-D one is a
    convolution's activation, fused along its channels (``[B, N x C, H, W]``,
    the grouped convolution's output), and so is every input of as many
    dimensions and ``C`` channels (a pooled ``[B, C, 1, 1]``) and every 1-D
    input of ``C`` elements (batch norm's weight, bias and statistics); any
    other gets a new leading dimension of N (the batched GEMM's ``[N, B,
    F]``), and so does every input of its shape.  The others (a broadcast
    bias, a scalar tensor) stay as traced.  ``None`` without a
    tensor input.  The call may not run (shapes that no longer broadcast):
    the re-run then leaves the op out.

    >>> sig = json.dumps(["aten::native_batch_norm", [[8, 16, 4, 4], [16], [16], [16], [16], [], [], []],
    ...                   ["float"] * 5 + ["Scalar"] * 3, [[256, 16, 4, 1], [1], [1], [1], [1], [], [], []],
    ...                   ["", "", "", "", "", "True", "0.1", "1e-05"]])
    >>> json.loads(fused_data_signature(sig, 2))[1][:2]
    [[8, 32, 4, 4], [32]]
    >>> sig = json.dumps(["aten::add", [[64, 256], [256], []], ["float", "float", "Scalar"],
    ...                   [[256, 1], [1], []], ["", "", "1"]])
    >>> json.loads(fused_data_signature(sig, 4))[1:4:2]
    [[[4, 64, 256], [256], []], [[16384, 256, 1], [1], []]]
    """
    name, dims, types, strides, concrete = json.loads(signature)
    if not isinstance(dims, list) or not isinstance(types, list):
        return None
    tensors = [i for i, (d, t) in enumerate(zip(dims, types))
               if str(t).lower() in _TENSOR_TYPES and isinstance(d, list) and d]
    if not tensors:
        return None
    main = max(tensors, key=lambda i: math.prod(dims[i]))
    shape = list(dims[main])
    strides = strides if isinstance(strides, list) and len(strides) == len(dims) else [None] * len(dims)
    new_dims, new_strides = list(dims), list(strides)
    for i in tensors:
        d, s = dims[i], strides[i] if isinstance(strides[i], list) and len(strides[i]) == len(dims[i]) else None
        if len(shape) in (4, 5) and (len(d) == len(shape) and d[1] == shape[1] or d == [shape[1]]):
            new_dims[i] = _times(d, 1 if len(d) > 1 else 0, copies)
            new_strides[i] = _layout_strides(new_dims[i], s)
        elif len(shape) not in (4, 5) and d == shape:
            new_dims[i] = [copies] + d
            new_strides[i] = _layout_strides(new_dims[i], _stacked(d, s) if s else None)
    return json.dumps([name, new_dims, types, new_strides, concrete])


def fused_time_ratios(signatures, copies: int, threads: int | None = None, sequence=None,
                      chained: bool = False, layout: str = "hfta", warm: bool = False, data=()) -> dict:
    """Per signature: ``t(N copies fused) / t(one)``, both re-run now; ops without a fused form left out.

    ``sequence``: as for :func:`batch_time_ratios`; ``chained``: as for :func:`thread_time_ratios`;
    ``layout``: as for :func:`fused_signature`; ``warm``: as for
    :func:`daydream.opseq.sequence_ratios` (in sequence only); ``data``: signatures of
    data-moving ops, fused as :func:`fused_data_signature` says."""
    data = set(data)

    def variant(sig):
        return fused_data_signature(sig, copies) if sig in data else fused_signature(sig, copies, layout)

    return _ratios_by(signatures, variant, threads, sequence, chained=chained, by_time=chained, warm=warm)


def _time_or_none(signature: str | None) -> float | None:
    return None if signature is None else time_signature_ns(signature)


def float_inputs(signature: str) -> list:
    """Dims of the floating-point tensor inputs of a traced call, in order."""
    _, dims, types, _, _ = json.loads(signature)
    return [d for d, t in zip(dims or [], types or [])
            if _TENSOR_TYPES.get(str(t).lower(), "").startswith(("float", "bfloat"))]


_CAST_CACHE: dict = {}


def cast_ns(dims, src: str, dst: str) -> float:
    """Time to cast a contiguous tensor of ``dims`` from ``src`` to ``dst`` dtype on this machine."""
    import torch

    from .calibrate import time_call_ns

    key = (tuple(dims), src, dst, torch.get_num_threads())
    if key not in _CAST_CACHE:
        x = torch.randn(list(dims)).to(getattr(torch, src))
        _CAST_CACHE[key] = time_call_ns(lambda: x.to(getattr(torch, dst)), torch.device("cpu"), 0.01, typical=True)
    return _CAST_CACHE[key]
