"""Fuzz every trace loader: generated bad inputs must end in a clear error or a counted repair.

Each *loader* below takes one generated case.  Its outcome is one of

* ``ok``: accepted; the invariants hold (integer, non-negative durations;
  the replay finishes; no two simulated tasks overlap on a lane; ...),
* ``error:<Class>``: a :class:`~daydream.errors.DaydreamError` subclass, the
  one-line error the CLI prints (an *expected failure*),
* ``crash``: any other exception, or an invariant violated,
* ``hang``: the case ran past :data:`CASE_TIMEOUT_S`.

Repairs counted by the loader (``RankTrace.repairs``, ``graph.repairs``) are
tallied per loader.  Cases are generated from a seed (plain ``random``, fast
enough for 10,000+ per loader); the tests drive the same mutators from
hypothesis.  Run::

    .venv/bin/python benchmarks/fuzz_loaders.py              # 10,000 cases per loader
    .venv/bin/python benchmarks/fuzz_loaders.py --cases 300  # quick
    .venv/bin/python benchmarks/fuzz_loaders.py --save-crashes tests/corpus/new

and it prints one table row per loader.  Exit status 1 if any crash or hang.
"""
from __future__ import annotations

import argparse
import copy
import gzip
import io
import json
import math
import os
import random
import signal
import sys
import tarfile
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

try:
    import orjson as _orjson
except ImportError:  # pragma: no cover
    _orjson = None

from daydream.errors import DaydreamError

__all__ = ["LOADERS", "CASE_TIMEOUT_S", "Outcome", "run_case", "fuzz", "small_doc", "real_docs",
           "mutate_doc", "mutate_bytes", "multi_rank_docs", "check_invariants", "InvariantError"]

#: Seconds one generated case may run before it counts as a hang.
CASE_TIMEOUT_S = 10.0
REPO = Path(__file__).resolve().parent.parent

#: Values substituted into fields: wrong types, negative, huge, non-finite, empty.
NASTY_VALUES = (None, True, 0, -1, -10**6, 1e-9, 2**53 + 1, 2**63, -2**63, 2**70, 1e18, -1e18, 1e300,
                float("nan"), float("inf"), float("-inf"), "", "12", "1e3", "abc", "stream 7", [], [1, 2],
                {}, {"a": 1}, [[1, 2], [3]], "\u0000\udfff" if False else "\u0000")
#: Fields of a Kineto event that the mutators touch.
EVENT_FIELDS = ("ts", "dur", "name", "cat", "ph", "pid", "tid", "args", "id")
ARG_FIELDS = ("correlation", "External id", "device", "stream", "Input Dims", "Input type",
              "Concrete Inputs", "Sequence number", "In msg nelems", "dtype", "flops", "bytes", "name")


class InvariantError(AssertionError):
    """An accepted input produced a result that breaks an invariant (a silent wrong answer)."""


class Hang(BaseException):
    """Raised by the alarm when a case runs too long."""


# ----------------------------------------------------------------- inputs
def small_doc(steps: int = 2, rng: random.Random | None = None) -> dict:
    """A small valid Kineto trace: ProfilerStep ranges, ops, launches, kernels, a sync, a flow."""
    rng = rng or random.Random(0)
    ev, t = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}}], 0
    for s in range(steps):
        c = 100 + 10 * s
        ev += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 1, "tid": 1, "ts": t, "dur": 200},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t + 10, "dur": 50,
             "args": {"Input Dims": [[64, 32], [32, 16]], "Input type": ["float", "float"], "Sequence number": s}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t + 20,
             "dur": 5, "args": {"correlation": c, "External id": s}},
            {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": t + 30, "dur": 40,
             "args": {"correlation": c, "device": 0, "stream": 7}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1, "ts": t + 70,
             "dur": 5, "args": {"correlation": c + 1}},
            {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pageable)", "pid": 0, "tid": 7,
             "ts": t + 80, "dur": 10, "args": {"correlation": c + 1, "device": 0, "stream": 7, "bytes": 4096}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 1, "tid": 1,
             "ts": t + 90, "dur": 15, "args": {"correlation": c + 2}},
            {"ph": "X", "cat": "cpu_op", "name": "autograd::engine::evaluate_function: MmBackward0", "pid": 1,
             "tid": 2, "ts": t + 110, "dur": 40, "args": {"Sequence number": s}},
            {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce", "pid": 0, "tid": 8, "ts": t + 150,
             "dur": 20, "args": {"device": 0, "stream": 8, "In msg nelems": 1024, "dtype": "Float"}},
            {"ph": "s", "cat": "fwdbwd", "id": s, "pid": 1, "tid": 1, "ts": t + 10, "name": "fwdbwd"},
            {"ph": "f", "cat": "fwdbwd", "id": s, "pid": 1, "tid": 2, "ts": t + 110, "name": "fwdbwd", "bp": "e"},
        ]
        t += 200
    return {"schemaVersion": 1, "traceEvents": ev}


