"""The compiled fast loading path (daydream._kineto + daydream/loader/fast.py) equals the reference.

For every public trace, the project's own traces and the fuzzer's corpus of
nasty inputs, ``fast.load_rank_bytes`` must give the same RankTrace (columns,
tables, lanes, repairs, metadata) as ``load_rank`` on the parsed document, or
the same DaydreamError message; random documents (hypothesis) and random
truncations/mutations of a real trace must never crash the interpreter.
"""
from __future__ import annotations

import gzip
import json
import os
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from daydream.errors import DaydreamError
from daydream.loader import fast, load_rank, read_documents
from daydream.loader.io import decode_document, inflate
from daydream.model import RankTrace

from conftest import REPO, public_traces

pytestmark = pytest.mark.skipif(not fast.available(), reason="daydream._kineto is not built")

OWN = sorted((REPO / "traces").glob("*.json.gz"))
CORPUS = sorted(p for p in (REPO / "tests" / "corpus").glob("*") if p.name != "expected.json")


def assert_same_rank(a, b):
    assert (a.source, a.rank) == (b.source, b.rank)
    assert a.cols.keys() == b.cols.keys()
    for k in a.cols:
        assert a.cols[k].dtype == b.cols[k].dtype, k
        assert np.array_equal(a.cols[k], b.cols[k]), k
    assert a.names.strings == b.names.strings
    assert a.layers.strings == b.layers.strings
    assert a.signatures.strings == b.signatures.strings
    assert a.lanes == b.lanes
    assert np.array_equal(a.boundaries_ns, b.boundaries_ns)
    assert (a.iteration_names, a.main_lane) == (b.iteration_names, b.main_lane)
    assert a.repairs == b.repairs
    assert a.meta == b.meta
    assert a.fwdbwd.dtype == b.fwdbwd.dtype and np.array_equal(a.fwdbwd, b.fwdbwd)


def outcome(fn):
    """A RankTrace, or the DaydreamError's message."""
    try:
        return fn()
    except DaydreamError as exc:
        return f"{type(exc).__name__}: {exc}"


def assert_same_outcome(src, data, index=0):
    ref = outcome(lambda: load_rank(src, decode_document(src, data), index))
    got = outcome(lambda: fast.load_rank_bytes(src, data, index))
    if isinstance(ref, str) or isinstance(got, str):
        assert got == ref
    else:
        assert_same_rank(got, ref)
    return got


#: Traces larger than this (gzip bytes) are compared only with DAYDREAM_SLOW_TESTS=1: the
#: reference loader takes 5-10 s on each of them, which would make this file take minutes.
SLOW_TRACE_BYTES = 1_500_000


def _traces():
    return [pytest.param(p, marks=pytest.mark.skipif(
                p.stat().st_size > SLOW_TRACE_BYTES and os.environ.get("DAYDREAM_SLOW_TESTS") != "1",
                reason="large trace: set DAYDREAM_SLOW_TESTS=1"))
            for p in [*public_traces(), *OWN]]


@pytest.mark.parametrize("path", _traces(), ids=lambda p: p.name)
def test_equal_to_reference_on_real_traces(path):
    for i, (src, data) in enumerate(read_documents([path], raw=True)):
        scanned = fast._kineto.scan(inflate(src, data))
        assert "fallback" not in scanned, scanned.get("fallback")   # really the fast path
        got = assert_same_outcome(src, data, i)
        assert not isinstance(got, str), got


def test_replay_identical_through_both_paths(monkeypatch):
    from daydream import replay

    path = OWN[0] if OWN else pytest.skip("no own traces")
    monkeypatch.setenv("DAYDREAM_FAST_LOADER", "1")
    fast_report, fast_res = replay(path)
    monkeypatch.setenv("DAYDREAM_FAST_LOADER", "0")
    assert not fast.enabled()
    ref_report, ref_res = replay(path)
    assert fast_report == ref_report
    assert np.array_equal(fast_res.start_ns, ref_res.start_ns)
    assert np.array_equal(fast_res.end_ns, ref_res.end_ns)


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_fuzzer_corpus_same_outcome(path):
    try:
        items = list(read_documents([path], raw=True))
    except DaydreamError:
        return   # the archive/file level error comes before either path
    for i, (src, data) in enumerate(items):
        assert_same_outcome(src, data, i)


def _doc(events, **top):
    return json.dumps({**top, "traceEvents": events}).encode()


