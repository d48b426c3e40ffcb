"""Kineto / Chrome-trace events to columns.

Both the current schema (``cpu_op``, ``cuda_runtime``, ``kernel``, ...) and the
2021 one (``Operator``, ``Runtime``, ``Kernel``, ...) map onto
:class:`~daydream.model.EventKind`.  Microsecond floats become integer
nanoseconds here and nowhere else.
"""
from __future__ import annotations

import math
import re
from collections import Counter

import numpy as np

from ..errors import TraceError
from ..model import EVENT_COLUMNS, EventKind, Lane, LaneKind, StringTable
from .shapes import clip_count, keeps_signature, op_flops, op_signature

__all__ = ["CATEGORY_KINDS", "SYNC_CALLS", "parse_events", "ParsedEvents", "us_to_ns", "input_bytes",
           "MAX_TIME_NS", "MAX_COUNT"]

#: Largest timestamp or duration accepted (about 146 years of nanoseconds): start + duration
#: still fits int64.  Events beyond it (or non-finite) are dropped and counted.
MAX_TIME_NS = 2**62
#: Largest id, byte or FLOP count kept from an event's args; larger (or negative counts)
#: are treated as absent, so sums over a trace stay within int64.
MAX_COUNT = 2**53

#: Chrome-trace category to event kind (both Kineto schemas).
CATEGORY_KINDS: dict[str, EventKind] = {
    "cpu_op": EventKind.CPU_OP,
    "operator": EventKind.CPU_OP,
    "user_annotation": EventKind.ANNOTATION,
    "python_function": EventKind.ANNOTATION,
    "gpu_user_annotation": EventKind.ANNOTATION,
    "cuda_runtime": EventKind.RUNTIME,
    "runtime": EventKind.RUNTIME,
    "cuda_driver": EventKind.RUNTIME,
    "driver": EventKind.RUNTIME,
    "kernel": EventKind.KERNEL,
    "gpu_memcpy": EventKind.MEMCPY,
    "memcpy": EventKind.MEMCPY,
    "gpu_memset": EventKind.MEMSET,
    "memset": EventKind.MEMSET,
}

#: Runtime calls that block the calling CPU thread until GPU work completes.
SYNC_CALLS = frozenset({
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
    "cudaMemcpy", "cudaMemcpy2D", "cudaMemset", "cuCtxSynchronize",
    "cuStreamSynchronize", "cuEventSynchronize",
})

_GPU_CATS = {"gpu_user_annotation"}
_GPU_KINDS = frozenset(k for k in EventKind if k.is_gpu)
_COLLECTIVE_RE = re.compile(r"^nccl(Dev)?Kernel|^ncclKernel", re.IGNORECASE)
_MARKER_RE = re.compile(r"^ProfilerStep#\d+$")
_DTYPE_BYTES = {"float": 4, "float32": 4, "half": 2, "float16": 2, "bfloat16": 2, "double": 8,
                "float64": 8, "int8_t": 1, "int8": 1, "uint8": 1, "int32": 4, "int": 4,
                "int64": 8, "long": 8}


def us_to_ns(ts) -> int:
    """Kineto microseconds (float or int) to integer nanoseconds.

    >>> us_to_ns(1.5), us_to_ns(4458676522690.655)
    (1500, 4458676522690655)

    Raises
    ------
    ValueError
        Not a number (booleans included), not finite, or beyond :data:`MAX_TIME_NS`.
    """
    if isinstance(ts, bool):
        raise ValueError("boolean time")
    if isinstance(ts, int):
        ns = ts * 1000
    else:
        ts = float(ts)
        if not math.isfinite(ts) or abs(ts) > MAX_TIME_NS / 1000:
            raise ValueError(f"time out of range: {ts}")
        whole = int(ts)                 # split so the fraction keeps its digits (exact subtraction)
        ns = whole * 1000 + int(round((ts - whole) * 1000.0))
    if abs(ns) > MAX_TIME_NS:
        raise ValueError(f"time out of range: {ts}")
    return ns


def _as_int(v, default=-1) -> int:
    if v is None or isinstance(v, bool):
        return default
    try:
        out = int(v)
    except (TypeError, ValueError, OverflowError):
        return default
    return out if -MAX_COUNT <= out <= MAX_COUNT else default


#: Bytes per element of the dtype names Kineto writes in "Input type".
_TYPE_BYTES = {"float": 4, "double": 8, "c10::half": 2, "c10::bfloat16": 2, "half": 2, "bfloat16": 2,
               "long int": 8, "int": 4, "short int": 2, "signed char": 1, "unsigned char": 1, "bool": 1,
               "c10::complex<float>": 8, "c10::complex<double>": 16}


