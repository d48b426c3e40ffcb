"""Re-running one traced iteration's op sequence in order (cache context).

:mod:`daydream.opbench` re-runs a traced op by itself; here the compute ops of
one iteration are re-run *as a sequence*, each occurrence with operands of its
own, so that each finds the caches as the rest of its iteration leaves them
(:func:`sequence_ratios`), along the iteration's data flow where the trace
recorded it (:func:`flow_calls`).  :mod:`daydream.opcorun` replays the same
sequence beside a twin process on another core.  Needs torch.
"""
from __future__ import annotations

import json
import math
import statistics
import time

from .errors import DaydreamError
from .opbench import _TENSOR_TYPES, _bind, _overload, call_for

__all__ = ["sequence_ratios", "shared_args", "chain_calls", "flow_calls", "out_overload", "CHAIN_WINDOW",
           "SEQUENCE_ROUNDS", "SEQUENCE_SPAN_S", "SEQUENCE_MAX_BYTES"]


#: Rounds of a sequence re-run (each: the traced sequence, then the variant's), at least.
SEQUENCE_ROUNDS = 7
#: Least time (s) the rounds of a sequence re-run are spread over (more rounds for a short
#: sequence): this VM's speed moves by tens of percent for spells of a second or so, and the
#: median of 7 rounds of a 50 ms sequence read the spell it fell in (an MLP's 8-fold fused
#: re-run: 55 and 64 ms predicted from the same trace, one call after the other).
SEQUENCE_SPAN_S = 2.0
#: Operand bytes of both sequences above which ops are re-run each alone instead.
SEQUENCE_MAX_BYTES = 1 << 30


def _operand_bytes(signature: str) -> int:
    _, dims, types, _, _ = json.loads(signature)
    return sum(4 * math.prod(d) for d, t in zip(dims or [], types or [])
               if isinstance(d, list) and str(t).lower() in _TENSOR_TYPES)