_STEP = {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#1", "ts": 0, "dur": 100, "pid": 1, "tid": 1}


@pytest.mark.parametrize("raw", [
    b"", b"   ", b"{", b"[1, 2", b'{"traceEvents": 3}', b'{"a": 1}', b"nul", b'{"traceEvents": []}',
    b'{"traceEvents": [' + json.dumps(_STEP).encode() + b"]} x",
    b'[{"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#1", "ts": NaN, "dur": 1, "pid": 1, "tid": 1}]',
    b'[{"ph": "X", "cat": "cpu_op", "name": "a\\ud800", "ts": 1, "dur": 1, "pid": 1, "tid": 1}]',
    b'[{"ph": "X", "cat": "cpu_op", "name": "\xff", "ts": 1, "dur": 1, "pid": 1, "tid": 1}]',
    b"[" * 5000 + b"]" * 5000,
    _doc([_STEP, {**_STEP, "name": "x", "ts": "12.5"}]),
    _doc([_STEP, {**_STEP, "name": "x", "ts": True}]),
    _doc([_STEP, {**_STEP, "name": "x", "ts": 2**70}]),
    _doc([_STEP, {**_STEP, "name": "x", "ts": 1e300}]),
    _doc([_STEP, {**_STEP, "name": "x", "pid": 1.5}]),
    _doc([_STEP, {**_STEP, "name": "x", "args": [1]}]),
    _doc([_STEP, {**_STEP, "name": "x", "args": {"correlation": 2**80, "External id": "7"}}]),
    _doc([_STEP, {**_STEP, "name": "x", "args": {"bytes": -5, "Sequence number": " 12 "}}]),
    _doc([_STEP, 3, "s", None, {**_STEP, "name": None}, {**_STEP, "name": "y", "dur": -1.25},
          {**_STEP, "name": "z", "ts": None}, {**_STEP, "cat": "Kernel", "name": "k", "ts": 5}]),
    b'{"traceEvents": [' + json.dumps(_STEP).encode() + b'], "traceEvents": []}',
    b'[{"ph": "X", "ph": "X", "cat": "cpu_op", "name": "ProfilerStep#1", "ts": 0, "dur": 1, "pid": 1, "tid": 1}]',
    gzip.compress(gzip.compress(_doc([_STEP]))),
    b'[{"ph": "\\u0058", "cat": "CPU_op", "name": "Profiler\\u0053tep#1", "ts": 0.0005, "dur": 2.5e1, '
    b'"pid": "1", "tid": "stream 3", "args": {"External id": null, "external id": 4}}]',
], ids=lambda r: repr(r[:40]))
def test_bad_or_odd_input_same_outcome(raw):
    assert_same_outcome("bad.json", raw)


# ---- random documents ------------------------------------------------------------------------

_scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**65, 2**65), st.integers(-5, 5),
                     st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=4),
                     st.sampled_from(["7", " 8 ", "1_0", "x", "-3", "stream 2", "1.5"]))
_values = st.one_of(_scalars, st.lists(st.integers(-3, 70), max_size=3),
                    st.lists(st.lists(st.integers(0, 9), max_size=3), max_size=3), st.dictionaries(st.text(max_size=2), st.integers(), max_size=1))
_ts = st.one_of(st.integers(0, 10**6), st.floats(0, 1e7, allow_nan=False), st.floats(-1e16, 1e16), _values)
_args = st.fixed_dictionaries({}, optional={
    k: _values for k in ("correlation", "External id", "external id", "bytes", "device", "stream",
                         "Sequence number", "In msg nelems", "dtype", "flops", "Concrete Inputs", "name")
} | {"Input Dims": st.lists(st.lists(st.integers(0, 64), max_size=3), max_size=3),
     "Input type": st.lists(st.sampled_from(["float", "c10::Half", "Scalar", "long int", "double"]), max_size=3)})
_names = st.one_of(st.sampled_from(["aten::mm", "aten::addmm", "ProfilerStep#3", "cudaLaunchKernel",
                                    "ncclKernel_AllReduce", "cudaDeviceSynchronize", "thread_name", "aten::conv2d",
                                    "Optimizer.step#SGD.step", "nn.Module: fc", "a\u00e9\u4e2d\"\\"]), st.text(max_size=3))
_cats = st.sampled_from(["cpu_op", "cuda_runtime", "Kernel", "gpu_memcpy", "user_annotation", "fwdbwd",
                         "gpu_user_annotation", "Runtime", "other", "CPU_OP"])
_ids = st.one_of(st.integers(-3, 3), st.sampled_from(["7", " 8 ", "stream 2", "x", "-3", "GPU 1"]))
_small = st.one_of(st.none(), st.integers(-2, 2**53), st.floats(-1e6, 1e6), st.sampled_from(["7", " 8 ", "x", "1.5", ""]),
                   st.lists(st.integers(0, 3), max_size=2))
_typed_args = st.fixed_dictionaries({}, optional={
    **{k: _small for k in ("correlation", "External id", "external id", "bytes", "device", "stream",
                           "Sequence number", "In msg nelems", "flops", "name")},
    "dtype": st.sampled_from(["Float", "half", "int64", "x", None]),
    "Concrete Inputs": st.lists(st.sampled_from(["", "[1, 1]", "[2, 2]", "3"]), max_size=6),
    "Input Dims": st.lists(st.lists(st.integers(0, 64), max_size=4), max_size=3),
    "Input type": st.lists(st.sampled_from(["float", "c10::Half", "Scalar", "long int", "double"]), max_size=3)})