def input_bytes(args: dict) -> int:
    """Bytes of the tensor inputs of a CPU op, from ``Input Dims``/``Input type``.

    >>> input_bytes({"Input Dims": [[64, 512], [], [512]], "Input type": ["float", "Scalar", "c10::BFloat16"]})
    132096
    """
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not isinstance(dims, list) or not isinstance(types, list):
        return 0
    total = 0
    for d, t in zip(dims, types):
        size = _TYPE_BYTES.get(str(t).lower())
        if size is None or not isinstance(d, list) or not d or not all(isinstance(x, int) for x in d):
            continue
        n = 1
        for x in d:
            n *= x
        total += n * size
    return clip_count(total)


def _collective_bytes(args: dict) -> int:
    n = _as_int(args.get("In msg nelems"), 0)
    if n <= 0:
        return 0
    return n * _DTYPE_BYTES.get(str(args.get("dtype", "float")).lower(), 4)


class ParsedEvents:
    """Column builder: appends events, then freezes into numpy arrays."""

    def __init__(self):
        self.names = StringTable()
        self.lanes: list[Lane] = []
        self._lane_ids: dict[tuple, int] = {}
        self.rows: dict[str, list] = {k: [] for k in EVENT_COLUMNS if k not in ("layer", "phase", "iteration")}
        self.seq: list[int] = []           # autograd sequence number, -1 if none
        self.sigs = StringTable()          # call signatures of compute ops (for re-measuring them)
        self.sig: list[int] = []           # index into sigs, -1 if none
        self.fwdbwd: dict[int, list] = {}  # flow id -> [(ph, ts_ns, lane)]
        self.repairs: Counter = Counter()
        self.cpu_lane_cache: dict = {}     # raw (pid, tid) -> CPU lane id

    def lane(self, kind: LaneKind, pid, tid, device=-1, label="") -> int:
        key = (kind, pid, tid)
        i = self._lane_ids.get(key)
        if i is None:
            i = self._lane_ids[key] = len(self.lanes)
            self.lanes.append(Lane(rank=-1, kind=kind, pid=pid, tid=tid, label=label, device=device))
        return i

    def add(self, kind, name, lane, start_ns, dur_ns, corr=-1, ext=-1, nbytes=0, seq=-1, flops=0, sig=-1):
        r = self.rows
        r["kind"].append(int(kind))
        r["name"].append(self.names.intern(name))
        r["lane"].append(lane)
        r["start_ns"].append(start_ns)
        r["dur_ns"].append(dur_ns)
        r["corr"].append(corr)
        r["ext"].append(ext)
        r["bytes"].append(nbytes)
        r["flops"].append(flops)
        self.seq.append(seq)
        self.sig.append(sig)

    def columns(self) -> dict:
        cols = {k: np.asarray(v, dtype=EVENT_COLUMNS[k]) for k, v in self.rows.items()}
        cols["seq"] = np.asarray(self.seq, dtype=np.int64)
        cols["sig"] = np.asarray(self.sig, dtype=np.int32)
        n = len(cols["kind"])
        order = np.lexsort((-cols["dur_ns"], cols["start_ns"]))
        cols = {k: v[order] for k, v in cols.items()}
        cols["layer"] = np.full(n, -1, np.int32)
        cols["phase"] = np.full(n, -1, np.int8)
        cols["iteration"] = np.full(n, -1, np.int32)
        return cols


def _norm_id(v):
    """Thread/process ids: ints where numeric (2021 traces use strings)."""
    if isinstance(v, str):
        s = v.strip()
        if s.lstrip("-").isdigit():
            return int(s)
        if s.startswith("stream "):
            return _as_int(s[7:], s)
    return v


def _gpu_lane(p: ParsedEvents, e: dict, args: dict) -> int:
    dev = _as_int(args.get("device"), _as_int(e.get("pid"), 0))
    stream = _as_int(args.get("stream"), -1)
    if stream < 0:
        stream = _norm_id(e.get("tid"))
    return p.lane(LaneKind.GPU_STREAM, dev, stream, device=dev, label=f"GPU {dev} stream {stream}")


def _cpu_lane(p: ParsedEvents, e: dict, thread_names: dict) -> int:
    """CPU lane of an event; TypeError if its pid/tid is not a number or string."""
    raw = (e.get("pid"), e.get("tid"))
    lane = p.cpu_lane_cache.get(raw)    # same ids -> same lane: skip normalising per event
    if lane is None:
        lane = p.cpu_lane_cache[raw] = _new_cpu_lane(p, raw, thread_names)
    return lane