def sequence_ratios(sequence, variant, threads: int | None = None, rounds: int = SEQUENCE_ROUNDS,
                    span_s: float | None = None, variant_threads: int | None = None,
                    variant_repeats: int = 1, chained: bool = False, by_time: bool = False,
                    recycle: bool = True, warm: bool = False) -> dict | None:
    """Per signature of ``sequence`` with a variant: ``t(variant(sig)) / t(sig)``, re-run as one iteration.

    A compute op in training finds its operands where the rest of the
    iteration left them: another layer's weights passed through the caches
    since this layer's were last used.  Timed alone in a loop, the op finds
    everything in cache, which under-states ops that stream a large weight
    against little work (a micro-batch's matmul: 16-row matmuls against
    1024 x 1024 weights here ran 0.9-1.0 ms in a micro-batched training loop
    and in sequence, 0.75 ms alone).  So the traced iteration's ops are
    re-run in order, each occurrence with operands of its own, and so is the
    variant sequence (``variant(sig)``, or the op as traced where it has
    none); the two sequences alternate ``rounds`` times after a warm-up (more
    while the rounds so far took less than ``span_s``, default
    :data:`SEQUENCE_SPAN_S`; the variant's side at ``variant_threads``
    intra-op threads where given), and
    each occurrence's ratio is the median over rounds, each signature's the
    median over its occurrences.  Ops that cannot be rebuilt are left out of
    both.  ``None`` when the operands of both sequences exceed
    :data:`SEQUENCE_MAX_BYTES` (then time each op alone).

    An element of ``sequence`` may be a ``(signature, keys, grads, flow)`` tuple
    (:func:`optimizations._sequence.iteration_sequence` with ``shared``): the
    arguments ``keys`` names are one tensor per name on each side
    (:func:`shared_args`), as a layer's weight is for its forward and backward
    ops; chained, an argument keyed as a gradient reads the output that a
    backward op named by ``grads`` produced (:func:`chain_calls`).  Where the
    trace recorded its data flow (``flow``) and the variant is the op as
    traced, chained goes by the storages instead (:func:`flow_calls`, its
    outputs in one buffer per recorded storage unless ``recycle`` is false).
    ``variant_repeats``: the variant's side runs its whole sequence that
    many times back to back on the same operands, and each occurrence counts
    its mean over them: micro-batches pass over the same weights one after
    another, and the later passes find them where the earlier left them (a
    16-row pass over four 1024 x 1024 weights cost 0.39 of the 64-row pass
    alone here, 0.34 a pass in four back to back).  ``chained``: each side's
    occurrences read the outputs of the ones before them where the layouts
    match (:func:`chain_calls`), as the iteration's data flows.  ``by_time``:
    each signature's ratio is the sum over its occurrences of their median
    variant times over the sum of their median traced times, so that an
    occurrence that costs more on the variant's side counts by its time
    where the median over occurrences would drop it (the MLP's first update of
    each weight that two threads had read, with the cores 330 ns apart: 220 us
    at 2 threads against 37-41 at 1, its other updates 16-17 against 17-19).
    ``warm``: each side's timed pass follows an untimed pass of its own (at its
    own thread count), as a training iteration follows the one before it; else
    it follows the other side's pass.  At another thread count that matters: a
    2-thread pass straight after a 1-thread one found its worker's caches cold
    and ran the transformer's first layer x0.97-1.34 of its 1-thread time
    where later layers ran x0.55-0.65 (session 74).
    """
    import torch

    if threads:
        torch.set_num_threads(threads)
    items = [(e, None, None, None) if isinstance(e, str) else (*e, None, None)[:4] for e in sequence]
    pairs = [(sig, keys, grads, flow, variant(sig)) for sig, keys, grads, flow in items]
    if sum(_operand_bytes(a) + _operand_bytes(b or a) for a, *_, b in pairs) > SEQUENCE_MAX_BYTES:
        return None
    calls = _side_calls(pairs, chained, recycle)
    got = [[] for _ in calls]
    r, t_end = 0, None
    while r <= rounds or time.perf_counter() < t_end:
        times = []
        for side, repeats in ((2, 1), (3, max(variant_repeats, 1))):
            if variant_threads and threads:
                torch.set_num_threads(variant_threads if side == 3 else threads)
            side_calls = [c[side] for c in calls]
            if warm:
                _pass_times(side_calls, repeats)
            times.append(_pass_times(side_calls, repeats))
        if r:                                   # the first round warms up
            for g, a, b in zip(got, *times):
                g.append((a, b))
        else:
            t_end = time.perf_counter() + (SEQUENCE_SPAN_S if span_s is None else span_s)
        r += 1
    if variant_threads and threads:
        torch.set_num_threads(threads)
    return _per_signature(calls, got, by_time)


def _per_signature(calls, got, by_time: bool) -> dict:
    """Each signature's ratio from its occurrences' rounds ``(traced ns, variant ns)`` (:func:`sequence_ratios`)."""
    by_sig: dict = {}
    for (sig, has_variant, _, _), rows in zip(calls, got):
        if has_variant:
            by_sig.setdefault(sig, []).append(rows)
    if by_time:
        return {sig: sum(statistics.median(b for _, b in rows) for rows in occ)
                / max(sum(statistics.median(a for a, _ in rows) for rows in occ), 1) for sig, occ in by_sig.items()}
    return {sig: statistics.median(statistics.median(b / max(a, 1) for a, b in rows) for rows in occ)
            for sig, occ in by_sig.items()}