#: Events kept from each real trace (its first iteration, cut short): mutating and
#: loading a whole trace per case would make 10,000 cases take an hour.
REAL_EVENTS = 400


def real_docs() -> list[dict]:
    """The bundled real traces (traces/*.json.gz), cut to the start of their first iteration."""
    out = []
    for p in sorted((REPO / "traces").glob("*.json.gz")):
        doc = json.loads(gzip.decompress(p.read_bytes()))
        out.append(_trim(doc, REAL_EVENTS))
    return out


def _trim(doc: dict, n_events: int) -> dict:
    """Metadata events plus the first ``n_events`` events of the first ProfilerStep (which stays)."""
    ev = [e for e in doc["traceEvents"] if isinstance(e, dict)]
    meta = [e for e in ev if e.get("ph") == "M"]
    steps = sorted((e for e in ev if str(e.get("name", "")).startswith("ProfilerStep#")), key=lambda e: e["ts"])
    first = steps[0]["ts"] if steps else 0
    body = sorted((e for e in ev if e.get("ph") != "M" and e.get("ts", 0) >= first and e not in steps[:1]),
                  key=lambda e: e.get("ts", 0))[:n_events]
    return {**doc, "traceEvents": meta + steps[:1] + body}


def _copy(doc):
    """Deep copy of a (clean) document: a JSON round trip is ~5x faster than deepcopy."""
    try:
        return _orjson.loads(_orjson.dumps(doc)) if _orjson else copy.deepcopy(doc)
    except TypeError:     # values orjson refuses (NaN, 2**70, ...)
        return copy.deepcopy(doc)


# ----------------------------------------------------------------- mutators
def _nasty(rng: random.Random):
    return copy.deepcopy(rng.choice(NASTY_VALUES))


def _pick(rng, ev, pred=lambda e: True):
    idx = [i for i, e in enumerate(ev) if isinstance(e, dict) and pred(e)]
    return ev[rng.choice(idx)] if idx else None


def _m_field(rng, ev):
    e = _pick(rng, ev)
    if e is not None:
        e[rng.choice(EVENT_FIELDS)] = _nasty(rng)


def _m_arg(rng, ev):
    e = _pick(rng, ev, lambda e: isinstance(e.get("args"), dict))
    if e is not None:
        e["args"][rng.choice(ARG_FIELDS)] = _nasty(rng)


def _m_delete(rng, ev):
    e = _pick(rng, ev)
    if e:
        e.pop(rng.choice(list(e)), None)


def _m_time(rng, ev):
    """Negative, huge, NaN, fractional or string durations and timestamps."""
    e = _pick(rng, ev, lambda e: "ts" in e)
    if e is not None:
        e[rng.choice(("ts", "dur"))] = rng.choice((-1, -5e6, 0.0004, 1e15, 1e17, 9.3e18, float("nan"),
                                                   float("inf"), "100", 2**64, -0.0, 1e-320))