#: Well-typed events, as profilers write them (values vary: floats, missing fields, odd strings).
_typical = st.fixed_dictionaries({"ph": st.sampled_from(["X", "X", "X", "s", "f", "M"]), "cat": _cats,
                                  "name": _names, "ts": st.one_of(st.integers(0, 10**6), st.floats(0, 1e7)),
                                  "pid": _ids, "tid": _ids},
                                 optional={"dur": st.one_of(st.integers(-5, 10**4), st.floats(-10, 1e4)),
                                           "id": st.one_of(st.integers(0, 5), st.floats(0, 5), _small),
                                           "args": st.one_of(_typed_args, st.none())})
#: Anything in any field.
_wild = st.fixed_dictionaries({"ph": st.sampled_from(["X", "X", "X", "s", "f", "M", "i"])}, optional={
    "cat": _cats, "name": st.one_of(_names, _values), "ts": _ts, "dur": _ts, "pid": _values, "tid": _values,
    "id": _values, "args": st.one_of(_args, _values)})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_typical, max_size=10))
def test_random_typical_documents_same_outcome(events):
    raw = json.dumps({"traceEvents": [_STEP, *events]}).encode()
    assert_same_outcome("r.json", raw)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(_typical, _wild), max_size=6))
def test_random_wild_documents_same_outcome(events):
    raw = json.dumps({"traceEvents": [_STEP, *events]}).encode()
    assert_same_outcome("r.json", raw)


def test_truncations_and_mutations_never_crash():
    src = OWN[0] if OWN else pytest.skip("no own traces")
    raw = inflate(str(src), src.read_bytes())
    raw = raw[: 60_000] if len(raw) > 60_000 else raw
    rng = random.Random(6)
    cases = [raw[: rng.randrange(len(raw))] for _ in range(20)]
    for _ in range(20):
        b = bytearray(raw)
        for _ in range(rng.randrange(1, 4)):
            b[rng.randrange(len(b))] = rng.choice(b'{}[]":,\\0123456789-.eE \x00\xff\xc3')
        cases.append(bytes(b))
    for data in cases:
        out = outcome(lambda: fast.load_rank_bytes("m.json", data))
        assert isinstance(out, (str, RankTrace))   # a clear error or a trace, never a crash
    for data in cases[::5]:
        assert_same_outcome("m.json", data)


def test_disabled_by_environment(monkeypatch):
    monkeypatch.setenv("DAYDREAM_FAST_LOADER", "0")
    assert fast.available() and not fast.enabled()
    monkeypatch.setenv("DAYDREAM_FAST_LOADER", "1")
    assert fast.enabled()


def test_scanner_rejects_non_bytes():
    with pytest.raises((TypeError, ValueError)):
        fast._kineto.scan(np.zeros(3, np.int64))


# ---- compiled CPU self-time slices (graph/build.py) ----------------------------------------------

@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 30), st.booleans()), max_size=40))
def test_cpu_slices_equal_to_python(events):
    from daydream.graph.build import _cpu_slices

    start = np.array([e[0] for e in events], np.int64)
    dur = np.array([e[1] if e[2] else 0 for e in events], np.int64)
    order = np.lexsort((-dur, start))
    start, end = start[order], (start + dur)[order]
    idx = np.arange(0, len(events), 1 + len(events) % 3, dtype=np.int64)   # not every row is a task
    got, ref = fast._kineto.cpu_slices(idx, start, end), _cpu_slices(idx, start, end)
    for g, r in zip(got, ref):
        assert g.dtype == r.dtype and np.array_equal(g, r)


def test_cpu_slices_exact_small_case():
    # op 0 [0, 10) encloses op 1 [2, 5) and zero-length op 2 at 6: slices 0:[0,2) 1:[2,5) 0:[5,6) 2:[6,6) 0:[6,10)
    start, end = np.array([0, 2, 6], np.int64), np.array([10, 5, 6], np.int64)
    ev, s, e = fast._kineto.cpu_slices(np.arange(3, dtype=np.int64), start, end)
    assert list(zip(ev.tolist(), s.tolist(), e.tolist())) == [(0, 0, 2), (1, 2, 5), (0, 5, 6), (2, 6, 6), (0, 6, 10)]
    with pytest.raises(IndexError):
        fast._kineto.cpu_slices(np.array([3], np.int64), start, end)


def test_graph_identical_with_python_slices(monkeypatch):
    from daydream.graph import build, build_graph
    from daydream.loader import load_trace

    if not OWN:
        pytest.skip("no own traces")
    trace = load_trace(OWN[-1])
    g_fast = build_graph(trace)
    monkeypatch.setattr(build, "_compiled_cpu_slices", None)
    g_ref = build_graph(load_trace(OWN[-1]))
    assert g_fast.n_tasks == g_ref.n_tasks and g_fast.n_edges == g_ref.n_edges
    for k in g_ref.tasks:
        assert np.array_equal(g_fast.tasks[k], g_ref.tasks[k]), k
    for k in g_ref.edges:
        assert np.array_equal(g_fast.edges[k], g_ref.edges[k]), k