def _side_calls(pairs, chained: bool, recycle: bool = True) -> list:
    """``(signature, has a variant, traced call, variant call)`` per ``(sig, keys, grads, flow, variant)``
    of :func:`sequence_ratios` that both sides can rebuild; each side chained where asked: by the
    recorded storages (:func:`flow_calls`) where the sequence has them and each variant is the op
    as traced, else by layouts and keys (:func:`chain_calls`)."""
    by_flow = chained and any(p[3] for p in pairs) and all(p[4] in (None, p[0]) for p in pairs)
    built, pools = [], ({}, {})
    for sig, keys, grads, flow, var in pairs:
        keys = None if by_flow else keys
        try:
            sides = [shared_args(call_for(s), keys, pool) for s, pool in ((sig, pools[0]), (var or sig, pools[1]))]
            built.append((sig, var is not None, keys, grads, flow,
                          *(_overload(*c) if chained else _bind(*c) for c in sides)))
        except DaydreamError:
            continue
    if not chained:
        return [b[:2] + b[5:] for b in built]
    if by_flow:
        ours, theirs = (flow_calls([b[side] for b in built], [b[4] for b in built], recycle) for side in (5, 6))
        return [(b[0], b[1], a, v) for b, a, v in zip(built, ours, theirs)]
    keyed = [dict(enumerate(b[2] or ())) for b in built]
    reads = [{i: k for i, k in ks.items() if k is not None and k.endswith(GRAD_SUFFIX)} for ks in keyed]
    fixed = [{i for i, k in ks.items() if k is not None} - set(r) for ks, r in zip(keyed, reads)]
    produces = [b[3] or () for b in built]
    ours, theirs = (chain_calls([b[side] for b in built], fixed, reads, produces) for side in (5, 6))
    return [(b[0], b[1], a, v) for b, a, v in zip(built, ours, theirs)]


#: The key suffix of a parameter's gradient (:func:`optimizations._sequence.optimizer_keys` names them).
GRAD_SUFFIX = ".grad"


#: How many of the latest outputs of each layout a chained re-run keeps for later calls to read
#: (:func:`chain_calls`).
CHAIN_WINDOW = 4


def chain_calls(bound, fixed=(), reads=(), produces=()) -> list:
    """Callables re-running ``bound`` (``(op, positional args, keyword args)`` per call, in order)
    with the data flow that the layouts imply.

    A traced op reads what the ops just before it wrote, and on two threads
    part of that was written by the other core: the transformer's
    ``gelu_backward`` after its 2-thread ``mm`` re-ran x0.56-0.57 of its
    1-thread time on operands of its own, and x0.70 and x1.27 reading the
    ``mm``'s output (minutes apart, as the host moved the cores).  So each tensor argument (but
    the positions ``fixed[j]`` names for call ``j``: a layer's weights,
    shared by name) becomes the latest output before it with that shape,
    strides and dtype, however far back (a backward op reads activations its
    forward wrote), among the :data:`CHAIN_WINDOW` latest of that layout and
    each output once per call, read afresh each pass (views of one tensor
    are one output: the latest of them counts; the transformer's
    ``gelu_backward`` read its gradient and its saved input both from the
    ``mm`` before it, through a ``reshape`` and a ``view``, until session 44).  The trace does not
    say which tensor an op read, so this is a guess; an op the guess breaks
    keeps its own operands.

    Gradients go by name: ``produces[j]``, ``((shape, key), ...)``, names
    the outputs of call ``j`` that are a parameter's gradient (those of that
    shape: a backward op of the parameter's layer; but no view of a tensor
    that ``fixed[j]`` names: a linear layer's backward turns its
    weight-gradient ``mm`` output into ``.grad`` by ``t`` calls of the
    weight's shape, keyed as the weight, and until session 65 the update read
    the weight itself as its gradient, found it in this core's cache at 1
    thread, 30 us against 46-53 traced, and re-ran x7.9-9.6 at 2 threads in
    the slow state against x3.5-5.4 real), and ``reads[j]``,
    ``{position: key}``, the arguments of call ``j`` that read one (the
    optimizer's; the latest output under that key, of the argument's shape
    and dtype, strides as produced).

    >>> import torch
    >>> a = torch.ones(2, 2)
    >>> mm, relu = torch.ops.aten.mm.default, torch.ops.aten.relu.default
    >>> run = chain_calls([(mm, [a, a], {}), (relu, [torch.zeros(2, 2)], {})])
    >>> _ = run[0]()
    >>> run[1]()                      # relu reads mm's output, not its zeros
    tensor([[2., 2.],
            [2., 2.]])
    >>> add = torch.ops.aten.add.Tensor
    >>> w, g = torch.zeros(2, 3), torch.zeros(2, 3)
    >>> run = chain_calls([(mm, [a, torch.ones(2, 3)], {}), (add, [w, g], {})], fixed=[(), {0}],
    ...                   reads=[{}, {1: "w.grad"}], produces=[(((2, 3), "w.grad"),), ()])
    >>> _ = run[0]()
    >>> run[1]()                      # the update reads the gradient mm produced
    tensor([[2., 2., 2.],
            [2., 2., 2.]])
    """
    box, links, by_layout, by_key = {}, [], {}, {}
    for j, (op, pos, kw) in enumerate(bound):
        pos = list(pos)
        mine = reads[j] if j < len(reads) else {}
        fixed_j = set(fixed[j] if j < len(fixed) else ())
        linked = _links(pos, fixed_j | set(mine), by_layout)
        linked += [(k, *by_key[key]) for k, key in mine.items()
                   if key in by_key and k < len(pos) and _same_shape(pos[k], by_key[key][2])]
        own = list(pos)
        for k, i, o, t in linked:
            pos[k] = t
        try:
            out = op(*pos, **kw)
        except (RuntimeError, TypeError, ValueError, IndexError):
            linked, pos = [], own
            out = op(*pos, **kw)
        many = out if isinstance(out, (tuple, list)) else ()
        outs = [(None, out)] if _is_tensor(out) else [(o, t) for o, t in enumerate(many) if _is_tensor(t)]
        grads = (produces[j] if j < len(produces) else ()) or ()
        weights = {_storage(pos[k]) for k in fixed_j if k < len(pos) and _is_tensor(pos[k])}
        for o, t in outs:
            kept = by_layout.setdefault(_layout(t), [])
            kept[:] = [e for e in kept if _storage(e[2]) != _storage(t)][-(CHAIN_WINDOW - 1):] + [(j, o, t)]
            if _storage(t) in weights:           # a view of a keyed weight (its ``t``): no gradient
                continue
            for shape, key in grads:
                if tuple(t.shape) == tuple(shape):
                    by_key[key] = (j, o, t)
        links.append((op, pos, kw, [(k, i, o) for k, i, o, _ in linked]))
    producers = {i for *_, lk in links for _, i, _ in lk}
    return [_chained(op, pos, kw, lk, box, j if j in producers else None)
            for j, (op, pos, kw, lk) in enumerate(links)]