def _new_cpu_lane(p: ParsedEvents, raw: tuple, thread_names: dict) -> int:
    pid, tid = _norm_id(raw[0]), _norm_id(raw[1])
    label = thread_names.get((pid, tid)) or f"thread {tid}"
    return p.lane(LaneKind.CPU_THREAD, pid, tid, label=label)


def _scalar_ids(e: dict) -> bool:
    return all(v is None or (isinstance(v, (int, str)) and not isinstance(v, bool))
               for v in (e.get("pid"), e.get("tid")))


def _add_complete(p: ParsedEvents, e: dict, cat: str, source: str, thread_names: dict) -> None:
    kind = CATEGORY_KINDS.get(cat)
    if kind is None:
        return
    name = e.get("name")
    if not isinstance(name, str):
        p.repairs["events without a name (dropped)"] += 1
        return
    try:
        start = us_to_ns(e["ts"])
        dur = us_to_ns(e.get("dur", 0))
    except (KeyError, TypeError, ValueError):
        p.repairs["events without a valid ts/dur (dropped)"] += 1
        return
    if not _scalar_ids(e):
        p.repairs["events whose pid/tid is not a number or string (dropped)"] += 1
        return
    if dur < 0:
        p.repairs["negative durations (set to 0)"] += 1
        dur = 0
    args = e.get("args") or {}
    if not isinstance(args, dict):
        p.repairs["events whose args is not an object (args ignored)"] += 1
        args = {}
    corr = _as_int(args.get("correlation"))
    flops = 0
    ext = _as_int(args.get("External id", args.get("external id")))
    nbytes = _as_int(args.get("bytes"), 0)
    if kind in _GPU_KINDS or cat in _GPU_CATS:
        lane = _gpu_lane(p, e, args)
        if kind == EventKind.KERNEL and _COLLECTIVE_RE.match(name):
            kind = EventKind.COLLECTIVE
            nbytes = _collective_bytes(args)
    else:
        lane = _cpu_lane(p, e, thread_names)
        if kind == EventKind.RUNTIME and name in SYNC_CALLS:
            kind = EventKind.SYNC
        elif kind == EventKind.CPU_OP and _MARKER_RE.match(name):
            kind = EventKind.ANNOTATION
        elif kind == EventKind.CPU_OP:
            nbytes = input_bytes(args)
            flops = op_flops(name, args)
    if not (0 <= nbytes <= MAX_COUNT and 0 <= flops <= MAX_COUNT):
        p.repairs["negative or implausible byte/FLOP counts (set to 0)"] += 1
        nbytes = nbytes if 0 <= nbytes <= MAX_COUNT else 0
        flops = flops if 0 <= flops <= MAX_COUNT else 0
    signed = keeps_signature(name, flops, nbytes if kind == EventKind.CPU_OP else 0)
    sig = p.sigs.intern(op_signature(name, args)) if signed else -1
    p.add(kind, name, lane, start, dur, corr, ext, nbytes, _as_int(args.get("Sequence number")), flops, sig)


def parse_events(source: str, doc: dict) -> ParsedEvents:
    """Parse one trace document into a :class:`ParsedEvents` builder.

    Raises
    ------
    TraceError
        If the document holds no events daydream understands.
    """
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise TraceError(source, "not a Chrome/Kineto trace (no 'traceEvents' list)")
    p = ParsedEvents()
    thread_names = {}
    for e in events:
        if isinstance(e, dict) and e.get("ph") == "M" and e.get("name") == "thread_name" and _scalar_ids(e):
            args = e.get("args")
            name = args.get("name") if isinstance(args, dict) else None
            if isinstance(name, str):
                thread_names[(_norm_id(e.get("pid")), _norm_id(e.get("tid")))] = name
    for e in events:
        if not isinstance(e, dict):
            p.repairs["non-object entries in traceEvents (dropped)"] += 1
            continue
        ph = e.get("ph")
        cat = e.get("cat")
        cat = cat.lower() if isinstance(cat, str) else ""
        if ph == "X":
            _add_complete(p, e, cat, source, thread_names)
        elif ph in ("s", "f") and cat == "fwdbwd":
            try:
                p.fwdbwd.setdefault(int(e["id"]), []).append(
                    (ph, us_to_ns(e["ts"]), _cpu_lane(p, e, thread_names)))
            except (KeyError, TypeError, ValueError, OverflowError):
                p.repairs["malformed fwdbwd flows (dropped)"] += 1
    if not p.rows["kind"]:
        raise TraceError(source, "empty trace: no CPU ops, runtime calls or kernels")
    return p