def _m_overlap(rng, ev):
    """An event overlapping another on the same thread/stream (not nested)."""
    e = _pick(rng, ev, lambda e: e.get("ph") == "X" and isinstance(e.get("dur"), (int, float)))
    if e is not None and isinstance(e.get("ts"), (int, float)):
        o = copy.deepcopy(e)
        o["ts"] = e["ts"] + max(e["dur"], 1) * rng.uniform(0.1, 0.9)
        o["dur"] = max(e["dur"], 1) * rng.uniform(0.5, 3)
        ev.append(o)


def _m_order(rng, ev):
    rng.shuffle(ev)


def _m_swap_ts(rng, ev):
    a, b = _pick(rng, ev, lambda e: "ts" in e), _pick(rng, ev, lambda e: "ts" in e)
    if a is not None and b is not None:
        a["ts"], b["ts"] = b["ts"], a["ts"]


def _m_corr(rng, ev):
    """Duplicate or dangling correlation ids."""
    e = _pick(rng, ev, lambda e: isinstance(e.get("args"), dict) and "correlation" in e["args"])
    if e is None:
        return
    if rng.random() < 0.5:
        other = _pick(rng, ev, lambda e: isinstance(e.get("args"), dict) and "correlation" in e["args"])
        e["args"]["correlation"] = other["args"]["correlation"]
    else:
        e["args"]["correlation"] = rng.randrange(10**6, 10**7)


def _m_flow(rng, ev):
    """Flows with a missing end, a dangling id, or several ends."""
    ph = rng.choice(("s", "f"))
    ev.append({"ph": ph, "cat": "fwdbwd", "id": rng.choice((1, 2, 10**9, "x", None, -1)), "pid": 1,
               "tid": rng.choice((1, 2, 99)), "ts": rng.choice((0, 50, 10**9, -3))})


def _m_duplicate(rng, ev):
    e = _pick(rng, ev)
    if e is not None:
        ev.insert(rng.randrange(len(ev) + 1), copy.deepcopy(e))


def _m_drop(rng, ev):
    if ev:
        ev.pop(rng.randrange(len(ev)))


def _m_entry(rng, ev):
    ev.insert(rng.randrange(len(ev) + 1), _nasty(rng))


MUTATORS = (_m_field, _m_arg, _m_delete, _m_time, _m_overlap, _m_order, _m_swap_ts, _m_corr, _m_flow,
            _m_duplicate, _m_drop, _m_entry)


def mutate_doc(rng: random.Random, doc: dict, n: int | None = None) -> dict:
    """A copy of ``doc`` with ``n`` (default 1-4) random field-level mutations."""
    doc = _copy(doc)
    ev = doc["traceEvents"]
    for _ in range(n if n is not None else rng.randint(1, 4)):
        rng.choice(MUTATORS)(rng, ev)
    if rng.random() < 0.03:
        doc[rng.choice(("traceEvents", "distributedInfo", "deviceProperties"))] = _nasty(rng)
    return doc


def multi_rank_docs(rng: random.Random, base: dict) -> list[dict]:
    """2-3 ranks of ``base`` with clock skew between them, some mutated, some with a collective."""
    docs = []
    skew = rng.choice((0, 1, -1, 1e3, -1e6, 1e9, 1e12, -1e12))
    for r in range(rng.randint(2, 3)):
        d = _copy(base)
        for e in d["traceEvents"]:
            if isinstance(e, dict) and isinstance(e.get("ts"), (int, float)):
                e["ts"] = e["ts"] + skew * r
        d["distributedInfo"] = {"rank": rng.choice((r, r, r, 0, -1, "1", None)), "world_size": 3}
        docs.append(mutate_doc(rng, d, rng.randint(0, 2)))
    return docs