def flow_calls(bound, flows, recycle: bool = True) -> list:
    """Callables re-running ``bound`` (``(op, positional args, keyword args)`` per call, in order)
    with the data flow the trace recorded: ``flows[j]``, ``(input refs, output refs)`` of call
    ``j`` (:mod:`daydream.collect.flow`: ``[storage id, offset]`` per argument or output that
    is one tensor, else ``None``; ``None`` for a call without them).

    Each tensor argument whose storage an earlier call's output holds reads that output
    afresh each pass (the latest of the storage's outputs with the argument's shape, strides
    and offset, else a view of the latest with them); one whose storage no earlier call wrote
    (a weight, an optimizer's state, an input) is a view of one tensor per storage, made at
    its first read large enough for every read of it, so that every op reading one weight
    reads the same tensor and in-place updates write it.  An argument that fits neither, and
    every argument of a call the links break, keeps its own operand.  Unlike
    :func:`chain_calls` nothing is guessed: an op reads what it read in training.

    ``recycle``: each output a call allocated is written (through the op's ``out=`` form where
    that is a CPU kernel of its own that takes the call's operands, :func:`out_overload`; other
    calls allocate as before) into one buffer per recorded storage, so that outputs training placed at
    one address share memory here too, and each finds its memory as the previous writer of
    that address left it (an execution trace's storage ids follow the data's address: a
    freed block allocated again keeps its id).  On two threads a chunk that the other core
    wrote last costs the writer its lines (session 44: ``benchmarks/output_memory.py``).

    >>> import torch
    >>> a = torch.ones(2, 2)
    >>> mm, relu, t = torch.ops.aten.mm.default, torch.ops.aten.relu.default, torch.ops.aten.t.default
    >>> run = flow_calls([(mm, [a, a], {}), (t, [torch.zeros(2, 2)], {}), (relu, [torch.zeros(2, 2)], {})],
    ...                  [([[1, 0], [1, 0]], [[2, 0]]), ([[2, 0]], [[2, 0]]), ([[2, 0]], [[3, 0]])])
    >>> x = run[0](); _ = run[1]()
    >>> torch.equal(run[2](), x.relu())          # relu reads mm's output, not its zeros
    True
    """
    need = _storage_needs(bound, flows)
    box, pools, made, links, allocs = {}, {}, {}, [], []
    for j, (op, pos, kw) in enumerate(bound):
        ins, outs = (flows[j] if j < len(flows) else None) or ((), ())
        own, pos = list(pos), list(pos)
        linked = []
        for k, ref in enumerate(list(ins)[:len(pos)]):
            if ref is None or not _is_tensor(pos[k]):
                continue
            s, off = ref
            if s in made:
                got = _made_link(made[s], pos[k], off)
                if got is not None:
                    linked.append((k, *got))
                    i, o, t, view = got
                    pos[k] = t if view is None else t.as_strided(*view)
                continue
            base = pools.get(s)
            if base is None:
                base = pools[s] = _pool_base(pos[k], need.get(s, 0))
            if base.dtype == pos[k].dtype and off + _extent(pos[k]) <= base.numel():
                pos[k] = base.as_strided(pos[k].shape, pos[k].stride(), off)
        try:
            out = op(*pos, **kw)
        except (RuntimeError, TypeError, ValueError, IndexError):
            linked, pos = [], own
            out = op(*pos, **kw)
        fresh = _register(out, list(outs), j, made, pools)
        if recycle and not ({r[0] for r in ins if r is not None} & {s for _, s, _ in fresh}):
            allocs.append((j, out, fresh))
        links.append((op, pos, kw, [(k, i, o, view) for k, i, o, _, view in linked]))
    for j, op in _recycled(allocs, links):
        links[j] = (op, *links[j][1:])
    producers = {i for *_, lk in links for _, i, _, _ in lk}
    return [_chained(op, pos, kw, lk, box, j if j in producers else None)
            for j, (op, pos, kw, lk) in enumerate(links)]


