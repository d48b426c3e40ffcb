"""Graph construction from traces: tasks, edges, offsets, and how edits propagate."""
from __future__ import annotations

import numpy as np
import pytest

from daydream.graph import EdgeKind, build_graph
from daydream.graph.graph import WaitKind
from daydream.loader import load_rank
from daydream.model import EventKind, Trace
from daydream.sim import simulate


def _x(cat, name, us, dur_us, tid=1, pid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": us, "dur": dur_us, "args": args}


def gpu_bound_doc():
    """CPU launches k1, k2 quickly; k2 queues behind k1; a stream sync waits for k2."""
    return {"traceEvents": [
        _x("user_annotation", "ProfilerStep#1", 0, 200),
        _x("cpu_op", "aten::mm", 1, 6),
        _x("cuda_runtime", "cudaLaunchKernel", 2, 4, correlation=1),
        _x("cpu_op", "aten::mm", 8, 6),
        _x("cuda_runtime", "cudaLaunchKernel", 9, 4, correlation=2),
        _x("cuda_runtime", "cudaStreamSynchronize", 15, 150, correlation=3),
        _x("cpu_op", "aten::add", 170, 10),
        _x("kernel", "k1", 5, 100, pid=0, tid=7, correlation=1, device=0, stream=7),
        _x("kernel", "k2", 106, 50, pid=0, tid=7, correlation=2, device=0, stream=7),
    ]}


def build(doc):
    return build_graph(Trace([load_rank("t.json", doc)]))


def task(g, name):
    (i,) = [t for t in range(g.n_tasks) if g.task_name(t) == name]
    return i


def test_tasks_are_self_time_slices_and_markers():
    g = build(gpu_bound_doc())
    names = [g.task_name(t) for t in g.lane_tasks[0]]
    assert names == ["iteration boundary", "aten::mm", "cudaLaunchKernel", "aten::mm",
                     "aten::mm", "cudaLaunchKernel", "aten::mm",
                     "cudaStreamSynchronize", "aten::add", "iteration boundary"]
    durs = [int(g.tasks["dur_ns"][t]) for t in g.lane_tasks[0][1:4]]
    assert durs == [1_000, 4_000, 1_000]             # mm's own time before and after its launch
    sync = task(g, "cudaStreamSynchronize")
    assert g.tasks["kind"][sync] == EventKind.SYNC
    assert g.tasks["wait_kind"][sync] == WaitKind.STREAM
    assert set(g.edges["kind"].tolist()) == {EdgeKind.LAUNCH}


def test_binding_constraints_keep_offsets_others_relax():
    g = build(gpu_bound_doc())
    k2 = task(g, "k2")
    # k2 was released by its stream (1 us after k1), not by its launch (97 us before)
    assert g.tasks["gap_ns"][k2] == 1_000
    launch_lags = dict(zip(g.edges["dst"].tolist(), g.edges["lag_ns"].tolist()))
    assert launch_lags[task(g, "k1")] == 3_000      # k1 waited for its launch: exact
    assert launch_lags[k2] <= 3_000                  # relaxed to the trace's natural launch lag


def test_shrinking_a_queued_kernel_moves_everything_after_it():
    g = build(gpu_bound_doc())
    base = simulate(g)
    assert (base.start_ns == g.tasks["traced_start_ns"]).all()
    k1 = task(g, "k1")
    g2 = g.copy()
    g2.tasks["dur_ns"][k1] //= 2                      # k1 twice as fast: 50 us saved
    res = simulate(g2)
    after = task(g, "aten::add")
    assert base.start_ns[after] - res.start_ns[after] == 50_000
    it0 = res.iterations()[0]
    assert it0.measured_ns[0] - it0.simulated_ns[0] == 50_000


def test_cpu_bound_kernel_does_not_move_when_gpu_gets_faster():
    doc = gpu_bound_doc()
    # make the CPU slow: second launch only after k1 is long done
    doc["traceEvents"][3] = _x("cpu_op", "aten::mm", 120, 6)
    doc["traceEvents"][4] = _x("cuda_runtime", "cudaLaunchKernel", 121, 4, correlation=2)
    doc["traceEvents"][5] = _x("cuda_runtime", "cudaStreamSynchronize", 127, 60, correlation=3)
    doc["traceEvents"][-1] = _x("kernel", "k2", 124, 50, pid=0, tid=7, correlation=2, device=0, stream=7)
    g = build(doc)
    base = simulate(g)
    g2 = g.copy()
    g2.tasks["dur_ns"][task(g, "k1")] //= 2
    res = simulate(g2)
    k2 = task(g, "k2")
    assert res.start_ns[k2] == base.start_ns[k2]      # still waits for its launch


def test_to_networkx_has_every_edge_kind_present():
    g = build(gpu_bound_doc())
    G = g.to_networkx()
    kinds = {d["kind"] for _, _, d in G.edges(data=True)}
    assert kinds == {"lane", "launch"}
    assert G.number_of_edges() == sum(max(len(s) - 1, 0) for s in g.lane_tasks) + g.n_edges
    assert np.all([G.nodes[t]["dur_ns"] >= 0 for t in G.nodes])


def test_pageable_async_copy_blocks_its_call():
    doc = {"traceEvents": [
        _x("user_annotation", "ProfilerStep#1", 0, 100),
        _x("cuda_runtime", "cudaLaunchKernel", 1, 2, correlation=1),
        _x("cuda_runtime", "cudaMemcpyAsync", 4, 60, correlation=2),
        _x("cpu_op", "aten::add", 70, 5),
        _x("kernel", "k1", 3, 50, pid=0, tid=7, correlation=1, device=0, stream=7),
        _x("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 54, 9, pid=0, tid=7, correlation=2, device=0,
           stream=7),
    ]}
    g = build(doc)
    copy, call = task(g, "Memcpy HtoD (Pageable -> Device)"), task(g, "cudaMemcpyAsync")
    assert (copy, call) in set(zip(g.edges["src"].tolist(), g.edges["dst"].tolist()))
    g2 = g.copy()
    g2.tasks["dur_ns"][task(g, "k1")] //= 2          # the copy queues behind k1: the call returns 25 us earlier
    res, base = simulate(g2), simulate(g)
    assert base.end_ns[call] - res.end_ns[call] == 25_000


def _columns_equal(a, b):
    for table in ("tasks", "edges"):
        ta, tb = getattr(a, table), getattr(b, table)
        assert ta.keys() == tb.keys()
        for k in ta:
            np.testing.assert_array_equal(ta[k], tb[k], err_msg=f"{table}.{k}")
    assert a.lane_tasks == b.lane_tasks and a.names.strings == b.names.strings
    assert a.origin_ns == b.origin_ns and a.repairs == b.repairs and a.markers == b.markers
    np.testing.assert_array_equal(a.group_transfer_ns, b.group_transfer_ns)
    for r in a.measured_boundaries_ns:
        np.testing.assert_array_equal(a.measured_boundaries_ns[r], b.measured_boundaries_ns[r])


def test_building_ranks_as_they_load_gives_the_same_graph(shared_dir, monkeypatch):
    """trace_and_graph (each rank built while workers parse the next) == load, then build_graph."""
    from daydream.analysis import trace_and_graph
    from daydream.loader import load_trace

    import daydream.loader as loader
    monkeypatch.setattr(loader, "PARALLEL_MIN_BYTES", 0)     # two worker processes even for small files
    paths = sorted((shared_dir / "HolisticTraceAnalysis").glob("sampled_rank-*.json.gz"))
    trace, g = trace_and_graph(paths)
    ref = build_graph(load_trace(paths, workers=1))
    assert len(trace) == 2 and g.n_tasks > 1000 and len(g.group_transfer_ns) > 0
    _columns_equal(g, ref)
    np.testing.assert_array_equal(simulate(g).end_ns, simulate(ref).end_ns)


def test_builder_refuses_a_rank_twice():
    from daydream.errors import TraceError
    from daydream.graph import GraphBuilder

    r = load_rank("t.json", gpu_bound_doc())
    b = GraphBuilder()
    b.add_rank(r)
    with pytest.raises(TraceError, match="rank 0 given twice"):
        b.add_rank(r)
