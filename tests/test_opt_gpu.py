"""What-ifs of GPU training: batchnorm, priority-comm, blueconnect, vdnn, gist, batch-size.

Hand-made graphs with exact expected times, and the public GPU traces of
../shared (ResNet-50 on a V100, DDP CNN with NCCL on an A100) for directions
that must hold and NotApplicable messages.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from daydream.analysis import as_trace
from daydream.cli import main
from daydream.cost import elementwise_ns
from daydream.published import published
from daydream.graph import build_graph
from daydream.model import EventKind, LaneKind, Phase, Trace
from daydream.optimizations import NotApplicable, WhatIfContext, get
from daydream.sim import simulate

KINETO = "kineto/worker0.1623143089861.pt.trace.json.gz"
NCCL = "HolisticTraceAnalysis/nccl_data.json.gz"


def _apply(g, spec, trace=None, device="V100", workers=None):
    ctx = WhatIfContext(graph=g.copy(), trace=trace if trace is not None else Trace([]), device=published(device))
    if workers:
        ctx.workers = workers
    get(spec).apply(ctx)
    return ctx


def _end(g) -> int:
    return int(simulate(g).end_ns.max())


def _layered(m, lane, dur, layer, phase, **cols):
    return m.task(lane, dur, layer=m.g.layers.intern(layer), phase=int(phase), **cols)


# ------------------------------------------------------------------ hand-made
def _comm_graph(m):
    """Backward B3 B2 B1 then next forward F1 F2 F3; AR_i after B_i, F_i waits for AR_i."""
    gpu, comm = m.lane(LaneKind.GPU_STREAM), m.lane(LaneKind.COMM)
    b = [m.task(gpu, 10, name=f"B{i}") for i in (3, 2, 1)]
    f = [m.task(gpu, 10, name=f"F{i}") for i in (1, 2, 3)]
    ar = [m.task(comm, d, name="all-reduce", kind=EventKind.COLLECTIVE, bytes=n)
          for d, n in ((40, 4_000_000), (10, 1_000_000), (10, 1_000_000))]
    for i in range(3):
        m.edge(b[i], ar[i])
        m.edge(ar[i], f[2 - i])
    return m.g


@pytest.mark.parametrize("spec, end", [("priority-comm:slice_mb=1,latency_us=0", 80),
                                       ("priority-comm:slice_mb=1,latency_us=0,schedule=fifo", 100),
                                       ("priority-comm:slice_mb=100,latency_us=0", 90)])
def test_priority_comm_exact(maker, spec, end):
    g = _comm_graph(maker)
    assert _end(g) == 100
    assert _end(_apply(g, spec).graph) == end


def test_priority_comm_slice_latency_and_never_slower_than_fifo(maker):
    g = _comm_graph(maker)
    pr = _apply(g, "priority-comm:slice_mb=1,latency_us=0.004").graph
    fifo = _apply(g, "priority-comm:slice_mb=1,latency_us=0.004,schedule=fifo").graph
    assert len(pr.lane_tasks[1]) == 6                       # 4 + 1 + 1 slices
    # AR3 (40 ns, 4 MB): 4 slices of 4 ns latency + 36 / 4; the 1 MB ones keep their time
    assert sorted(pr.tasks["dur_ns"][pr.lane_tasks[1]].tolist()) == [10, 10, 13, 13, 13, 13]
    assert _end(pr) <= _end(fifo)


def test_blueconnect_exact_and_flat_when_one_gpu_per_node(maker):
    comm = maker.lane(LaneKind.COMM)
    t = maker.task(comm, 150_000_000, name="all-reduce", kind=EventKind.COLLECTIVE, bytes=10 ** 9)
    args = "intra_gbs=100,inter_gbps=100,latency_us=0"
    g = _apply(maker.g, f"blueconnect:gpus_per_node=8,{args}", workers=16).graph
    # flat ring over 2 nodes: 2*15/16 * 1e9 B / 12.5 GB/s = 150 ms; hierarchical:
    # 2 * 7/8 * 1e9 / 100 GB/s + 2 * 1/2 * 1.25e8 / 12.5 GB/s = 17.5 + 10 ms
    assert g.tasks["dur_ns"][t] == 27_500_000
    g1 = _apply(maker.g, f"blueconnect:gpus_per_node=1,{args}", workers=16).graph
    assert g1.tasks["dur_ns"][t] == 150_000_000


def _vdnn_graph(m):
    gpu = m.lane(LaneKind.GPU_STREAM)
    for layer, ph in (("aten::conv2d", Phase.FORWARD), ("aten::relu_", Phase.FORWARD), ("aten::conv2d", Phase.FORWARD),
                      ("ConvolutionBackward0", Phase.BACKWARD), ("ReluBackward0", Phase.BACKWARD),
                      ("ConvolutionBackward0", Phase.BACKWARD)):
        _layered(m, gpu, 100_000, layer, ph, bytes=1_200_000)
    return m.g


def test_vdnn_exact(maker):
    g = _vdnn_graph(maker)
    assert _end(g) == 600_000
    # 1.2 MB at 12 GB/s = 100 us per copy; offloads serialise the forward, the last prefetch the backward
    assert _end(_apply(g, "vdnn").graph) == 900_000
    assert _end(_apply(g, "vdnn:pcie_gbs=inf").graph) == 600_000
    g2 = _apply(g, "vdnn").graph
    assert sum(ln.kind == LaneKind.COPY for ln in g2.lanes) == 2
    assert (g2.tasks["kind"] == EventKind.MEMCPY).sum() == 4


def test_gist_exact(maker):
    gpu = maker.lane(LaneKind.GPU_STREAM)
    for layer, ph in (("aten::relu_", Phase.FORWARD), ("aten::max_pool2d", Phase.FORWARD),
                      ("MaxPool2DWithIndicesBackward0", Phase.BACKWARD), ("ReluBackward0", Phase.BACKWARD)):
        _layered(maker, gpu, 10_000, layer, ph, bytes=1_000_000)
    g = _apply(maker.g, "gist").graph
    names = [g.task_name(t) for t in g.lane_tasks[gpu]]
    assert names == ["t", "gist encode (binarize)", "t", "gist encode (dpr)", "gist decode (dpr)", "t",
                     "gist decode (binarize)", "t"]
    dev = published("V100")
    enc_relu = round(elementwise_ns(dev, 1e6 * (1 + 1 / 32)))
    enc_pool = round(elementwise_ns(dev, 1e6 * (1 + 1 / 2)))
    assert _end(g) == 40_000 + 2 * enc_relu + 2 * enc_pool


def test_batch_size_exact(maker):
    gpu, cpu = maker.lane(LaneKind.GPU_STREAM), maker.lane(LaneKind.CPU_THREAD)
    gemm = maker.task(gpu, 1_000_000, name="volta_sgemm_128x64_nn", phase=int(Phase.FORWARD), flops=10 ** 12)
    tiny = maker.task(gpu, 2_000, name="elementwise", phase=int(Phase.FORWARD), bytes=4096)
    opt = maker.task(gpu, 50_000, name="multi_tensor_apply", phase=int(Phase.OPTIMIZER), bytes=10 ** 8)
    op = maker.task(cpu, 7_000, name="aten::mm", phase=int(Phase.FORWARD), flops=10 ** 12)
    g = _apply(maker.g, "batch-size:factor=2").graph
    d = g.tasks["dur_ns"]
    assert (d[gemm], d[tiny], d[opt], d[op]) == (2_000 + 998_000 * 2, 2_000, 50_000, 7_000)
    g = _apply(maker.g, "batch-size:factor=0.5").graph
    assert g.tasks["dur_ns"][gemm] == 2_000 + 499_000


def test_batch_size_scales_every_slice_of_an_op(maker):
    """A CPU op split by a nested call: its slice without the FLOPs scales as the one with them."""
    from conftest import flat_profile

    cpu = maker.lane(LaneKind.CPU_THREAD)
    fw = int(Phase.FORWARD)
    head = maker.task(cpu, 3_000, name="aten::mm", phase=fw, event=5)
    alloc = maker.task(cpu, 500, name="aten::empty", phase=fw, event=6)
    work = maker.task(cpu, 9_000, name="aten::mm", phase=fw, event=5, flops=10 ** 9)
    ctx = WhatIfContext(graph=maker.g.copy(), trace=Trace([]), device=flat_profile(overhead_ns=1_000))
    get("batch-size:factor=2,remeasure=0").apply(ctx)
    d = ctx.graph.tasks["dur_ns"]
    assert (d[head], d[alloc], d[work]) == (round(3_000 * 17_000 / 9_000), 500, 1_000 + 8_000 * 2)


def test_batchnorm_exact(maker):
    gpu = maker.lane(LaneKind.GPU_STREAM)
    fw = Phase.FORWARD
    for name, dur, ph in (("implicit_convolve_sgemm", 100_000, fw), ("cudnn::bn_fw_tr_1C11_kernel", 30_000, fw),
                          ("elementwise_kernel<clamp_min_scalar>", 10_000, fw),
                          ("threshold_backward_kernel", 10_000, Phase.BACKWARD),
                          ("cudnn::bn_bw_1C11_kernel_new", 50_000, Phase.BACKWARD)):
        maker.task(gpu, dur, name=name, phase=int(ph))
    g = _apply(maker.g, "batchnorm").graph
    # no shapes: BN forward loses 1 of 3 passes, backward 2 of 5; the adjacent ReLUs go
    assert sorted(g.tasks["dur_ns"].tolist()) == [20_000, 30_000, 100_000]
    assert _end(g) == 150_000


def test_not_applicable_on_hand_made(maker):
    gpu = maker.lane(LaneKind.GPU_STREAM)
    maker.task(gpu, 10, name="volta_sgemm", phase=int(Phase.FORWARD))
    for spec, words in (("batchnorm", "no BatchNorm"), ("priority-comm", "no gradient all-reduce"),
                        ("blueconnect", "no gradient all-reduce"), ("vdnn", "record shapes"), ("gist", "ReLU")):
        with pytest.raises(NotApplicable, match=words):
            _apply(maker.g, spec)


# --------------------------------------------------------------- real traces
@pytest.fixture(scope="module")
def loaded(request):
    cache = {}

    def get_trace(rel):
        from conftest import SHARED
        if not SHARED.is_dir():
            pytest.skip("../shared/traces/public is absent")
        if rel not in cache:
            tr = as_trace([str(SHARED / rel)], None)
            g = build_graph(tr)
            cache[rel] = (tr, g, simulate(g).mean_iteration_ns()[1])
        return cache[rel]
    return get_trace


def _predict(loaded, rel, spec):
    tr, g, base = loaded(rel)
    ctx = WhatIfContext(graph=g.copy(), trace=tr, device=published("A100" if "HolisticTrace" in rel else "V100"))
    get(spec).apply(ctx)
    return ctx, simulate(ctx.graph).mean_iteration_ns()[1], base


def test_batchnorm_real_traces(loaded):
    for rel in (NCCL, KINETO):
        ctx, pred, base = _predict(loaded, rel, "batchnorm")
        _, g, _ = loaded(rel)
        assert pred <= base
        assert ctx.graph.tasks["dur_ns"].sum() < g.tasks["dur_ns"].sum()
        assert ctx.graph.n_tasks < g.n_tasks


def test_priority_comm_and_blueconnect_real(loaded):
    ctx, pred, base = _predict(loaded, NCCL, "priority-comm:slice_mb=4")
    assert "15 all-reduces -> 84 slices" in ctx.notes[0]
    assert abs(pred - base) / base < 0.01                  # DDP syncs on all gradients: comm is hidden here
    ctx, pred, base = _predict(loaded, NCCL, "blueconnect:gpus_per_node=1")
    _, g, _ = loaded(NCCL)
    assert np.array_equal(ctx.graph.tasks["dur_ns"], g.tasks["dur_ns"]) and pred == base
    ctx, _, _ = _predict(loaded, NCCL, "blueconnect:workers=64,gpus_per_node=8")
    ar = [t for t in range(g.n_tasks) if "AllReduce" in g.task_name(t)]
    assert (ctx.graph.tasks["dur_ns"][ar] > g.tasks["dur_ns"][ar]).all()   # 2 GPUs in a node -> 8 nodes


def test_vdnn_gist_real(loaded):
    _, inf, base = _predict(loaded, KINETO, "vdnn:pcie_gbs=inf")
    assert inf == base
    ctx, slow, _ = _predict(loaded, KINETO, "vdnn")
    assert slow > base and "312 layer activations" in ctx.notes[0]
    ctx, pred, _ = _predict(loaded, KINETO, "gist")
    assert pred >= base and "binarize" in ctx.notes[0]


def test_batch_size_real(loaded):
    ctx, pred, base = _predict(loaded, KINETO, "batch-size:factor=2")
    _, g, _ = loaded(KINETO)
    T = g.tasks
    big = np.flatnonzero((T["kind"] == EventKind.KERNEL) & (T["phase"] == Phase.FORWARD) & (T["dur_ns"] > 500_000))
    conv = [t for t in big if "scudnn" in g.task_name(t) or "gemm" in g.task_name(t)]
    ratio = ctx.graph.tasks["dur_ns"][conv] / T["dur_ns"][conv]
    assert len(conv) > 10 and np.all((ratio > 1.9) & (ratio <= 2.0))
    opt = T["phase"] == Phase.OPTIMIZER
    assert np.array_equal(ctx.graph.tasks["dur_ns"][opt], T["dur_ns"][opt])
    assert pred > base


def test_not_applicable_real(loaded):
    for spec in ("priority-comm", "blueconnect"):
        with pytest.raises(NotApplicable, match="apply --opt data-parallel first"):
            _predict(loaded, KINETO, spec)


# ------------------------------------------------------------------------ CLI
@pytest.mark.parametrize("spec", ["priority-comm:slice_mb=8", "blueconnect:gpus_per_node=1", "batchnorm"])
def test_cli_json(shared_dir, spec):
    res = CliRunner().invoke(main, ["whatif", str(shared_dir / NCCL), "--opt", spec, "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["optimizations"][0].startswith(spec.split(":")[0]) and d["predicted_ms"] > 0
    assert d["predicted_ms"] <= d["baseline_ms"] * 1.01 and d["notes"]


def test_cli_not_applicable_message():
    from conftest import REPO
    res = CliRunner().invoke(main, ["whatif", str(REPO / "traces" / "cnn.trace.json.gz"), "--opt", "vdnn",
                                    "--device", "A100"])
    assert res.exit_code != 0 and "no GPU streams" in res.output
