"""Placing CUPTI records on the CPU trace's clock and threads (daydream.cupti_align).

The clock and thread maps need no extension; the collector test builds real
activity records in memory with ``daydream._cupti.SyntheticBuffer`` and a
CUPTI clock that ticks twice per ns with an offset, as a TSC source would.
"""
from __future__ import annotations

import json
import time

import numpy as np
import pytest

from daydream import cupti
from daydream.cupti_align import (MIN_SCALE_SPAN_NS, ClockMap, ClockSample, clock_sample,
                                  current_thread_pair, map_threads, pick_clock)

_ext, _why = cupti.load_extension()


def test_clock_map_through_two_samples_keeps_ns_precision_at_unix_magnitudes():
    u0 = 1_795_567_387_640_237_571
    m = ClockMap.fit([ClockSample(3 * u0, u0, 40), ClockSample(3 * u0 + 3 * 10**9, u0 + 10**9, 60)])
    assert m.scale == pytest.approx(1 / 3) and m.error_ns == 60 and m.samples == 2
    base = u0 - 5_000
    assert m.since(base, 3 * u0 + 3 * 7).tolist() == 5_007.0
    assert m.since(base, np.array([3 * u0 + 3 * 10**6], dtype=np.uint64)).tolist() == [10**6 + 5_000.0]


def test_clock_map_of_close_samples_is_an_offset_and_no_samples_the_identity():
    m = ClockMap.fit([ClockSample(100, 1_100, 1), ClockSample(100 + MIN_SCALE_SPAN_NS - 1, 5, 1)])
    assert m.scale == 1.0 and float(m.since(0, 100)) == 1_100.0
    assert float(ClockMap.fit([]).since(0, 123)) == 123.0


def test_clock_sample_brackets_the_reading():
    before = time.time_ns()
    s = clock_sample(time.time_ns)
    after = time.time_ns()
    assert before <= s.unix_ns <= after and abs(s.cupti_ns - s.unix_ns) <= s.error_ns
    assert s.error_ns >= 1


def test_map_threads_prefers_known_pairs_then_containment():
    ops = {11: (np.array([0.0, 100.0]), np.array([50.0, 200.0])),
           12: (np.array([300.0]), np.array([400.0]))}
    tid = np.array([1, 2, 2, 3, 3, 4])
    start = np.array([10.0, 110.0, 310.0, 120.0, 500.0, 900.0])
    end = np.array([20.0, 120.0, 320.0, 130.0, 510.0, 910.0])
    got = map_threads(tid, start, end, ops, known={1: 99})
    # 1: known; 2: one call in each thread's ops, the first best wins; 3: half inside 11;
    # 4: inside nothing, stays unmapped
    assert got == {1: 99, 2: 11, 3: 11}
    # a call that starts inside an op but ends after it is not contained
    assert map_threads(np.array([5]), np.array([40.0]), np.array([60.0]), ops) == {}


def test_pick_clock_keeps_the_first_candidate_when_nothing_tells_them_apart():
    ops = {7: (np.array([1_000.0]), np.array([2_000.0]))}
    clocks = {"first": ClockMap(), "second": ClockMap(2.0)}
    call = (np.array([9]), np.array([5_000]), np.array([5_100]))
    # the known thread's call lies inside no op under either clock: a tie
    assert pick_clock(clocks, *call, ops, {9: 7})[::2] == ("first", 0.0)
    # no call of a known thread at all: nothing to score
    name, _, share = pick_clock(clocks, *call, ops, {8: 7})
    assert name == "first" and np.isnan(share)


def test_pick_clock_scores_only_the_calls_of_the_recorded_window():
    # ops of the known thread: one in warm-up time, one in the recorded window (from 900 ns on)
    ops = {7: (np.array([250.0, 1_000.0]), np.array([400.0, 2_000.0]))}
    clocks = {"first": ClockMap(), "second": ClockMap(2.0)}
    # a warm-up call (300-350 raw) nests in the warm-up op only under "first"; the window's
    # call (600-700 raw) nests in the window's op only under "second", the records' clock
    call = (np.array([9, 9]), np.array([300, 600]), np.array([350, 700]))
    assert pick_clock(clocks, *call, ops, {9: 7})[::2] == ("first", 0.5)       # a tie, the wrong clock
    assert pick_clock(clocks, *call, ops, {9: 7}, after_ns=900.0)[::2] == ("second", 1.0)


