"""Property tests (hypothesis): simulator invariants and exact unedited replay."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daydream.graph import build_graph
from daydream.graph.graph import Anchor, EdgeKind
from daydream.loader import load_rank
from daydream.model import LaneKind, Trace
from daydream.sim import simulate

from conftest import GraphMaker

# ------------------------------------------------------------ random graphs


@st.composite
def random_graphs(draw):
    m = GraphMaker()
    kinds = draw(st.lists(st.sampled_from([LaneKind.CPU_THREAD, LaneKind.GPU_STREAM]), min_size=1, max_size=4))
    lanes = [m.lane(k) for k in kinds]
    n = draw(st.integers(1, 25))
    tasks = []
    for _ in range(n):
        lane = draw(st.sampled_from(lanes))
        tasks.append(m.task(lane, draw(st.integers(0, 50)), gap=draw(st.integers(0, 10))))
    for dst in range(1, n):
        for src in draw(st.lists(st.integers(0, dst - 1), max_size=2, unique=True)):
            m.edge(src, dst, EdgeKind.DATA, lag=draw(st.integers(-5, 20)),
                   anchor=draw(st.sampled_from([Anchor.START, Anchor.END])),
                   target=draw(st.sampled_from([Anchor.START, Anchor.START, Anchor.END])))
    return m.g


@settings(max_examples=150, deadline=None)
@given(random_graphs())
def test_dependencies_lanes_and_tightness(g):
    res = simulate(g)
    s, e = res.start_ns, res.end_ns
    T, E = g.tasks, g.edges
    assert (e >= s + T["dur_ns"]).all()
    lower = np.zeros(g.n_tasks, np.int64)           # earliest start allowed by lane + edges
    for seq in g.lane_tasks:
        prev = 0
        for t in seq:
            assert s[t] >= prev + T["gap_ns"][t]     # one task at a time, gap kept
            lower[t] = prev + T["gap_ns"][t]
            prev = e[t]
    for src, dst, a, tg, lag in zip(E["src"], E["dst"], E["anchor"], E["target"], E["lag_ns"]):
        at = (s[src] if a == Anchor.START else e[src]) + lag
        if tg == Anchor.START:
            assert s[dst] >= at
            lower[dst] = max(lower[dst], at)
        else:
            assert e[dst] >= at
    assert (s == lower).all()                       # nothing starts later than it must


# ---------------------------------------------------- synthetic Kineto traces

BASE_US = 1_000_000.0


def _x(cat, name, ns, dur_ns, pid, tid, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid,
            "ts": BASE_US + ns / 1000.0, "dur": dur_ns / 1000.0, "args": args}


@st.composite
def kineto_docs(draw):
    """A physically consistent single-thread trace with launches, queues and syncs."""
    ev, t, corr = [], 0, 1
    stream_free = {7: 0, 8: 0}
    last_on = {7: None, 8: None}
    steps = draw(st.integers(1, 4))
    for step in range(steps):
        step_start = t
        ops = draw(st.integers(1, 8))
        for _ in range(ops):
            t += draw(st.integers(0, 30_000))
            op_start = t
            what = draw(st.sampled_from(["cpu", "launch", "launch", "ssync", "dsync"]))
            t += draw(st.integers(0, 5_000))
            if what == "cpu":
                t += draw(st.integers(1, 20_000))
            elif what == "launch":
                stream = draw(st.sampled_from([7, 8]))
                call_dur = draw(st.integers(1_000, 8_000))
                k_start = max(t + draw(st.integers(500, 6_000)), stream_free[stream] + draw(st.integers(0, 2_000)))
                k_dur = draw(st.integers(1_000, 80_000))
                ev.append(_x("cuda_runtime", "cudaLaunchKernel", t, call_dur, 1, 1, correlation=corr))
                ev.append(_x("kernel", f"k{corr}", k_start, k_dur, 0, stream, device=0, stream=stream,
                             correlation=corr))
                stream_free[stream] = k_start + k_dur
                last_on[stream] = corr
                corr += 1
                t += call_dur
            else:
                busy = [stream_free[s] for s in (7, 8) if last_on[s] is not None]
                if what == "ssync":
                    busy = [stream_free[s] for s in (7, 8) if last_on[s] == corr - 1] or busy[:1]
                done = max([t + draw(st.integers(500, 3_000))] + [b + draw(st.integers(0, 4_000)) for b in busy])
                name = "cudaStreamSynchronize" if what == "ssync" else "cudaDeviceSynchronize"
                ev.append(_x("cuda_runtime", name, t, done - t, 1, 1, correlation=corr))
                corr += 1
                t = done
            t += draw(st.integers(0, 5_000))
            ev.append(_x("cpu_op", "aten::op", op_start, t - op_start, 1, 1))
        t += draw(st.integers(0, 10_000))
        ev.append(_x("user_annotation", f"ProfilerStep#{step}", step_start, t - step_start, 1, 1))
    return {"traceEvents": ev}


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kineto_docs())
def test_unedited_replay_equals_input_schedule(doc):
    trace = Trace([load_rank("synthetic.json", doc)])
    g = build_graph(trace)
    res = simulate(g)
    assert g.repairs == {}
    assert (res.start_ns == g.tasks["traced_start_ns"]).all()
    it = res.iterations()[0]
    assert (it.simulated_ns == it.measured_ns).all()


# ------------------------------------------------------------ edits keep invariants


@settings(max_examples=100, deadline=None)
@given(random_graphs(), st.data())
def test_removing_tasks_keeps_a_valid_schedule(g, data):
    from daydream.primitives import check_acyclic, remove

    doomed = data.draw(st.lists(st.integers(0, g.n_tasks - 1), max_size=max(g.n_tasks // 2, 1), unique=True))
    before = simulate(g)
    remove(g, doomed)
    check_acyclic(g)                                 # bridging never closes a cycle
    res = simulate(g)
    assert g.n_tasks == len(before.start_ns) - len(doomed)
    T, E = g.tasks, g.edges
    for seq in g.lane_tasks:                         # lanes still serial, gaps kept
        for a, b in zip(seq, seq[1:]):
            assert res.start_ns[b] >= res.end_ns[a] + T["gap_ns"][b]
    for src, dst, a, tg, lag in zip(E["src"], E["dst"], E["anchor"], E["target"], E["lag_ns"]):
        at = (res.start_ns[src] if a == Anchor.START else res.end_ns[src]) + lag
        assert (res.start_ns[dst] if tg == Anchor.START else res.end_ns[dst]) >= at