def mutate_bytes(rng: random.Random, raw: bytes) -> bytes:
    """Truncation, bit flips, splices, random bytes, deep nesting, gzip layers, BOMs."""
    how = rng.randrange(9)
    if how == 0:
        return raw[:rng.randrange(len(raw) + 1)]
    if how == 1:
        b = bytearray(raw)
        for _ in range(rng.randint(1, 8)):
            if b:
                b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b)
    if how == 2:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(64)))
    if how == 3:
        depth = rng.choice((100, 1000, 5000, 100000))
        return b'{"traceEvents": ' + b"[" * depth + b"]" * depth + b"}"
    if how == 4:
        g = gzip.compress(raw, mtime=0)
        return g[:rng.randrange(len(g) + 1)] if rng.random() < 0.5 else g
    if how == 5:
        return gzip.compress(gzip.compress(raw, mtime=0), mtime=0)
    if how == 6:
        return rng.choice((b"\xef\xbb\xbf", b"\xff\xfe", b"\x00", b" \n")) + raw
    if how == 7:
        i = rng.randrange(len(raw) + 1)
        return raw[:i] + rng.choice((b"NaN", b"Infinity", b'"\\ud800"', b"\xff", b"}", b",,")) + raw[i:]
    return rng.choice((b"null", b"[]", b"1", b'"x"', b'{"traceEvents": null}', b'{"traceEvents": {}}',
                       b'[1, 2]', b'{"traceEvents": [1e999]}', b"1" * 5000))