def _extent(t) -> int:
    """Elements of storage that ``t``'s layout spans from its offset."""
    if any(d == 0 for d in t.shape):
        return 0
    return 1 + sum((d - 1) * abs(st) for d, st in zip(t.shape, t.stride()))


def _storage_needs(bound, flows) -> dict:
    """Per storage: the elements its reads span (offset + extent), at most."""
    need: dict = {}
    for (_, pos, _), flow in zip(bound, flows):
        for ref, a in zip((flow or ((),))[0], pos):
            if ref is not None and _is_tensor(a):
                need[ref[0]] = max(need.get(ref[0], 0), ref[1] + _extent(a))
    return need


def _pool_base(a, n: int):
    """A flat tensor of ``n`` elements of ``a``'s dtype, filled as :func:`daydream.opbench.call_for` fills."""
    import torch

    if not a.dtype.is_floating_point:
        return torch.zeros(n, dtype=a.dtype)
    return torch.randn(n).to(a.dtype)


def _made_link(outputs, a, off: int):
    """``(call, output index, tensor, view)`` for an argument ``a`` at ``off`` of a storage whose
    outputs so far are ``outputs`` (``(call, output index, tensor, offset)``, latest last):
    the latest with ``a``'s layout and offset as it is (``view`` None), else the latest as a
    view ``(shape, strides, offset)`` where it spans them; None where none fits."""
    for i, o, t, t_off in reversed(outputs):
        if t_off == off and _layout(t) == _layout(a):
            return i, o, t, None
    i, o, t, _ = outputs[-1]
    if t.dtype != a.dtype or off + _extent(a) > t.untyped_storage().nbytes() // max(t.element_size(), 1):
        return None
    return i, o, t, (tuple(a.shape), a.stride(), off)


