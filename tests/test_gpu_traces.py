"""Real GPU traces (NVIDIA H200) recorded by daydream, one with kernels from torch.profiler and
one from the project's CUPTI extension: both load into the same graph and replay."""
from __future__ import annotations

import collections
import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from daydream.analysis import replay, trace_and_graph
from daydream.cupti import DEFAULT_SKIPPED_APIS, demangle, load_extension
from daydream.graph import EdgeKind
from daydream.model import EventKind, LaneKind

DATA = Path(__file__).parent / "data" / "h200"
ARMS = ("torch", "cupti")


@pytest.fixture(scope="module")
def graphs():
    return {arm: trace_and_graph(DATA / f"mlp.{arm}.json.gz")[1] for arm in ARMS}


def _kernels(g) -> dict:
    """Demangled kernel name -> durations (ns)."""
    out = collections.defaultdict(list)
    for k in np.flatnonzero(g.tasks["kind"] == EventKind.KERNEL).tolist():
        out[demangle(g.task_name(k))].append(int(g.tasks["dur_ns"][k]))
    return out


def test_metadata_says_where_the_kernels_came_from():
    for arm, source in (("torch", "torch.profiler"), ("cupti", "daydream.cupti")):
        with gzip.open(DATA / f"mlp.{arm}.json.gz", "rt") as fh:
            meta = json.load(fh)["daydream"]
        assert meta["device"]["cuda"][0]["name"] == "NVIDIA H200"
        assert meta["activities"]["cuda_source"] == source
    assert meta["activities"]["cupti_skipped_apis"] == list(DEFAULT_SKIPPED_APIS)
    assert meta["activities"]["cupti_alignment"]["clock"]["calls_inside_ops"] > 0.75
    # the collector started with Kineto's preparation; the warm-up iteration it saw is left out
    assert meta["activities"]["cupti_alignment"]["rows_before_window"] > 0


@pytest.mark.parametrize("arm", ARMS)
def test_every_kernel_is_launched_from_a_cpu_thread_and_has_a_layer(graphs, arm):
    g = graphs[arm]
    T = g.tasks
    kernels = np.flatnonzero(T["kind"] == EventKind.KERNEL)
    assert len(kernels) == 600                                   # 40 per iteration, 15 iterations
    launch = g.edges["kind"] == EdgeKind.LAUNCH
    launcher = dict(zip(g.edges["dst"][launch].tolist(), g.edges["src"][launch].tolist()))
    for k in kernels.tolist():
        call = launcher[k]
        assert T["kind"][call] == EventKind.RUNTIME
        assert g.lanes[int(T["lane"][call])].kind == LaneKind.CPU_THREAD
        assert g.lanes[int(T["lane"][k])].kind == LaneKind.GPU_STREAM
        assert g.layers[int(T["layer"][k])]
    # forward, backward, optimizer: the same split from both sources
    assert np.bincount(T["phase"][kernels].astype(int)).tolist() == [195, 360, 45]


def test_the_extension_sees_the_kernels_kineto_sees_at_the_same_durations(graphs):
    if load_extension()[0] is None:
        pytest.skip("daydream._cupti is not built: CUPTI's mangled kernel names cannot be demangled")
    torch_k, cupti_k = (_kernels(graphs[a]) for a in ARMS)
    assert set(cupti_k) == set(torch_k)
    assert {n: len(v) for n, v in cupti_k.items()} == {n: len(v) for n, v in torch_k.items()}
    ratios = [np.median(cupti_k[n]) / np.median(torch_k[n]) for n in torch_k]
    assert 0.95 < min(ratios) and max(ratios) < 1.10 and abs(np.median(ratios) - 1) < 0.01


@pytest.mark.parametrize("arm", ARMS)
def test_replay_reproduces_the_measured_iterations(arm):
    rep, _ = replay(DATA / f"mlp.{arm}.json.gz")
    assert len(rep.iterations) == 15
    assert rep.simulated_ms == pytest.approx(rep.measured_ms, rel=1e-9)
