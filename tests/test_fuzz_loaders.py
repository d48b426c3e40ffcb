"""Fuzzing every loader (short run; ``benchmarks/fuzz_loaders.py`` runs 10,000 cases per loader).

Every generated input must end in a :class:`~daydream.errors.DaydreamError`
(one line) or be accepted with its repairs counted and the invariants holding
(see ``check_invariants``): never another exception, a hang, or a traceback.
"""
from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daydream import primitives as P
from daydream.errors import CycleError, DaydreamError, GraphError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import fuzz_loaders as F  # noqa: E402

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)

_json_scalars = (st.none() | st.booleans() | st.integers(-2**80, 2**80) | st.floats(allow_nan=True)
                 | st.text(max_size=12))
json_values = st.recursive(_json_scalars, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=6), c, max_size=4),
                           max_leaves=10)


@pytest.fixture(scope="module")
def corpus():
    return F.Corpus.build(real=False)


def _accepts_or_one_line_error(loader, case):
    out = F.run_case(loader, case, timeout_s=F.CASE_TIMEOUT_S)
    assert not out.bad, f"{loader}: {out.status}\n{out.detail}"
    if out.status.startswith("error:"):
        assert out.detail and "\n" not in out.detail
    return out


@FUZZ
@given(st.binary(max_size=300))
def test_random_bytes(raw):
    _accepts_or_one_line_error("bytes", raw)


@FUZZ
@given(st.integers(0, 2**32), st.data())
def test_truncated_and_flipped_bytes(seed, data):
    raw = json.dumps(F.small_doc(2)).encode()
    _accepts_or_one_line_error("bytes", F.mutate_bytes(random.Random(seed), raw))
    cut = data.draw(st.integers(0, len(raw)))
    _accepts_or_one_line_error("bytes", raw[:cut])


@FUZZ
@given(st.integers(0, 60), st.sampled_from(F.EVENT_FIELDS + tuple("args." + a for a in F.ARG_FIELDS)),
       json_values | st.just(float("inf")) | st.just(-1e300))
def test_any_value_in_any_field(index, key, value):
    """Wrong types, negative, huge and non-finite values at every field of every event."""
    doc = F.small_doc(3)
    ev = doc["traceEvents"][index % len(doc["traceEvents"])]
    if key.startswith("args."):
        if not isinstance(ev.get("args"), dict):
            ev["args"] = {}
        ev["args"][key[5:]] = value
    else:
        ev[key] = value
    _accepts_or_one_line_error("pipeline", [doc])


@FUZZ
@given(json_values)
def test_any_document(value):
    _accepts_or_one_line_error("kineto", value if isinstance(value, dict) else {"traceEvents": value})


@FUZZ
@given(st.integers(0, 2**32))
def test_field_mutations(corpus, seed):
    _accepts_or_one_line_error("kineto", F.gen_kineto(random.Random(seed), corpus))


@FUZZ
@given(st.integers(0, 2**32))
def test_multi_rank_with_clock_skew_replays(corpus, seed):
    _accepts_or_one_line_error("pipeline", F.multi_rank_docs(random.Random(seed), F.small_doc(2)))


@settings(FUZZ, max_examples=25)
@given(st.integers(0, 2**32))
def test_damaged_archives(corpus, seed):
    _accepts_or_one_line_error("tar", F.gen_tar(random.Random(seed), corpus))


@settings(FUZZ, max_examples=40)
@given(st.integers(0, 2**32))
def test_fast_loader_agrees_or_errs(corpus, seed):
    if F.fast_loader() is None:
        pytest.skip("compiled fast loader not built")
    _accepts_or_one_line_error("fast", F.gen_fast(random.Random(seed), corpus))


@pytest.mark.parametrize("loader", [n for n in F.LOADERS if n != "fast" or F.fast_loader() is not None])
def test_seeded_generator_short_run(loader):
    """The benchmark's own generator, a short run per loader (real traces included)."""
    t = F.fuzz(loader, 30, seed=7, corpus=F.Corpus.build(real=True))
    assert t.cases == 30 and not t.crashes, t.crashes[:1]


# ----------------------------------------------------------------- edits
@pytest.fixture(scope="module")
def graph():
    from daydream.graph import build_graph

    return build_graph(F._load_docs([F.small_doc(2)]))


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(["dep", "scale", "dur", "remove"]), st.integers(-3, 60),
                          st.integers(-3, 60), st.sampled_from([0.0, 0.5, 3.0, -1.0, math.nan, math.inf])),
                max_size=6))
def test_user_edits(graph, ops):
    """Edits either apply or are refused with a GraphError; the result always simulates."""
    from daydream.sim import simulate

    g = graph.copy()
    for op, a, b, f in ops:
        try:
            if op == "dep":
                P.add_dependency(g, a, b)
            elif op == "scale":
                P.scale(g, [a], f)
            elif op == "dur":
                P.set_duration(g, [a], f * 1000)
            else:
                P.remove(g, [a])
        except CycleError as exc:
            assert exc.tasks and all(f"#{t}" in str(exc) for t in exc.tasks[:2])
        except GraphError as exc:
            assert "\n" not in str(exc)
    P.check_acyclic(g)
    res = simulate(g)
    assert (res.end_ns >= res.start_ns).all() and (g.tasks["dur_ns"] >= 0).all()


def test_cycle_is_refused_naming_both_tasks(graph):
    g = graph.copy()
    cpu = next(li for li, ln in enumerate(g.lanes) if len(g.lane_tasks[li]) > 3)
    first, later = g.lane_tasks[cpu][1], g.lane_tasks[cpu][3]
    with pytest.raises(CycleError) as info:
        P.add_dependency(g, later, first)
    assert info.value.tasks == (later, first)
    assert f"#{later} {g.task_name(later)!r}" in str(info.value)
    n_edges = len(g.edges["src"])
    P.add_dependency(g, first, later)          # the forward edge is fine
    assert len(g.edges["src"]) == n_edges + 1


@pytest.mark.parametrize("call", [
    lambda g: P.add_dependency(g, -1, 0),
    lambda g: P.set_duration(g, [g.n_tasks], 5),
    lambda g: P.scale(g, [0], float("nan")),
    lambda g: P.scale(g, [int(np.argmax(g.tasks["dur_ns"]))], 1e30),
    lambda g: P.remove(g, [-1]),
    lambda g: P.set_priority(g, [10**9], 1),
    lambda g: P.scale(g, [0.5], 2.0),
])
def test_bad_edit_arguments_are_one_line_graph_errors(graph, call):
    g = graph.copy()
    before = g.tasks["dur_ns"].copy()
    with pytest.raises(GraphError) as info:
        call(g)
    assert "\n" not in str(info.value)
    assert np.array_equal(g.tasks["dur_ns"], before)      # nothing half-applied


def test_run_case_classifies_errors_crashes_and_hangs(monkeypatch):
    def boom(case):
        if case == "hang":
            while True:
                pass
        if case == "crash":
            raise KeyError("x")
        raise DaydreamError("one line")

    monkeypatch.setitem(F.LOADERS, "probe", (boom, None))
    assert F.run_case("probe", "err").status == "error:DaydreamError"
    assert F.run_case("probe", "crash").status == "crash"
    assert F.run_case("probe", "hang", timeout_s=0.2).status == "hang"