def mutate_tar(rng: random.Random, members: list[bytes]) -> bytes:
    """A tar(.gz) of trace members, then damaged: truncated, flipped, or odd member names."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=rng.choice(("w:gz", "w"))) as tf:
        for k, data in enumerate(members):
            info = tarfile.TarInfo(rng.choice((f"job/rank{k}.json", f"rank{k}.json.gz", f"x{k}.txt",
                                               f"../rank{k}.json", "rank0.json")))
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    raw = buf.getvalue()
    if rng.random() < 0.5:
        raw = mutate_bytes(rng, raw) if rng.random() < 0.5 else raw[:rng.randrange(len(raw) + 1)]
    return raw


# ----------------------------------------------------------------- invariants
def check_invariants(trace, graph=None, result=None) -> None:
    """Raise :class:`InvariantError` where an accepted input produced a wrong result."""
    for r in trace:
        c = r.cols
        if c["start_ns"].dtype.kind != "i" or c["dur_ns"].dtype.kind != "i":
            raise InvariantError(f"{r.source}: non-integer times")
        if (c["dur_ns"] < 0).any():
            raise InvariantError(f"{r.source}: negative duration in the loaded trace")
        b = r.boundaries_ns
        if len(b) < 2 or (np.diff(b) < 0).any():
            raise InvariantError(f"{r.source}: iteration boundaries out of order {b[:5]}")
    if graph is not None:
        for col in ("dur_ns", "gap_ns"):
            if col in graph.tasks and (graph.tasks[col] < 0).any():
                raise InvariantError(f"negative {col} in the graph")
    if result is not None:
        s, e = result.start_ns, result.end_ns
        if (e < s).any():
            raise InvariantError("a simulated task ends before it starts")
        for seq in graph.lane_tasks:
            a = np.asarray(seq, np.int64)
            if len(a) > 1 and (s[a[1:]] < e[a[:-1]]).any():
                raise InvariantError("simulated tasks overlap on one lane")
        for it in result.iterations():
            if len(it.simulated_ns) and (it.simulated_ns < 0).any():
                raise InvariantError("negative simulated iteration time")


# ----------------------------------------------------------------- loaders
def _load_docs(docs, marker=None):
    from daydream.loader import load_rank
    from daydream.model import Trace

    ranks = [load_rank(f"fuzz{k}.json", d, k, marker) for k, d in enumerate(docs)]
    seen = set()
    for r in ranks:
        if r.rank in seen:
            from daydream.errors import TraceError
            raise TraceError(r.source, f"rank {r.rank} given twice")
        seen.add(r.rank)
    return Trace(sorted(ranks, key=lambda r: r.rank))


def _pipeline(trace):
    from daydream.graph import build_graph
    from daydream.sim import simulate

    g = build_graph(trace)
    res = simulate(g)
    check_invariants(trace, g, res)
    return dict(g.repairs)


def _repairs_of(trace) -> dict:
    out = Counter()
    for r in trace:
        out.update(r.repairs)
    return dict(out)


def load_bytes(raw: bytes) -> dict:
    """Loader ``bytes``: JSON / gzip bytes -> documents -> ranks (io + kineto)."""
    from daydream.loader.io import _decode

    doc = _decode("fuzz.json", raw)
    return _repairs_of(_load_docs([doc]))


def load_tar(raw: bytes) -> dict:
    """Loader ``tar``: a tar(.gz) archive of ranks through :func:`daydream.load_trace`."""
    from daydream.loader import load_trace

    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "ranks.tar.gz")
        with open(p, "wb") as f:
            f.write(raw)
        return _repairs_of(load_trace(p))


def load_kineto(doc) -> dict:
    """Loader ``kineto``: field-level mutations of one document, parsed into ranks."""
    trace = _load_docs([doc])
    check_invariants(trace)
    return _repairs_of(trace)


def load_pipeline(docs) -> dict:
    """Loader ``pipeline``: multi-rank documents (clock skew) -> graph -> simulation."""
    trace = _load_docs(docs)
    rep = Counter(_repairs_of(trace))
    rep.update(_pipeline(trace))
    return dict(rep)


def load_profile_doc(raw: bytes) -> dict:
    """Loader ``profile``: a device profile file (``daydream calibrate -o``) through ``load_profile``."""
    from daydream.device import load_profile

    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "profile.json")
        with open(p, "wb") as f:
            f.write(raw)
        prof = load_profile(p)
    for kind in ("matmul", "elementwise"):
        for dt, curve in getattr(prof, kind).items():
            for point in curve.points:
                if not all(isinstance(x, (int, float)) and math.isfinite(x) and x >= 0 for x in point):
                    raise InvariantError(f"accepted a {kind} {dt} curve point {point!r}")
    return {}


def fast_loader():
    """The compiled fast loader module, or None where it is not built (then ``fast`` is skipped)."""
    try:
        from daydream.loader import fast
    except ImportError:
        return None
    return fast if fast.available() else None


def load_fast(raw: bytes) -> dict:
    """Loader ``fast``: the compiled scanner (:mod:`daydream.loader.fast`) on mutated trace bytes.

    The reference parser reads the same bytes; an input both accept must give
    the same events (else :class:`InvariantError`, a silent disagreement).
    """
    from daydream.loader.io import decode_document
    from daydream.loader import load_rank
    from daydream.model import Trace

    fast = fast_loader()
    r = fast.load_rank_bytes("fuzz.json", raw, 0, None)
    trace = Trace([r])
    check_invariants(trace)
    try:
        ref = load_rank("fuzz.json", decode_document("fuzz.json", raw), 0, None)
    except DaydreamError:
        return dict(r.repairs)      # the reference refuses what the lenient scanner reads: allowed
    for col in ("start_ns", "dur_ns", "kind"):
        if not np.array_equal(np.sort(ref.cols[col]), np.sort(r.cols[col])):
            raise InvariantError(f"fast and reference loaders disagree on {col}")
    return dict(r.repairs)


def load_edits(case) -> dict:
    """Loader ``edits``: user edits through the primitives on a loaded graph; cycles refused."""
    from daydream import primitives as P
    from daydream.errors import CycleError, GraphError
    from daydream.sim import simulate

    g, seed = case
    rng = random.Random(seed)
    n = g.n_tasks
    refused = 0
    for _ in range(rng.randint(1, 6)):
        op = rng.randrange(5)
        a, b = rng.randrange(-2, n + 2), rng.randrange(-2, n + 2)
        try:
            if op <= 1:
                P.add_dependency(g, a, b, lag_ns=rng.choice((0, 5, -5)))
            elif op == 2:
                P.scale(g, [a], rng.choice((0.0, 0.5, 2.0, -1.0, float("nan"), float("inf"))))
            elif op == 3:
                P.set_duration(g, [a], rng.choice((0, 10, -10, 2**62)))
            else:
                P.remove(g, [a])
                n = g.n_tasks
        except CycleError as exc:
            if not exc.tasks:
                raise InvariantError(f"cycle refused without naming tasks: {exc}") from None
            refused += 1
        except GraphError:
            refused += 1
    P.check_acyclic(g)
    res = simulate(g)
    s, e = res.start_ns, res.end_ns
    if (e < s).any():
        raise InvariantError("a simulated task ends before it starts after edits")
    return {"edits refused": refused} if refused else {}


# ----------------------------------------------------------------- generation
@dataclass
class Corpus:
    """Valid seeds the generators mutate (built once)."""

    docs: list = field(default_factory=list)
    raws: list = field(default_factory=list)
    graphs: list = field(default_factory=list)

    @classmethod
    def build(cls, real: bool = True) -> "Corpus":
        docs = [small_doc(2), small_doc(3)] + (real_docs() if real else [])
        raws = [json.dumps(d).encode() for d in docs[:2]]
        return cls(docs, raws, [])

    def graph(self, rng):
        from daydream.graph import build_graph

        if not self.graphs:
            self.graphs = [build_graph(_load_docs([d])) for d in self.docs]
        return copy.deepcopy(rng.choice(self.graphs))


def gen_bytes(rng, corpus):
    return mutate_bytes(rng, rng.choice(corpus.raws))


def gen_tar(rng, corpus):
    members = [rng.choice(corpus.raws) for _ in range(rng.randint(0, 3))]
    members = [gzip.compress(m, mtime=0) if rng.random() < 0.5 else m for m in members]
    return mutate_tar(rng, members)


def gen_kineto(rng, corpus):
    return mutate_doc(rng, rng.choice(corpus.docs))


def gen_pipeline(rng, corpus):
    base = rng.choice(corpus.docs[:2]) if rng.random() < 0.8 else rng.choice(corpus.docs)
    if rng.random() < 0.5:
        return [mutate_doc(rng, base)]
    return multi_rank_docs(rng, base)


def gen_fast(rng, corpus):
    doc = mutate_doc(rng, rng.choice(corpus.docs))
    raw = json.dumps(doc, allow_nan=True).encode()
    return mutate_bytes(rng, raw) if rng.random() < 0.2 else raw


def gen_profile(rng, corpus):
    from daydream.published import PUBLISHED

    doc = _copy(PUBLISHED[rng.choice(sorted(PUBLISHED))].to_json())
    if rng.random() < 0.2:
        return mutate_bytes(rng, json.dumps(doc).encode())
    for _ in range(rng.randint(1, 3)):
        key = rng.choice(sorted(doc))
        if isinstance(doc[key], dict) and doc[key] and rng.random() < 0.6:
            sub = rng.choice(sorted(doc[key]))
            if isinstance(doc[key][sub], list) and doc[key][sub] and rng.random() < 0.5:
                doc[key][sub][rng.randrange(len(doc[key][sub]))] = _nasty(rng)
            else:
                doc[key][sub] = _nasty(rng)
        elif rng.random() < 0.2:
            del doc[key]
        else:
            doc[key] = _nasty(rng)
    return json.dumps(doc, allow_nan=True).encode()


def gen_edits(rng, corpus):
    return corpus.graph(rng), rng.randrange(2**32)


#: loader name -> (run one case, generate one case from (rng, corpus)).
LOADERS = {
    "bytes": (load_bytes, gen_bytes),
    "tar": (load_tar, gen_tar),
    "kineto": (load_kineto, gen_kineto),
    "pipeline": (load_pipeline, gen_pipeline),
    "edits": (load_edits, gen_edits),
    "fast": (load_fast, gen_fast),
    "profile": (load_profile_doc, gen_profile),
}


@dataclass(frozen=True)
class Outcome:
    """What one case did: ``ok``, ``error:<Class>``, ``crash`` or ``hang``."""

    status: str
    repairs: dict
    detail: str = ""

    @property
    def bad(self) -> bool:
        return self.status in ("crash", "hang")


def _alarm(signum, frame):
    raise Hang()


def run_case(loader: str, case, timeout_s: float = CASE_TIMEOUT_S) -> Outcome:
    """Run one case through ``loader`` and classify it (see the module docstring)."""
    fn = LOADERS[loader][0]
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        rep = fn(case)
        return Outcome("ok", rep or {})
    except Hang:
        return Outcome("hang", {}, f"ran past {timeout_s} s")
    except DaydreamError as exc:
        msg = str(exc)
        if "\n" in msg.strip():
            return Outcome("crash", {}, f"multi-line error: {msg!r}")
        return Outcome(f"error:{type(exc).__name__}", {}, msg)
    except Exception:  # noqa: BLE001 - anything else is a crash, by definition
        return Outcome("crash", {}, traceback.format_exc(limit=8))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@dataclass
class Tally:
    cases: int = 0
    outcomes: Counter = field(default_factory=Counter)
    repairs: Counter = field(default_factory=Counter)
    crashes: list = field(default_factory=list)
    seconds: float = 0.0


def fuzz(loader: str, cases: int, seed: int = 0, corpus: Corpus | None = None,
         timeout_s: float = CASE_TIMEOUT_S) -> Tally:
    """Run ``cases`` generated cases through ``loader``; crashes keep (case, detail)."""
    corpus = corpus or Corpus.build()
    gen = LOADERS[loader][1]
    t = Tally()
    t0 = time.perf_counter()
    for k in range(cases):
        rng = random.Random(f"{loader}:{seed}:{k}")
        case = gen(rng, corpus)
        out = run_case(loader, case, timeout_s)
        t.cases += 1
        t.outcomes[out.status] += 1
        for what, n in out.repairs.items():
            t.repairs[what] += n
        if out.bad and len(t.crashes) < 20:
            t.crashes.append((k, case, out))
    t.seconds = time.perf_counter() - t0
    return t


def _save(loader, k, case, out, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    stem = folder / f"{loader}-{k}"
    if isinstance(case, (bytes, bytearray)):
        stem.with_suffix(".bin").write_bytes(case)
    elif loader != "edits":
        stem.with_suffix(".json").write_text(json.dumps(case, default=str, allow_nan=True))
    stem.with_suffix(".txt").write_text(out.detail)


def _fmt(c: Counter, prefix: str) -> str:
    return ", ".join(f"{k[len(prefix):]} {v}" for k, v in sorted(c.items()) if k.startswith(prefix)) or "-"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=10_000, help="cases per loader")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--loaders", default=",".join(LOADERS))
    ap.add_argument("--timeout", type=float, default=CASE_TIMEOUT_S, help="seconds per case")
    ap.add_argument("--save-crashes", type=Path, help="folder for crashing inputs")
    ap.add_argument("--no-real", action="store_true", help="only the small synthetic seed traces")
    a = ap.parse_args(argv)
    os.environ.setdefault("DAYDREAM_PROGRESS", "0")
    corpus = Corpus.build(real=not a.no_real)
    print(f"{'loader':<10}{'cases':>7}{'ok':>7}{'crash':>7}{'hang':>6}{'s':>7}  errors by type; repairs")
    bad = 0
    for name in a.loaders.split(","):
        if name == "fast" and fast_loader() is None:
            print(f"{name:<10}skipped: the compiled fast loader is not built")
            continue
        t = fuzz(name, a.cases, a.seed, corpus, a.timeout)
        o = t.outcomes
        bad += o["crash"] + o["hang"]
        print(f"{name:<10}{t.cases:>7}{o['ok']:>7}{o['crash']:>7}{o['hang']:>6}{t.seconds:>7.1f}  "
              f"{_fmt(o, 'error:')}; repairs: {sum(t.repairs.values())} "
              f"({', '.join(f'{k} {v}' for k, v in t.repairs.most_common())})", flush=True)
        for k, case, out in t.crashes[:3]:
            print(f"    case {k}: {out.status}: {out.detail.strip().splitlines()[-1] if out.detail else ''}")
        if a.save_crashes:
            for k, case, out in t.crashes:
                _save(name, k, case, out, a.save_crashes)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