def test_default_clocks_try_cuptis_own_first_then_torchs_approximate_clock():
    from daydream.cupti_export import default_clocks

    clocks = default_clocks()
    assert clocks["cupti"] is cupti.timestamp_ns
    from torch._C import _profiler

    if not hasattr(_profiler, "_get_approximate_time"):      # torch builds without it (2.11 + CUDA 13)
        assert list(clocks) == ["cupti"]
        return
    assert list(clocks) == ["cupti", "torch approximate clock"]
    a, b = clocks["torch approximate clock"](), clocks["torch approximate clock"]()
    assert 0 < a <= b


@pytest.mark.skipif(_ext is None, reason=f"daydream._cupti not available: {_why}")
def test_collector_puts_records_on_the_documents_clock_and_threads():
    def ticks(unix_ns):            # a CUPTI source ticking twice per ns
        return 2 * unix_ns + 12_345

    t0 = time.time_ns()
    me_cupti, me_native = current_thread_pair()
    buf = _ext.SyntheticBuffer()
    buf.add_api(cbid=211, start_ns=ticks(t0 + 1_000), end_ns=ticks(t0 + 3_000), correlation_id=1,
                thread_id=me_cupti)
    buf.add_kernel(start_ns=ticks(t0 + 10_000), end_ns=ticks(t0 + 14_000), correlation_id=1, name="k")
    buf.add_api(cbid=211, start_ns=ticks(t0 + 20_000), end_ns=ticks(t0 + 21_000), correlation_id=2,
                thread_id=777)

    class Tracer:
        def start(self):
            pass

        def stop(self):
            return cupti.decode(buf)

    # a decoy clock first: the records are not stamped with it, and the calls do not nest under it
    col = cupti.CuptiKernelCollector(tracer=Tracer(), clocks={"decoy": time.time_ns,
                                                              "ticks": lambda: ticks(time.time_ns())})
    col.start()
    time.sleep(0.005)          # more than MIN_SCALE_SPAN_NS of CUPTI time between the samples
    col.stop()
    base = t0 - 2_000_000      # Kineto's baseTimeNanoseconds: ts are µs since it
    doc = {"baseTimeNanoseconds": base, "traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 1, "tid": me_native, "ts": 2_000.5, "dur": 3.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 4242, "ts": 2_019.5, "dur": 2.0}]}
    events = {e["name"] if e["cat"] == "kernel" else e["args"]["correlation"]: e
              for e in col.chrome_events(doc)}
    err_us = col.alignment["clock"]["error_ns"] / 1e3 + 0.01
    assert events["k"]["ts"] == pytest.approx(2_010.0, abs=err_us)
    assert events["k"]["dur"] == pytest.approx(4.0, rel=0.01)
    assert events[1]["tid"] == me_native and events[1]["ts"] == pytest.approx(2_001.0, abs=err_us)
    assert events[2]["tid"] == 4242                      # found by containment
    assert col.alignment["clock"]["scale"] == pytest.approx(0.5, rel=1e-3)
    assert col.alignment["clock"]["source"] == "ticks" and col.alignment["clock"]["calls_inside_ops"] == 1.0
    assert col.alignment["unmapped_threads"] == []
    # without the CPU side nothing tells the clocks apart: the first is kept, and the metadata stays JSON
    col.chrome_events()
    assert col.alignment["clock"]["source"] == "decoy" and col.alignment["clock"]["calls_inside_ops"] is None
    json.dumps(col.alignment, allow_nan=False)


@pytest.mark.skipif(_ext is None, reason=f"daydream._cupti not available: {_why}")
def test_a_cupti_trace_merges_into_one_graph_with_its_cpu_ops(tmp_path, monkeypatch):
    """End to end without a GPU: a real traced CPU run whose "launches" (inside a module's
    forward on this thread, and inside backward ops under an unknown CUPTI thread id) come
    back as CUPTI records on a clock ticking twice per ns; the written trace loads, every
    kernel is launched by a runtime call on the CPU ops' thread, and takes the module's layer."""
    import os
    import threading

    import torch
    from torch import nn

    from daydream import trace
    from daydream.analysis import trace_and_graph
    from daydream.collect import tracer as tracer_mod
    from daydream.collect.activities import ActivityPlan, CudaSource
    from daydream.graph import EdgeKind
    from daydream.model import EventKind, LaneKind

    def ticks():
        return 2 * time.time_ns() + 12_345

    launches = []                       # (CUPTI thread id, start, end) in CUPTI ticks

    def launch(tid):
        t0 = ticks()
        while ticks() - t0 < 4_000:     # a 2 us "cudaLaunchKernel"
            pass
        launches.append((tid, t0, ticks()))

    class Launch(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            launch(threading.get_ident() & 0xFFFFFFFF)
            return x * 1.0

        @staticmethod
        def backward(ctx, g):
            launch(0xDEAD)              # a thread CUPTI names and nothing else does
            return g * 1.0

    class Launcher(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 8)

        def forward(self, x):
            return Launch.apply(self.lin(x))

    class Tracer:
        def start(self):
            launches.clear()

        def stop(self):
            buf = _ext.SyntheticBuffer()
            for c, (tid, s, e) in enumerate(launches, start=1):
                buf.add_api(cbid=211, start_ns=s, end_ns=e, correlation_id=c, process_id=os.getpid(),
                            thread_id=tid)
                buf.add_kernel(start_ns=e + 10_000, end_ns=e + 50_000, correlation_id=c, name=f"k{c}")
            return cupti.decode(buf)

    col = cupti.CuptiKernelCollector(tracer=Tracer(), clocks={"cupti": time.time_ns, "ticks": ticks})
    plan = ActivityPlan(("cpu", "cuda"), (torch.profiler.ProfilerActivity.CPU,), CudaSource.CUPTI_EXTENSION)
    monkeypatch.setattr(tracer_mod, "plan_activities", lambda acts, use_cupti: (plan, col))
    model = nn.Sequential(Launcher(), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    out = tmp_path / "t.json"
    with trace(out, warmup=1, iterations=3, use_cupti=True):
        for _ in range(6):
            opt.zero_grad()
            model(torch.randn(4, 8)).sum().backward()
            opt.step()
    meta = json.loads(out.read_text())["daydream"]["activities"]
    assert meta["cuda_source"] == "daydream.cupti"
    main_native = threading.get_native_id()
    assert meta["cupti_alignment"]["threads"] == {str(threading.get_ident() & 0xFFFFFFFF): main_native,
                                                   str(0xDEAD): main_native}
    assert meta["cupti_alignment"]["clock"]["scale"] == pytest.approx(0.5, rel=1e-3)
    assert meta["cupti_alignment"]["clock"]["source"] == "ticks"
    # started with Kineto's preparation, an iteration early: that iteration's launches are left out
    assert meta["cupti_alignment"]["rows_before_window"] == 4

    _, g = trace_and_graph(out)
    T = g.tasks
    kernels = np.flatnonzero(T["kind"] == EventKind.KERNEL)
    assert len(kernels) >= 6                               # forward and backward, in 3 iterations
    launch_edges = g.edges["kind"] == EdgeKind.LAUNCH
    by_kernel = dict(zip(g.edges["dst"][launch_edges].tolist(), g.edges["src"][launch_edges].tolist()))
    cpu_lane = {int(T["lane"][t]) for t in np.flatnonzero(T["kind"] == EventKind.CPU_OP)}
    for k in kernels.tolist():
        call = by_kernel[k]
        assert T["kind"][call] == EventKind.RUNTIME and int(T["lane"][call]) in cpu_lane
        assert g.lanes[int(T["lane"][k])].kind == LaneKind.GPU_STREAM
    fwd = kernels[T["phase"][kernels] == 0]
    bwd = kernels[T["phase"][kernels] == 1]
    assert len(fwd) == len(bwd) == 3
    assert {g.layers[int(x)] for x in T["layer"][kernels]} == {"Sequential.0"}
