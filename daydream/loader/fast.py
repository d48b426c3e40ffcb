"""Fast loading path: JSON bytes to a :class:`~daydream.model.RankTrace` with no per-event Python object.

The compiled scanner ``daydream._kineto`` (``daydream/loader/_kineto.cpp``)
turns the bytes of one trace into event columns, interning names and the raw
JSON tokens of the few fields that need Python semantics (process/thread ids,
devices, streams, shapes).  This module finishes the job once per *distinct*
token rather than once per event, with the reference functions of
:mod:`daydream.loader.kineto` and :mod:`daydream.loader.shapes`, so the result
equals :func:`daydream.loader.load_rank` exactly (``tests/test_fast_loader.py``
checks every public trace).  Documents the scanner does not reproduce exactly
(invalid JSON, NaN, lone surrogates, string timestamps, 65-bit integers, ...)
go through the reference loader, which also gives the same error messages.

The path is used when the extension is importable; ``DAYDREAM_FAST_LOADER=0``
turns it off.

Examples
--------
>>> from daydream.loader.fast import load_rank_bytes
>>> raw = (b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#1", "ts": 0, '
...        b'"dur": 10, "pid": 1, "tid": 1}]}')
>>> load_rank_bytes("t.json", raw).boundaries_ns.tolist()
[0, 10000]
"""
from __future__ import annotations

import json
import os
from collections import Counter

import numpy as np

from ..errors import TraceError
from ..model import EVENT_COLUMNS, EventKind, StringTable
from . import fast_layers, kineto
from .kineto import SYNC_CALLS, input_bytes
from .shapes import keeps_signature, op_flops, op_signature

try:
    from .. import _kineto
except ImportError:  # pragma: no cover - depends on the build
    _kineto = None

try:
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None

__all__ = ["available", "enabled", "load_rank_bytes", "scan_columns", "REPAIR_LABELS"]

#: Repair counters of the scanner, in its order, as the reference loader words them.
REPAIR_LABELS = (
    "non-object entries in traceEvents (dropped)",
    "events without a name (dropped)",
    "events without a valid ts/dur (dropped)",
    "negative durations (set to 0)",
    "malformed fwdbwd flows (dropped)",
)

_COLLECTIVE_RE = kineto._COLLECTIVE_RE
_MARKER_RE = kineto._MARKER_RE


def available() -> bool:
    """Whether the compiled scanner ``daydream._kineto`` was built."""
    return _kineto is not None


def enabled() -> bool:
    """Whether loading uses the fast path (built, and not ``DAYDREAM_FAST_LOADER=0``)."""
    return _kineto is not None and os.environ.get("DAYDREAM_FAST_LOADER", "1") != "0"


def _loads(raw):
    """One JSON value, parsed as :func:`daydream.loader.io._parse_json` would."""
    if _orjson is not None:
        try:
            return _orjson.loads(raw)
        except _orjson.JSONDecodeError:
            pass
    return json.loads(bytes(raw))


class _Values:
    """Raw JSON tokens (bytes) to Python values, parsed once each; id -1 is a missing field."""

    def __init__(self, tokens):
        self._tokens = tokens
        self._cache = {}

    def __call__(self, i):
        if i < 0:
            return None
        v = self._cache.get(i, self)
        if v is self:
            v = self._cache[i] = _loads(self._tokens[i])
        return v


def _thread_names(raw, spans) -> dict:
    """The reference's first pass over metadata events (``thread_name``)."""
    names = {}
    for b, e in spans.reshape(-1, 2).tolist():
        ev = _loads(memoryview(raw)[b:e])
        if ev.get("ph") == "M" and ev.get("name") == "thread_name" and kineto._scalar_ids(ev):
            args = ev.get("args")
            name = args.get("name") if isinstance(args, dict) else None
            if isinstance(name, str):
                names[(kineto._norm_id(ev.get("pid")), kineto._norm_id(ev.get("tid")))] = name
    return names