def _register(out, outs: list, j: int, made: dict, pools: dict) -> list:
    """Call ``j``'s outputs (``out``) as the latest of their recorded storages (``outs``); returns
    ``(output index, storage, offset)`` of those that are new allocations."""
    many = out if isinstance(out, (tuple, list)) else ()
    tensors = [(None, out)] if _is_tensor(out) else [(o, t) for o, t in enumerate(many) if _is_tensor(t)]
    fresh = []
    for o, t in tensors:
        ref = outs[o or 0] if (o or 0) < len(outs) else None
        if ref is None:
            continue
        s, off = ref
        if s in pools and _storage(t) == _storage(pools[s]):
            continue                               # an in-place write or a view of a pooled tensor
        if s in made and _storage(t) == _storage(made[s][-1][2]):
            made[s].append((j, o, t, off))
        else:                                      # a new allocation under this storage id
            made[s] = [(j, o, t, off)]
            pools.pop(s, None)
            fresh.append((o, s, off))
    return fresh


def out_overload(op):
    """``(overload, names of its out= arguments)`` of ``op``'s out= form (its arguments and one
    out= argument per result) where that form is a CPU kernel of its own, else None: the
    generated out= wrappers (``native_layer_norm.out``, ``clone.out``) compute into a temporary
    and copy it, a different op from the one traced.

    >>> import torch
    >>> out_overload(torch.ops.aten.gelu_backward.default)
    (<OpOverload(op='aten.gelu_backward', overload='grad_input')>, ['grad_input'])
    >>> out_overload(torch.ops.aten.native_layer_norm.default) is None
    True
    """
    import torch

    packet, schema = getattr(op, "overloadpacket", None), getattr(op, "_schema", None)
    if packet is None or schema is None:
        return None
    names = [a.name for a in schema.arguments]
    for name in packet.overloads():
        args = getattr(packet, name)._schema.arguments
        outs = [a.name for a in args if a.is_out]
        if outs and len(outs) == len(schema.returns) and [a.name for a in args if not a.is_out] == names:
            form = getattr(packet, name)
            return (form, outs) if torch._C._dispatch_has_kernel_for_dispatch_key(form.name(), "CPU") else None
    return None


def _recycled(allocs, links) -> list:
    """``(call, op writing into its storages' buffers)`` for each ``(call, trial output, fresh
    allocations)`` of ``allocs`` whose every output is a new allocation under a recorded storage
    and whose op has an out= form that runs on the call's arguments (:func:`flow_calls`'s
    ``recycle``).  A storage's buffer spans the bytes of every output placed in it."""
    import functools

    import torch

    usable = []
    for j, out, fresh in allocs:
        tensors = list(out) if isinstance(out, (tuple, list)) else [out]
        form = out_overload(links[j][0])
        if form and len(fresh) == len(tensors) == len(form[1]) and all(map(_is_tensor, tensors)):
            usable.append((j, form, [(t, s, off) for t, (_, s, off) in zip(tensors, fresh)]))
    nbytes: dict = {}
    for _, _, outs in usable:
        for t, s, off in outs:
            nbytes[s] = max(nbytes.get(s, 0), 8 * math.ceil((off + _extent(t)) * t.element_size() / 8))
    homes = {s: torch.zeros(n, dtype=torch.uint8) for s, n in nbytes.items()}
    got = []
    for j, (op, names), outs in usable:
        call = functools.partial(op, **{name: homes[s].view(t.dtype).as_strided(t.shape, t.stride(), off)
                                        for name, (t, s, off) in zip(names, outs)})
        try:
            call(*links[j][1], **links[j][2])
        except (RuntimeError, TypeError, ValueError, IndexError):
            continue                               # e.g. an out= form refusing an operand: as traced
        got.append((j, call))
    return got


def _same_shape(a, t) -> bool:
    return _is_tensor(a) and _is_tensor(t) and tuple(a.shape) == tuple(t.shape) and a.dtype == t.dtype