def _lanes(p: kineto.ParsedEvents, lane_keys, value, thread_names) -> np.ndarray:
    """Lane id of each lane key, created in first-use order as the reference creates them."""
    out = np.empty(len(lane_keys), np.int32)
    for i, (gpu, pid, tid, dev, stream) in enumerate(lane_keys):
        e = {k: value(t) for k, t in (("pid", pid), ("tid", tid)) if t >= 0}
        if gpu:
            args = {k: value(t) for k, t in (("device", dev), ("stream", stream)) if t >= 0}
            out[i] = kineto._gpu_lane(p, e, args)
        else:
            out[i] = kineto._cpu_lane(p, e, thread_names)
    return out


def _name_flags(names):
    coll = np.fromiter((bool(_COLLECTIVE_RE.match(s)) for s in names), bool, len(names))
    sync = np.fromiter((s in SYNC_CALLS for s in names), bool, len(names))
    marker = np.fromiter((bool(_MARKER_RE.match(s)) for s in names), bool, len(names))
    return coll, sync, marker


def _shape_values(names, shapes, value, name_col, shape_col, ops):
    """Input bytes and FLOPs of the CPU ops ``ops`` (row indices), computed once per distinct (name, shape).

    Returns per-op bytes, per-op FLOPs, per-op pair index, per-pair signature text (None where the
    loader keeps none) and per-pair whether the op keeps its signature whatever its FLOPs.
    """
    n_shapes = max(len(shapes), 1)
    pair = name_col[ops].astype(np.int64) * n_shapes + shape_col[ops]
    uniq, inverse = np.unique(pair, return_inverse=True)
    nbytes = np.empty(len(uniq), np.int64)
    flops = np.empty(len(uniq), np.int64)
    sig_text = []
    named = np.zeros(len(uniq), bool)
    for k, pr in enumerate(uniq.tolist()):
        name, shape = names[pr // n_shapes], shapes[pr % n_shapes]
        args = {key: value(t) for key, t in zip(("Input Dims", "Input type", "Input Strides",
                                                  "Concrete Inputs", "flops"), shape) if t >= 0}
        nbytes[k] = input_bytes(args)
        flops[k] = f = op_flops(name, args)
        named[k] = keeps_signature(name, 0)
        sig_text.append(op_signature(name, args) if keeps_signature(name, f, int(nbytes[k])) else None)
    return nbytes[inverse], flops[inverse], inverse, sig_text, named


def _signatures(p, flops, nbytes, pair, sig_text, named) -> np.ndarray:
    """Signature ids of ops with FLOPs or bytes (after clamping) or of :data:`SIGNED_OPS`, interned
    in event order as the reference does."""
    sig = np.full(len(flops), -1, np.int32)
    has = np.flatnonzero((flops != 0) | (nbytes > 0) | named[pair])
    if len(has):
        first = {}
        for k in pair[has].tolist():
            if k not in first:
                first[k] = p.sigs.intern(sig_text[k])
        sig_of = np.full(len(sig_text), -1, np.int32)
        sig_of[list(first)] = list(first.values())
        sig[has] = sig_of[pair[has]]
    return sig


def _clamp_counts(p, nbytes, flops) -> None:
    """The reference's rule for negative or implausible byte/FLOP counts (in place, counted)."""
    limit = kineto.MAX_COUNT
    bad_b = (nbytes < 0) | (nbytes > limit)
    bad_f = (flops < 0) | (flops > limit)
    bad = int((bad_b | bad_f).sum())
    if bad:
        p.repairs["negative or implausible byte/FLOP counts (set to 0)"] += bad
        nbytes[bad_b] = 0
        flops[bad_f] = 0


def scan_columns(source: str, raw) -> tuple | None:
    """Scanner output to ``(ParsedEvents-like builder, columns, meta)``; None where the reference must run.

    Raises
    ------
    TraceError
        If the document holds no events daydream understands (as the reference).
    """
    r = _kineto.scan(raw)
    if "fallback" in r:
        return None
    meta = {}
    mv = memoryview(raw)
    for key, b, e in r["top"]:
        meta[_loads(key)] = _loads(mv[b:e])
    n = len(r["kind"])
    if not n:
        raise TraceError(source, "empty trace: no CPU ops, runtime calls or kernels")
    p = kineto.ParsedEvents()
    p.names = StringTable(r["names"])
    value = _Values(r["tokens"])
    lane_of_key = _lanes(p, r["lane_keys"], value, _thread_names(raw, r["meta_events"]))
    p.repairs = Counter({label: c for label, c in zip(REPAIR_LABELS, r["repairs"]) if c})
    flows = r["flows"].reshape(-1, 4)
    flows = flows[(flows[:, 1] >= 0) & (flows[:, 3] >= 0)]
    flows[:, 1] = lane_of_key[flows[:, 1]] if len(flows) else flows[:, 1]
    flows[:, 3] = lane_of_key[flows[:, 3]] if len(flows) else flows[:, 3]
    cols = _event_columns(p, r, value, lane_of_key)
    return p, cols, meta, flows


def _event_columns(p, r, value, lane_of_key) -> dict:
    names = r["names"]
    kind, name = r["kind"].copy(), r["name"]
    nbytes = r["bytes"].copy()
    flops = np.zeros(len(kind), np.int64)
    sig = np.full(len(kind), -1, np.int32)
    coll, sync, marker = _name_flags(names)
    is_coll = (kind == EventKind.KERNEL) & coll[name]
    kind[is_coll] = EventKind.COLLECTIVE
    nbytes[is_coll] = r["coll_bytes"][is_coll]
    kind[(kind == EventKind.RUNTIME) & sync[name]] = EventKind.SYNC
    cpu_op = kind == EventKind.CPU_OP
    kind[cpu_op & marker[name]] = EventKind.ANNOTATION
    ops = np.flatnonzero(cpu_op & ~marker[name])
    if len(ops):
        nbytes[ops], flops[ops], pair, sig_text, named = _shape_values(names, r["shapes"], value, name,
                                                                       r["shape"], ops)
    _clamp_counts(p, nbytes, flops)
    if len(ops):
        sig[ops] = _signatures(p, flops[ops], nbytes[ops], pair, sig_text, named)
    cols = {"kind": kind.astype(EVENT_COLUMNS["kind"]), "name": name.astype(EVENT_COLUMNS["name"]),
            "lane": lane_of_key[r["lane_key"]].astype(EVENT_COLUMNS["lane"])}
    for k in ("start_ns", "dur_ns", "corr", "ext"):
        cols[k] = r[k].astype(EVENT_COLUMNS[k], copy=False)
    cols["bytes"], cols["flops"] = nbytes, flops
    cols["seq"], cols["sig"] = r["seq"], sig
    order = np.lexsort((-cols["dur_ns"], cols["start_ns"]))
    cols = {k: v[order] for k, v in cols.items()}
    n = len(kind)
    cols["layer"] = np.full(n, -1, np.int32)
    cols["phase"] = np.full(n, -1, np.int8)
    cols["iteration"] = np.full(n, -1, np.int32)
    return cols


def load_rank_bytes(source: str, data: bytes, index: int = 0, iteration_marker: str | None = None):
    """One trace file's contents (JSON bytes, or gzip of them) to a :class:`~daydream.model.RankTrace`.

    Equal to ``load_rank(source, decoded_document, index, iteration_marker)``;
    uses the reference loader where the scanner declines the document (or is
    not built).

    Raises
    ------
    TraceError
        As the reference loader, with the same messages.
    """
    from . import assemble_rank, load_rank
    from .io import decode_document, inflate
    from .memory import check_bytes

    got = None
    if enabled():
        raw = inflate(source, data)
        if raw[:2] != b"\x1f\x8b":   # gzip in gzip: left to the reference
            got = scan_columns(source, raw)
        if got is None:       # memory was checked for the scanner: the reference needs more
            check_bytes(source, len(raw))
    if got is None:
        return load_rank(source, decode_document(source, data), index, iteration_marker)
    p, cols, meta, flows = got
    return assemble_rank(source, meta, p, cols, flows, index, iteration_marker, _assign)


def _assign(cols, names, lanes, layers, boundaries_ns) -> None:
    fast_layers.assign_layers_and_phases(cols, names, lanes, layers, boundaries_ns, _kineto.walk_lanes)