def _is_tensor(x) -> bool:
    return hasattr(x, "stride") and hasattr(x, "dtype")


def _layout(t) -> tuple:
    return tuple(t.shape), t.stride(), t.dtype


def _storage(t) -> int:
    """What ``t``'s data is: two views of one tensor are one output to read."""
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return id(t)


def _links(pos, fixed, by_layout) -> list:
    """``(argument, producer call, its output's index or None, the output)`` for each tensor
    argument of ``pos`` that one of the latest outputs of its layout (``by_layout``) matches,
    newest first, each output once."""
    out, used = [], set()
    for k, a in enumerate(pos):
        if k in fixed or not _is_tensor(a):
            continue
        for i, o, t in reversed(by_layout.get(_layout(a), ())):
            if id(t) not in used:
                used.add(id(t))
                out.append((k, i, o, t))
                break
    return out


def _chained(op, pos, kw, links, box: dict, slot):
    """One call of :func:`chain_calls` or :func:`flow_calls`: its linked arguments read from
    ``box`` (``(argument, call, output index[, view])``: a view ``(shape, strides, offset)`` of
    the output where given), its output kept there under ``slot`` (None: not read by a later call)."""
    if not links and slot is None:
        return lambda: op(*pos, **kw)

    def call():
        for k, i, o, *view in links:
            t = box[i] if o is None else box[i][o]
            pos[k] = t.as_strided(*view[0]) if view and view[0] is not None else t
        out = op(*pos, **kw)
        if slot is not None:
            box[slot] = out
        return out
    return call


def shared_args(call, keys, pool: dict):
    """``call`` (``(op, args)`` of :func:`daydream.opbench.call_for`) with each argument that
    ``keys`` names replaced by ``pool``'s tensor of that name (the first argument given it),
    or that tensor with its last two dimensions swapped, where shape, strides and dtype
    match; other arguments as they were.

    >>> import torch
    >>> pool, w = {}, torch.zeros(3, 2)
    >>> _ = shared_args(("mm", [w]), ("L#0",), pool)                 # the first use: the layer's tensor
    >>> _, (a, x) = shared_args(("mm", [torch.ones(3, 2).t(), torch.ones(2, 3)]), ("L#0", None), pool)
    >>> a.data_ptr() == w.data_ptr(), tuple(a.shape), x.data_ptr() == w.data_ptr()
    (True, (2, 3), False)
    >>> _, (b,) = shared_args(("mm", [torch.ones(2, 3)]), ("L#0",), pool)   # another layout: its own
    >>> b.data_ptr() == w.data_ptr()
    False
    """
    op, args = call
    if not keys:
        return call
    args = list(args)
    for i, key in enumerate(keys[:len(args)]):
        a = args[i]
        if key is None or not hasattr(a, "stride"):
            continue
        t = pool.setdefault(key, a)
        for view in (t, t.transpose(-2, -1) if t.dim() >= 2 else None):
            if view is not None and view.shape == a.shape and view.stride() == a.stride() and view.dtype == a.dtype:
                args[i] = view
                break
    return op, args


def _pass_times(calls, repeats: int = 1) -> list:
    """ns each of ``calls`` took, in order, over ``repeats`` passes back to back (the mean)."""
    row = [0] * len(calls)
    for _ in range(repeats):
        for i, c in enumerate(calls):
            t0 = time.perf_counter_ns()
            c()
            row[i] += time.perf_counter_ns() - t0
    return [x / repeats for x in row]


def _sequence_calls(sequence, kept: bool = False) -> list | tuple:
    """Callables re-running ``sequence``, each occurrence with operands of its own (failures left
    out); with ``kept``, also the index in ``sequence`` of each call's signature."""
    calls, index = [], []
    for i, sig in enumerate(sequence):
        try:
            calls.append(_bind(*call_for(sig)))
        except DaydreamError:
            continue
        index.append(i)
    return (calls, index) if kept else calls


def _pass_ns(calls) -> int:
    t0 = time.perf_counter_ns()
    for c in calls:
        c()
    return time.perf_counter_ns() - t0
