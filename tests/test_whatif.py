"""What-if predictions on the project's own CPU traces with a fixed device profile."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from daydream.cli import main
from daydream.device import save_profile
from daydream.errors import DaydreamError
from daydream.graph import build_graph
from daydream.model import Phase
from daydream.optimizations._common import OPTIMIZER_STEP_RE
from daydream.optimizations import NotApplicable, OptionError, get, names
from daydream.primitives import select
from daydream.whatif import predict

from conftest import REPO, flat_profile, settled_graph


def test_every_registered_optimization_lists_parameters():
    out = CliRunner().invoke(main, ["optimizations"]).output
    for n in names():
        assert out.count(f"{n}:") >= 1
    assert "workers=8" in out


def test_option_errors_list_valid_choices():
    with pytest.raises(OptionError, match="valid: .*fused-adam"):
        get("turbo")
    with pytest.raises(OptionError, match="valid: impl"):
        get("fused-adam:speed=2")
    with pytest.raises(OptionError, match="must be one of"):
        get("amp:dtype=int4")
    with pytest.raises(OptionError, match="not a int"):
        get("data-parallel:workers=many")


def test_fused_adam_replaces_the_loop_with_one_pass(own_trace, profile):
    trace = own_trace("mlp")
    report, res = predict(trace, ["fused-adam"], device=profile)
    meta = trace.ranks[0].meta["daydream"]["optimizer"]
    fused = [t for t in range(res.graph.n_tasks) if res.graph.task_name(t) == "fused optimizer step"]
    assert len(fused) == trace.ranks[0].n_iterations
    expected = 5 * meta["param_bytes"] / 1e10 * 1e9 + 1000     # SGD momentum: 5 passes, flat 10 GB/s, 1 us
    assert res.graph.tasks["dur_ns"][fused[0]] == int(expected)
    assert len(select(res.graph, layer="^Optimizer.step#", name="^aten::")) == 0


@pytest.mark.parametrize("workload", ["mlp", "cnn", "transformer"])
def test_fused_adam_without_a_module_table_sizes_parameters_from_the_steps_ops(workload, profile):
    """SGD with momentum: ``buf.mul_(momentum)`` runs once per parameter on a buffer of its size,
    so the step's op inputs give the parameter bytes the trace's own table records."""
    from daydream import load_trace

    trace = load_trace(REPO / "traces" / f"{workload}.trace.json.gz")    # a copy of our own
    truth = trace.ranks[0].meta["daydream"]["optimizer"].pop("param_bytes")
    report, _ = predict(trace, ["fused-adam"], device=profile)
    assert f"fused-adam: parameter bytes estimated from the step's op inputs: {truth}" in report.notes


def test_fused_adam_sizes_parameters_from_in_place_ops_only(maker):
    """Per parameter: ``buf.mul_`` on a buffer of its size, and a ``to`` of a 0-dimensional
    scalar as often (4 bytes each): the scalars are not parameters.  A first iteration without
    sizes is skipped."""
    import numpy as np

    from daydream.optimizations.fused_adam import FusedAdam

    cpu = maker.lane()
    steps = []
    for it, sized in ((0, False), (1, True)):
        for p_bytes in (4096, 1024, 512):
            steps.append(maker.task(cpu, 10, name="aten::to", iteration=it, bytes=4 if sized else 0))
            steps.append(maker.task(cpu, 10, name="aten::mul_", iteration=it, bytes=p_bytes if sized else 0))
            steps.append(maker.task(cpu, 10, name="aten::add_", iteration=it, bytes=2 * p_bytes if sized else 0))
    assert FusedAdam._param_bytes_from_ops(maker.g, np.array(steps)) == 4096 + 1024 + 512


def test_fused_adam_sizes_from_ops_on_public_traces(shared_dir):
    """ResNet-50 (torchvision, 25,557,032 float32 parameters) traced with shapes; the HTA trace's
    step has no shapes for its per-parameter ``add_`` ops (and backward ops in its step range):
    refused, not estimated from whatever ops carry sizes."""
    resnet = shared_dir / "kineto" / "worker0.1623143089861.pt.trace.json.gz"
    report, _ = predict(resnet, ["fused-adam"], device="V100")
    assert f"fused-adam: parameter bytes estimated from the step's op inputs: {25_557_032 * 4}" in report.notes
    with pytest.raises(NotApplicable, match="no sizes for its per-parameter ops"):
        predict(shared_dir / "HolisticTraceAnalysis" / "control.json.gz", ["fused-adam"], device="A100")


def test_checkpointing_adds_exactly_the_recomputed_forward(own_trace, profile):
    trace = own_trace("mlp")
    g = build_graph(trace)
    report, res = predict(trace, ["checkpointing"], device=profile)
    T = g.tasks
    blocks = select(g, layer=r"^MLP\.blocks\.\d", phase="forward", iteration=[1, 2, 3, 4])
    added = (T["dur_ns"][blocks].sum() + T["gap_ns"][blocks].sum()) / 4 / 1e6
    # single CPU thread, nothing overlaps: the iteration grows by the recomputed forward (+ its gaps)
    assert report.predicted_ms - report.baseline_ms == pytest.approx(added, rel=0.02)
    assert report.phases["backward"][1] > report.phases["backward"][0]


def test_checkpointing_adds_the_calibrated_call_bookkeeping_per_module(own_trace, profile):
    import dataclasses

    trace = own_trace("mlp")
    plain, _ = predict(trace, ["checkpointing"], device=profile)
    costly, res = predict(trace, ["checkpointing"], device=dataclasses.replace(profile, checkpoint_call_ns=(100_000, 40_000)))
    import re

    names_ = [res.graph.task_name(t) for t in range(res.graph.n_tasks)]
    calls, setups = names_.count("checkpoint: call"), names_.count("checkpoint: recompute set-up")
    blocks = len({m.group(0) for m in map(re.compile(r"MLP\.blocks\.\d+").match, res.graph.layers.strings) if m})
    assert calls == setups == blocks * trace.ranks[0].n_iterations > 0
    # one CPU thread: each checkpointed module adds 0.1 ms to its forward and 0.04 ms to its backward
    assert costly.predicted_ms - plain.predicted_ms == pytest.approx(blocks * 0.14, rel=0.01)
    # per op of the module's forward (a block: aten::linear, aten::relu_): 10 + 5 us each
    none = dataclasses.replace(profile, checkpoint_call_ns=(0, 0), checkpoint_op_ns=(0, 0))
    base, _ = predict(trace, ["checkpointing"], device=none)
    per_op, _ = predict(trace, ["checkpointing"], device=dataclasses.replace(none, checkpoint_op_ns=(10_000, 5_000)))
    assert per_op.predicted_ms - base.predicted_ms == pytest.approx(blocks * 2 * 0.015, rel=0.01)


def test_amp_times_each_op_from_its_reruns_and_its_surplus_in_training(own_trace, profile, monkeypatch):
    import daydream.optimizations.amp as amp_module

    def predicted_durations(bf16_ns):
        monkeypatch.setattr(amp_module, "dtype_time_pairs", lambda sigs, dtype, threads=None:
                            {s: (100_000.0, bf16_ns) for s in sigs})
        return predict(own_trace("mlp"), ["amp:dtype=bfloat16,cast_overhead=false"], device=profile)[1].graph

    same, slower = predicted_durations(100_000.0), predicted_durations(300_000.0)
    g0 = settled_graph(own_trace("mlp"))
    comp = np.flatnonzero((g0.tasks["flops"] > 0) & np.isin(g0.tasks["phase"], (Phase.FORWARD, Phase.BACKWARD)))
    assert len(comp)
    # an op re-run 0.2 ms slower in bf16 gains exactly 0.2 ms, however long it took in the trace
    assert (slower.tasks["dur_ns"][comp] - same.tasks["dur_ns"][comp]).tolist() == [200_000] * len(comp)
    # re-runs equal in both dtypes: what the op took beyond its 0.1 ms re-run halves with the bytes,
    # and an op faster than its re-run keeps its traced time
    traced = g0.tasks["dur_ns"][comp]
    surplus = traced - 100_000
    expected = 100_000 + np.maximum(surplus, 0) / 2 + np.minimum(surplus, 0)
    assert (traced > 100_000).any() and (traced < 100_000).any()
    assert np.abs(same.tasks["dur_ns"][comp] - expected).max() <= 0.5


def test_attention_is_a_compute_op_that_amp_reruns_in_bf16(own_trace):
    """The transformer's scaled-dot-product attention (forward and backward) carries FLOPs, so
    amp re-runs it in bf16; its backward's logsumexp input stays float32, as autocast leaves it."""
    import torch

    from daydream.opbench import call_for

    trace = own_trace("transformer")
    g = build_graph(trace)
    fwd = select(g, name="^aten::_scaled_dot_product_flash_attention_for_cpu$")
    bwd = select(g, name="^aten::_scaled_dot_product_flash_attention_for_cpu_backward$")
    assert len(fwd) and len(bwd)
    assert (g.tasks["flops"][fwd] > 0).any() and (g.tasks["flops"][bwd] > 0).any()
    sig = json.dumps(["aten::_scaled_dot_product_flash_attention_for_cpu_backward",
                      [[1, 2, 8, 4]] * 5 + [[1, 2, 8], [], [], [], []],
                      ["float"] * 6 + ["Scalar", "Scalar", "", ""], None, [""] * 6 + ["0.", "True", "", ""]])
    op, args = call_for(sig, "bfloat16")
    assert [a.dtype for a in args[:6]] == [torch.bfloat16] * 5 + [torch.float32]


def test_amp_reruns_batch_norms_after_convolutions_with_low_precision_input(own_trace, profile, monkeypatch):
    """The CNN's batch norms take their convolution's bf16 output under autocast: each is re-run so
    (the re-run's difference, here 20 us faster, shared by its slices), with its weight, bias and
    running statistics left float32."""
    import torch

    import daydream.optimizations.amp as amp_module
    from daydream.opbench import call_for

    def pairs(sigs, dtype, threads=None):
        return {s: (100_000.0, 80_000.0) if "native_batch_norm" in s else (100_000.0, 100_000.0) for s in sigs}

    monkeypatch.setattr(amp_module, "dtype_time_pairs", pairs)
    trace = own_trace("cnn")
    g0 = settled_graph(trace)
    g1 = predict(trace, ["amp:dtype=bfloat16,cast_overhead=false"], device=profile)[1].graph
    T = g0.tasks
    bn = select(g0, name="^aten::native_batch_norm$")
    fwd = bn[T["phase"][bn] == Phase.FORWARD]
    events = {(int(T["rank"][t]), int(T["event"][t])) for t in fwd}
    assert len(events) >= 5
    for r, ev in events:
        part = np.flatnonzero((T["rank"] == r) & (T["event"] == ev))
        change = int(g1.tasks["dur_ns"][part].sum()) - int(T["dur_ns"][part].sum())
        assert abs(change + 20_000) <= len(part)           # rounding: at most 1 ns a slice
    bwd = bn[T["phase"][bn] == Phase.BACKWARD]
    assert (g1.tasks["dur_ns"][bwd] == T["dur_ns"][bwd]).all()
    sig = json.dumps(["aten::native_batch_norm", [[2, 4, 3, 3], [4], [4], [4], [4], [], [], []],
                      ["float"] * 5 + ["Scalar"] * 3, None, [""] * 5 + ["True", "0.1", "1e-05"]])
    op, args = call_for(sig, "bfloat16")
    assert [a.dtype for a in args[:5]] == [torch.bfloat16] + [torch.float32] * 4
    assert op(*args)[0].dtype == torch.bfloat16


def test_backend_convolutions_are_rerun_as_the_portable_op(own_trace):
    from types import SimpleNamespace

    from daydream.optimizations._layers import signatures_of

    trace = own_trace("cnn")
    g = build_graph(trace)
    leaves = select(g, name="^aten::mkldnn_convolution$")
    assert len(leaves)
    sigs = signatures_of(SimpleNamespace(graph=g, trace=trace), leaves)
    assert len(sigs) == len(leaves)
    assert {json.loads(s)[0] for s in sigs.values()} == {"aten::convolution"}


def test_amp_halves_compute_on_a_device_twice_as_fast_in_bf16(own_trace):
    fast = flat_profile(matmul=1e10, bf16_matmul=2e10)
    report, res = predict(own_trace("mlp"), ["amp:dtype=bfloat16,cast_overhead=false,remeasure=false"], device=fast)
    g0 = settled_graph(own_trace("mlp"))
    comp = np.flatnonzero((g0.tasks["flops"] > 0) & np.isin(g0.tasks["phase"], (Phase.FORWARD, Phase.BACKWARD)))
    assert len(comp)
    g1 = res.graph
    ratio = g1.tasks["dur_ns"][comp].sum() / g0.tasks["dur_ns"][comp].sum()   # no tasks inserted: ids align
    assert ratio == pytest.approx(0.5, rel=1e-3)
    slow = flat_profile(matmul=1e10, bf16_matmul=1e8)
    slow_report, _ = predict(own_trace("mlp"), ["amp:dtype=bfloat16,remeasure=false"], device=slow)
    assert slow_report.speedup < 1 < report.speedup


def test_amp_copies_move_half_the_bytes_where_arithmetic_in_the_dtype_is_slow(own_trace):
    """A CPU whose bf16 elementwise ops run at a tenth of fp32 bandwidth (no bf16 vector units):
    memory-bound ops of the layers with compute take 10 x half their bytes' time, but copies
    (``copy_``, ``clone``, ``contiguous``) do no arithmetic and take half their time.  (The
    bundled CNN's ``contiguous`` copies in convolution backward: 0.61x in bf16 in training,
    predicted 1.61x before, session 31.)"""
    import dataclasses

    from daydream.device import Curve

    dev = dataclasses.replace(flat_profile(overhead_ns=0), elementwise={
        "float32": Curve.flat(1e10), "bfloat16": Curve.flat(1e9), "float16": Curve.flat(1e9)})
    _, res = predict(own_trace("cnn"), ["amp:dtype=bfloat16,cast_overhead=false,remeasure=false"], device=dev)
    g0, g1 = settled_graph(own_trace("cnn")), res.graph
    T0 = g0.tasks
    compute_layers = np.unique(T0["layer"][T0["flops"] > 0])
    mem = np.flatnonzero((T0["flops"] <= 0) & (T0["bytes"] > 0) & (T0["dur_ns"] > 1000)
                         & np.isin(T0["layer"], compute_layers[compute_layers >= 0])
                         & np.isin(T0["phase"], (Phase.FORWARD, Phase.BACKWARD)))
    copies = [t for t in mem.tolist() if g0.task_name(t) in ("aten::copy_", "aten::clone", "aten::contiguous")]
    others = [t for t in mem.tolist() if g0.task_name(t) in ("aten::relu_", "aten::add_", "aten::threshold_backward")]
    assert copies and others
    ratio = g1.tasks["dur_ns"][:g0.n_tasks] / np.maximum(T0["dur_ns"], 1)   # no tasks inserted: ids align
    assert np.allclose(ratio[copies], 0.5, atol=1e-3) and np.allclose(ratio[others], 5.0, rtol=1e-3)


def test_data_parallel_costs_grow_with_workers(own_trace, profile):
    r1, _ = predict(own_trace("transformer"), ["data-parallel:workers=2"], device=profile)
    r8, res = predict(own_trace("transformer"), ["data-parallel:workers=8"], device=profile)
    assert r1.baseline_ms < r1.predicted_ms < r8.predicted_ms
    assert any(ln.label == "all-reduce" for ln in res.graph.lanes)


def test_data_parallel_copies_buckets_in_and_back_out_before_the_step(own_trace, profile):
    _, res = predict(own_trace("mlp"), ["data-parallel:workers=2"], device=profile)
    g = res.graph
    named = lambda n: [t for t in range(g.n_tasks) if g.task_name(t) == n]   # noqa: E731
    ins, outs, reduces = named("DDP bucket copy"), named("DDP bucket copy-out"), named("all-reduce")
    assert len(ins) == len(outs) == len(reduces) > 0
    assert sorted(g.tasks["dur_ns"][ins].tolist()) == sorted(g.tasks["dur_ns"][outs].tolist())
    steps = select(g, layer=OPTIMIZER_STEP_RE)
    assert len(steps)
    for out in outs:                                   # on the step's thread, after its all-reduce, before the step
        lane = g.lane_tasks[int(g.tasks["lane"][out])]
        nxt = lane[lane.index(out) + 1]
        assert g.task_name(nxt) == "DDP bucket copy-out" or nxt in set(steps.tolist())
        assert set(g.edges["src"][g.edges["dst"] == out].tolist()) & set(reduces)



def test_data_parallel_copies_cost_an_op_per_parameter_and_stream_from_memory():
    """Flat profile: each bucket copy lasts tensors x overhead + 2 x bytes / bandwidth, exactly."""
    from daydream import load_trace

    dev = flat_profile(bw=2e9, overhead_ns=1500)
    trace = load_trace(REPO / "traces" / "mlp.trace.json.gz")
    rows = [m for m in trace.ranks[0].meta["daydream"]["modules"] if m.get("param_bytes")]
    n_it = trace.ranks[0].n_iterations

    def copies_per_iteration():
        _, res = predict(trace, ["data-parallel:workers=2,bucket_mb=1000,stragglers=false"], device=dev)
        g = res.graph
        ins = [t for t in range(g.n_tasks) if g.task_name(t) == "DDP bucket copy"]
        assert len(ins) == n_it * 2     # the first bucket (1 MiB) and the rest
        return g.tasks["dur_ns"][ins].sum() / n_it

    nbytes = sum(m["param_bytes"] for m in rows)
    stream_ns = 2 * nbytes / 2e9 * 1e9
    for m in rows:                      # a module table without shapes: one tensor a module
        m.pop("param_shapes", None)
    assert copies_per_iteration() == pytest.approx(len(rows) * 1500 + stream_ns, abs=2)
    for m in rows:                      # weight and bias
        m["param_shapes"] = [[m["param_bytes"] // 8], [m["param_bytes"] // 8]]
    assert copies_per_iteration() == pytest.approx(2 * len(rows) * 1500 + stream_ns, abs=2)


def test_data_parallel_broadcasts_buffers_before_each_forward(own_trace, profile):
    trace = own_trace("cnn")
    buffers = sum(m.get("buffer_bytes") or 0 for m in trace.ranks[0].meta["daydream"]["modules"])
    assert buffers > 0                                    # BatchNorm running statistics
    on, res = predict(trace, ["data-parallel:workers=2,stragglers=false"], device=profile)
    off, _ = predict(trace, ["data-parallel:workers=2,broadcast_buffers=false,stragglers=false"], device=profile)
    casts = [t for t in range(res.graph.n_tasks) if res.graph.task_name(t) == "DDP: broadcast buffers"]
    assert len(casts) == trace.ranks[0].n_iterations
    each_ns = profile.allreduce_ns(buffers, 2) / 2
    assert res.graph.tasks["dur_ns"][casts[0]] == int(each_ns)
    # blocking, on the training thread, before anything else of the iteration: it adds itself
    assert on.predicted_ms - off.predicted_ms == pytest.approx(each_ns / 1e6, rel=0.05)


def _named(g, name):
    return [t for t in range(g.n_tasks) if g.task_name(t) == name]


def test_data_parallel_charges_ddps_calibrated_own_time_exactly():
    """With ``ddp_call_ns`` / ``ddp_tensor_ns`` in the profile: per iteration a forward wrapper
    (call + tensors x per tensor) and a backward part; per tensor its backward part with the
    copy-in; the copy-out only streams the bytes."""
    import dataclasses

    from daydream import load_trace
    from daydream.optimizations._common import param_tensors

    dev = dataclasses.replace(flat_profile(bw=2e9, overhead_ns=1500), ddp_call_ns=(1000, 3000),
                              ddp_tensor_ns=(10, 500))
    trace = load_trace(REPO / "traces" / "mlp.trace.json.gz")
    rows = [m for m in trace.ranks[0].meta["daydream"]["modules"] if m.get("param_bytes")]
    tensors = sum(param_tensors(m) for m in rows)
    stream_ns = 2 * sum(m["param_bytes"] for m in rows) / 2e9 * 1e9
    n_it = trace.ranks[0].n_iterations
    rep, res = predict(trace, ["data-parallel:workers=2,bucket_mb=1000,stragglers=false"], device=dev)
    g = res.graph
    per_it = {name: g.tasks["dur_ns"][_named(g, name)].sum() / n_it
              for name in ("DDP: forward wrapper", "DDP: hooks and hand-overs", "DDP bucket copy",
                           "DDP bucket copy-out")}
    assert per_it["DDP: forward wrapper"] == 1000 + 10 * tensors
    assert per_it["DDP: hooks and hand-overs"] == 3000
    assert per_it["DDP bucket copy"] == pytest.approx(500 * tensors + stream_ns, abs=2)
    assert per_it["DDP bucket copy-out"] == pytest.approx(stream_ns, abs=2)
    assert any("DDP's own CPU time" in n for n in rep.notes)


def test_collectives_reached_from_compute_pay_the_calibrated_wake_up(own_trace):
    """Ranks sharing their cores with gloo's threads (the 2-core trace, 2 workers): the last
    bucket's all-reduce and the first buffer broadcast of each iteration last ``collective_wake``
    longer, the other buckets' all-reduces and broadcasts do not."""
    import dataclasses

    plain = flat_profile()
    woken = dataclasses.replace(plain, collective_wake={"gloo": 700_000.0})
    trace = own_trace("cnn")
    for m in trace.ranks[0].meta["daydream"]["modules"]:
        if m.get("buffer_bytes"):
            m["buffer_dtypes"] = ["float32", "int64"]      # BatchNorm: running statistics and a count
    opts = ["data-parallel:workers=2,bucket_mb=0.05,stragglers=false"]
    rep, res = predict(trace, opts, device=woken)
    _, base = predict(trace, opts, device=plain)
    assert any("time-share" in n for n in rep.notes)
    n_it = trace.ranks[0].n_iterations
    for name, extra in (("all-reduce", 700_000), ("DDP: broadcast buffers", 700_000)):
        got, ref = (r.graph.tasks["dur_ns"][_named(r.graph, name)] for r in (res, base))   # same order
        assert len(got) == len(ref) > n_it                     # several buckets, two broadcasts an iteration
        assert (got - ref).sum() == extra * n_it and set((got - ref).tolist()) == {0, extra}


def test_one_buffer_broadcast_per_dtype(own_trace, profile):
    trace = own_trace("cnn")
    mods = [m for m in trace.ranks[0].meta["daydream"]["modules"] if m.get("buffer_bytes")]
    buffers = sum(m["buffer_bytes"] for m in mods)
    for m in mods:
        m["buffer_dtypes"] = ["float32", "int64"]
    _, res = predict(trace, ["data-parallel:workers=2,stragglers=false"], device=profile)
    casts = _named(res.graph, "DDP: broadcast buffers")
    assert len(casts) == 2 * trace.ranks[0].n_iterations
    assert res.graph.tasks["dur_ns"][casts[0]] == int(profile.allreduce_ns(buffers / 2, 2) / 2)


def test_dataloader_workers_hide_loading(own_trace):
    slow_fetch = flat_profile(fetch=(5e6, 0.0))
    fast_fetch = flat_profile(fetch=(1e3, 0.0))
    worse, _ = predict(own_trace("mlp"), ["dataloader:workers=2"], device=slow_fetch)
    better, res = predict(own_trace("mlp"), ["dataloader:workers=2"], device=fast_fetch)
    assert better.predicted_ms < better.baseline_ms < worse.predicted_ms
    assert sum(ln.label.startswith("DataLoader worker") for ln in res.graph.lanes) == 2


def test_compile_reruns_cpu_convolutions_in_channels_last(own_trace, profile, monkeypatch):
    import daydream.optimizations.fusion as fusion_module

    monkeypatch.setattr(fusion_module, "inductor_time_ratios", lambda sigs, threads=None, channels_last=False: {})

    def conv_ns(channels_last_ns, spec="fusion"):
        monkeypatch.setattr(fusion_module, "channels_last_time_pairs", lambda sigs, threads=None:
                            {s: (50_000.0, channels_last_ns) for s in sigs})
        g = predict(own_trace("cnn"), [spec], device=profile)[1].graph
        T = g.tasks
        conv = [t for t in range(g.n_tasks) if "conv" in g.task_name(t) and T["flops"][t] > 0
                and T["phase"][t] in (Phase.FORWARD, Phase.BACKWARD)]      # in graph order
        return T["dur_ns"][conv]

    same, faster = conv_ns(50_000.0), conv_ns(40_000.0)
    assert len(same)
    # 10 us faster in channels-last: exactly 10 us off each traced convolution, forward and backward
    assert faster.tolist() == np.maximum(1, same - 10_000).tolist()
    assert conv_ns(40_000.0, "fusion:channels_last=false").tolist() == same.tolist()
    assert conv_ns(40_000.0, "fusion:mode=kernel").tolist() == same.tolist()


def test_compile_scales_batch_norms_by_their_inductor_rerun(own_trace, profile, monkeypatch):
    """Forward batch norms take their traced time times t(Inductor) / t(eager) re-measured; their
    backward, and every batch norm without ``mode=compile``, stay as traced."""
    import daydream.optimizations.fusion as fusion_module

    monkeypatch.setattr(fusion_module, "channels_last_time_pairs", lambda sigs, threads=None: {})
    layouts = []

    def norm_ns(ratio, spec="fusion"):
        def ratios(sigs, threads=None, channels_last=False):
            layouts.append(channels_last)
            return {s: ratio for s in sigs}
        monkeypatch.setattr(fusion_module, "inductor_time_ratios", ratios)
        g = predict(own_trace("cnn"), [spec], device=profile)[1].graph
        T = g.tasks
        pick = lambda name: T["dur_ns"][select(g, name=name)]        # noqa: E731  (graph order)
        return pick("^aten::native_batch_norm$"), pick("^aten::native_batch_norm_backward$")

    (same, back), (faster, back_faster) = norm_ns(1.0), norm_ns(0.25)
    assert len(same) >= 5 and len(back) >= 5
    assert faster.tolist() == np.maximum(1, np.round(same * 0.25)).astype(int).tolist()
    assert back_faster.tolist() == back.tolist()
    assert norm_ns(0.25, "fusion:mode=kernel")[0].tolist() == same.tolist()
    norm_ns(0.25, "fusion:channels_last=false")
    assert layouts == [True, True, False]        # compiled in inductor's CPU layout unless told not to
    monkeypatch.setattr(fusion_module, "inductor_time_ratios", lambda sigs, threads=None, channels_last=False: {})
    report, res = predict(own_trace("cnn"), ["fusion"], device=profile)
    assert any("left as traced: re-running them compiled failed" in n for n in report.notes)
    assert res.graph.tasks["dur_ns"][select(res.graph, name="^aten::native_batch_norm$")].tolist() == same.tolist()


def test_inductor_reruns_a_traced_batch_norm(monkeypatch):
    torch = pytest.importorskip("torch")
    from daydream import opbench

    sig = json.dumps(["aten::native_batch_norm", [[2, 4, 3, 3], [4], [4], [4], [4], [], [], []],
                      ["float"] * 5 + ["Scalar"] * 3, None, [""] * 5 + ["True", "0.1", "1e-05"]])
    torch.set_num_threads(1)         # as inductor_time_ratios(threads=1) sets it
    try:      # inductor_time_ratios leaves failures out; compiling once says why
        opbench.inductor_ns(sig, channels_last=True)
    except DaydreamError as exc:            # a machine without Inductor's C++ toolchain
        pytest.skip(str(exc))
    ratios = opbench.inductor_time_ratios([sig], threads=1, channels_last=True)
    assert set(ratios) == {sig} and 0 < ratios[sig] < 1000
    compiled = [k for k in opbench._INDUCTOR if k[0] == sig]
    assert compiled == [(sig, True, torch.get_num_threads())]      # compiled once, timed each round
    monkeypatch.setattr(torch._inductor, "compile", lambda gm, inputs: 1 / 0)
    with pytest.raises(DaydreamError, match="cannot compile aten::native_batch_norm with Inductor: division"):
        opbench.inductor_ns(sig, channels_last=False)
    assert opbench.inductor_time_ratios([sig], threads=1) == {}     # left out, as other failed re-runs


def test_compile_drops_layout_conversions_only(own_trace, profile):
    from optimizations.fusion import is_layout_conversion

    sig = lambda dst, src: json.dumps(["aten::copy_", [[2, 3, 4, 4], [2, 3, 4, 4], []],   # noqa: E731
                                       ["float", "float", "Scalar"], [dst, src, []], ["", "", "False"]])
    nchw, nhwc = [48, 16, 4, 1], [48, 1, 12, 3]
    assert is_layout_conversion(sig(nchw, nhwc)) and is_layout_conversion(sig(nhwc, nchw))
    assert not is_layout_conversion(sig(nchw, nchw)) and not is_layout_conversion(sig(nhwc, nhwc))
    assert not is_layout_conversion(json.dumps(["aten::copy_", [[4, 4], [4, 4]], ["float", "float"],
                                                [[4, 1], [1, 4]], None]))       # a transpose, not a layout
    report, _ = predict(own_trace("cnn"), ["fusion"], device=profile)
    off, _ = predict(own_trace("cnn"), ["fusion:channels_last=false"], device=profile)
    dropped = [n for n in report.notes if "layout conversions" in n]
    assert len(dropped) == 1 and not any("layout conversions" in n for n in off.notes)


def test_dataloader_hands_over_the_batch_the_model_takes():
    from daydream import load_trace
    from daydream.optimizations.dataloader import batch_bytes

    def fetch_ns(trace):
        _, res = predict(trace, ["dataloader:workers=2"], device=flat_profile(fetch=(0.0, 1.0)))   # 1 ns a byte
        g = res.graph
        fetches = [t for t in range(g.n_tasks) if g.task_name(t) == "DataLoader: fetch batch from worker"]
        assert fetches
        return set(g.tasks["dur_ns"][fetches].tolist())

    trace = load_trace(REPO / "traces" / "mlp.trace.json.gz")       # recorded before root input shapes
    (old,) = fetch_ns(trace)
    batch = 64 * 512 * 4                        # 64 samples of 512 float32 features
    assert old >= 8 * batch                    # the largest input of the loading ops: the indexed dataset
    root = trace.ranks[0].meta["daydream"]["modules"][0]
    root["input_shapes"] = [[64, 512]]                       # what daydream trace now records
    assert batch_bytes(trace.ranks[0].meta["daydream"]["modules"]) == batch
    assert fetch_ns(trace) == {batch}


def test_fusion_fuses_chains_and_compile_pays_its_call_overhead(own_trace, profile):
    from dataclasses import replace

    kernel, res = predict(own_trace("transformer"), ["fusion:mode=kernel"], device=profile)
    assert len(select(res.graph, name="^fused elementwise$")) > 0
    assert kernel.predicted_ms < kernel.baseline_ms
    free, _ = predict(own_trace("transformer"), ["fusion"], device=profile)
    assert free.predicted_ms < kernel.predicted_ms            # framework gaps shrink inside the model
    compiled, _ = predict(own_trace("transformer"), ["fusion"],
                          device=replace(profile, compiled_call_ns=(600_000, 400_000)))
    # one thread, nothing overlaps: each iteration pays the compiled call once (1 ms)
    assert compiled.predicted_ms - free.predicted_ms == pytest.approx(1.0, abs=1e-6)


def test_compile_drops_views_and_autograd_nodes_inside_the_model_only(own_trace, profile):
    """Generated code computes views inline and runs the backward as one node: in compile mode
    the model's view ops and autograd-node slices go, gradient accumulation stays; kernel mode
    (fusing only) keeps them.  The loss, computed outside the model, keeps its own."""
    import re

    from daydream.model import Phase
    from optimizations.fusion import AUTOGRAD_NODE_RE, VIEW_OPS

    assert AUTOGRAD_NODE_RE.search("autograd::engine::evaluate_function: AddmmBackward0")
    assert AUTOGRAD_NODE_RE.search("AddmmBackward0") and not AUTOGRAD_NODE_RE.search("aten::mm")
    assert not AUTOGRAD_NODE_RE.search("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad")

    trace = own_trace("transformer")
    modules = {m["path"] for m in trace.ranks[0].meta["daydream"]["modules"]}

    def kinds(res, inside=True):
        g = res.graph
        T = g.tasks
        layer = np.array([name in modules for name in g.layers.strings] + [False], bool)[T["layer"]]
        model = np.isin(T["phase"], (Phase.FORWARD, Phase.BACKWARD)) & (T["iteration"] >= 0) & (layer == inside)
        names = [g.task_name(t) for t in np.flatnonzero(model)]
        return (sum(n in VIEW_OPS or bool(AUTOGRAD_NODE_RE.search(n)) for n in names),
                sum(bool(re.search("AccumulateGrad", n)) for n in names))

    kernel, kres = predict(trace, ["fusion:mode=kernel"], device=profile)
    compiled, cres = predict(trace, ["fusion"], device=profile)
    (before, acc), (after, acc_after) = kinds(kres), kinds(cres)
    assert before > 50 and after == 0 and acc_after == acc > 0
    assert any(f"{before} view ops and autograd-node slices" in n for n in compiled.notes)
    loss_views = kinds(kres, inside=False)[0]      # the loss's flatten / view and its backward nodes
    assert loss_views > 0 and kinds(cres, inside=False)[0] == loss_views


def test_compile_keeps_the_training_loops_python_outside_the_model(own_trace, profile):
    """Only the compiled model's ops are called from generated code: the Python before the loop's
    own ops (the batch's ``to``, the loss function, ``backward()``) stays as traced."""
    from daydream.analysis import trace_and_graph
    from daydream.model import Phase

    trace = own_trace("transformer")
    modules = {m["path"] for m in trace.ranks[0].meta["daydream"]["modules"]}
    base = trace_and_graph(trace)[1]
    _, res = predict(trace, ["fusion"], device=profile)

    def gaps(g, inside):
        T = g.tasks
        layer = np.array([name in modules for name in g.layers.strings] + [False], bool)[T["layer"]]
        m = np.isin(T["phase"], (Phase.FORWARD, Phase.BACKWARD)) & (T["iteration"] >= 0) & (layer == inside)
        return int(T["gap_ns"][m].sum())

    assert gaps(res.graph, False) == gaps(base, False) > 0
    assert gaps(res.graph, True) < gaps(base, True) / 5


def test_compiled_call_costs_per_parameter_tensor(own_trace, profile):
    """Forward and backward each pay their per-tensor cost for every parameter tensor of the model."""
    from dataclasses import replace

    from daydream.optimizations._common import param_tensors

    trace = own_trace("mlp")
    tensors = sum(param_tensors(m) for m in trace.ranks[0].meta["daydream"]["modules"])
    assert tensors >= 4                         # its linears (a recording without parameter shapes: one each)
    free, _ = predict(trace, ["fusion"], device=profile)
    per, res = predict(trace, ["fusion"], device=replace(profile, compiled_tensor_ns=(3_000, 1_000)))
    costs = select(res.graph, name="^torch.compile call overhead$")
    assert sorted(set(res.graph.tasks["dur_ns"][costs].tolist())) == [1_000 * tensors, 3_000 * tensors]
    assert per.predicted_ms - free.predicted_ms == pytest.approx(4_000 * tensors / 1e6, abs=1e-6)   # ms


def test_not_applicable_says_what_is_missing(shared_dir, profile):
    p = shared_dir / "HolisticTraceAnalysis" / "nccl_data.json.gz"
    with pytest.raises(NotApplicable, match="parameter sizes per module.*daydream trace"):
        predict(p, ["data-parallel"], device="A100")
    with pytest.raises(NotApplicable, match="no DataLoader work"):
        predict(shared_dir / "param" / "linear_kineto.json.gz", ["dataloader"], device="A100")


def test_whatif_cli_json_and_timeline(tmp_path, own_trace):
    prof = tmp_path / "dev.json"
    save_profile(flat_profile(), str(prof))
    out = tmp_path / "pred.json"
    trace = str(own_trace("mlp").ranks[0].source)
    res = CliRunner().invoke(main, ["whatif", trace, "--opt", "fused-adam", "--opt", "checkpointing",
                                    "--profile", str(prof), "--json", "-o", str(out)])
    assert res.exit_code == 0, res.output
    obj = json.loads(res.stdout)
    assert {"measured_ms", "baseline_ms", "predicted_ms", "speedup", "optimizations"} <= obj.keys()
    assert obj["optimizations"] == ["fused-adam:impl=fused", "checkpointing:modules=auto"]
    doc = json.loads(out.read_text())
    assert any(e.get("name") == "fused optimizer step" for e in doc["traceEvents"])


def test_whatif_cli_errors_are_one_line(tmp_path, own_trace):
    trace = str(own_trace("mlp").ranks[0].source)
    for args, needle in ((["--opt", "warp-drive"], "valid:"), (["--opt", "dataloader:workers=0"], "at least 1")):
        res = CliRunner().invoke(main, ["whatif", trace, "--device", "A100", *args])
        assert res.exit_code == 2 and res.stderr.startswith("error:") and needle in res.stderr
        assert "Traceback" not in res.output


def test_cpu_trace_without_calibration_asks_for_it(tmp_path, own_trace, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with pytest.raises(DaydreamError, match="daydream calibrate"):
        predict(own_trace("mlp"), ["fused-adam"])


def test_rerun_timing_takes_the_median_batch_when_typical(monkeypatch):
    from types import SimpleNamespace

    import daydream.calibrate as cal

    for typical, expected in ((False, 1.0), (True, 2.0)):
        now = [0.0]
        durations = [1.0, 5.0, 1.0, 2.0]        # the probe call, then 3 batches of one call each

        def call():
            now[0] += durations.pop(0)

        monkeypatch.setattr(cal.time, "perf_counter", lambda: now[0])
        cpu = SimpleNamespace(type="cpu")
        assert cal.time_call_ns(call, cpu, min_time_s=0.05, typical=typical) == expected * 1e9


def test_signatures_rebuild_4d_inputs_channels_last():
    torch = pytest.importorskip("torch")
    from daydream.opbench import call_for

    sig = json.dumps(["aten::convolution", [[2, 3, 5, 5], [4, 3, 3, 3], [], [], [], [], [], [], []],
                      ["float", "float", "", "", "", "", "", "", ""], None, None])
    _, plain = call_for(sig)
    _, cl = call_for(sig, channels_last=True)
    assert all(x.is_contiguous() for x in plain[:2])
    assert all(x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous() for x in cl[:2])


def test_op_reruns_keep_the_round_with_the_median_ratio(monkeypatch):
    """An op and its variant timed in turns, 3 rounds: the round whose ratio is the median is
    kept, so one slow timing on either side does not make the ratio."""
    from daydream import opbench

    traced = iter([100.0, 100.0, 400.0])           # the third round's op timing hit a slow spell
    variant = iter([300.0, 150.0, 200.0])          # ratios 3.0, 1.5, 0.5
    monkeypatch.setattr(opbench, "time_signature_ns", lambda sig: next(traced))
    pairs = opbench._pairs(["sig"], lambda sig: next(variant))
    assert pairs == {"sig": (100.0, 150.0)}


def test_op_reruns_interleave_the_ops_and_go_on_for_their_span(monkeypatch):
    """Each round times every op once (so an op's rounds fall in different spells); rounds go on
    until PAIR_SPAN_S after the first (a fake clock: 1 s a round, span 2.5 s: 4 rounds);
    ``typical`` keeps each side's median."""
    import time

    from daydream import opbench

    clock = iter(range(100))
    monkeypatch.setattr(time, "perf_counter", lambda: float(next(clock)))
    monkeypatch.setattr(opbench, "PAIR_SPAN_S", 2.5)
    order = []
    times = {"a": iter([10.0, 30.0, 20.0, 40.0]), "b": iter([1.0, 2.0, 3.0, 4.0])}
    monkeypatch.setattr(opbench, "time_signature_ns", lambda sig: order.append(sig) or next(times[sig]))
    pairs = opbench._pairs(["a", "b", "a"], lambda sig: 2 * len(order), rounds=2, typical=True)
    assert order == ["a", "b"] * 4
    assert pairs == {"a": (25.0, 6.0), "b": (2.5, 8.0)}      # variants (before each timing): 0, 4, 8, 12 / 2, 6, 10, 14


def test_thread_ratios_in_sequence_rerun_the_iteration_at_the_target_threads(monkeypatch):
    """With a sequence, the ratios come from re-running it with the variant's side at the target
    thread count; only the asked-for signatures are kept; without one fitting, each op alone."""
    from daydream import opbench, opseq

    calls = []

    def fake(sequence, variant, threads, **kw):
        calls.append((list(sequence), [variant(s) for s in sequence], threads, kw))
        return {"a": 0.6, "b": 0.7}

    monkeypatch.setattr(opseq, "sequence_ratios", fake)
    assert opbench.thread_time_ratios(["a"], 1, 2, sequence=["a", "b", "a"]) == {"a": 0.6}
    assert calls == [(["a", "b", "a"], ["a", "b", "a"], 1, {"variant_threads": 2, "chained": False, "by_time": False,
                                                            "recycle": True, "warm": False})]
    assert opbench.thread_time_ratios(["a"], 1, 2, sequence=["a"], chained=True) == {"a": 0.6}
    assert calls[-1][3] == {"variant_threads": 2, "chained": True, "by_time": True, "recycle": True, "warm": False}
    opbench.thread_time_ratios(["a"], 1, 2, sequence=["a"], chained=True, recycle=False, warm=True)
    assert (calls[-1][3]["recycle"], calls[-1][3]["warm"]) == (False, True)
    monkeypatch.setattr(opseq, "sequence_ratios", lambda *a, **k: None)
    monkeypatch.setattr(opbench, "_ratios", lambda sigs, other, threads: {"alone": 1.0})
    assert opbench.thread_time_ratios(["a"], 1, 2, sequence=["a"]) == {"alone": 1.0}


def test_fused_ratios_in_sequence_pass_the_chaining_on(monkeypatch):
    """HFTA's fused re-run, chained, also weighs each signature's occurrences by their time."""
    from daydream import opbench, opseq

    calls = []
    monkeypatch.setattr(opseq, "sequence_ratios", lambda seq, variant, threads, **kw: calls.append(kw) or {"a": 1.7})
    assert opbench.fused_time_ratios(["a"], 2, 1, sequence=["a"]) == {"a": 1.7}
    assert opbench.fused_time_ratios(["a"], 2, 1, sequence=["a"], chained=True) == {"a": 1.7}
    assert opbench.fused_time_ratios(["a"], 2, 1, sequence=["a"], warm=True) == {"a": 1.7}
    assert calls == [{"chained": False, "by_time": False, "warm": False},
                     {"chained": True, "by_time": True, "warm": False},
                     {"chained": False, "by_time": False, "warm": True}]


def test_thread_ratios_time_the_variant_at_the_target_threads_and_restore(monkeypatch):
    torch = pytest.importorskip("torch")
    from daydream import opbench

    seen = []
    monkeypatch.setattr(opbench, "time_signature_ns",
                        lambda sig: seen.append(torch.get_num_threads()) or float(torch.get_num_threads()))
    before = torch.get_num_threads()
    try:
        ratios = opbench.thread_time_ratios(["sig"], 1, 2)
        after = torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
    assert ratios == {"sig": 2.0} and seen == [2, 1] * opbench.PAIR_ROUNDS and after == 1


def test_checkpoint_calibration_takes_the_median_of_per_round_differences(monkeypatch):
    """Each round times plain forward, checkpointed forward, plain step, checkpointed step and the
    no-grad recompute in turn; forward = ckpt_f - plain_f, backward = ckpt - plain - recompute -
    forward, each the median over rounds, so one disturbed round does not make them."""
    torch = pytest.importorskip("torch")
    from daydream import calibrate as C

    rounds = [(100, 250, 300, 900, 50)] * 4 + [(100, 2000, 300, 900, 50)] * 1   # one slow checkpointed forward
    times = iter(t for r in rounds for t in r)
    monkeypatch.setattr(C, "CHECKPOINT_ROUNDS", len(rounds))
    monkeypatch.setattr(C, "time_call_ns", lambda fn, device, min_time_s: float(next(times)))
    assert C._checkpoint_extra_ns(torch, torch.device("cpu"), 2) == (150.0, 400.0)


def test_checkpoint_calibration_splits_call_and_per_op_costs(monkeypatch):
    """Modules of 1 and 8 (Linear, ReLU) layers: 2 and 16 ops; the difference over 14 ops is the
    per-op cost, the rest of the small module's cost the per-call one."""
    from daydream import calibrate as C

    extra = {1: (120.0, 60.0), C.CHECKPOINT_LAYERS: (400.0, 200.0)}
    monkeypatch.setattr(C, "_checkpoint_extra_ns", lambda torch, device, layers: extra[layers])
    assert C.CHECKPOINT_LAYERS == 8
    assert C._checkpoint_ns(None, None) == ((80, 40), (20, 10))


def test_compiled_call_calibration_splits_call_and_per_tensor_costs(monkeypatch):
    """Compiled models of 1 and 8 (Linear, ReLU) layers: 2 and 16 parameter tensors; the
    difference over 14 tensors is the per-tensor cost, the rest of the small model's the per-call
    one; a model whose ranges were not found makes both unknown."""
    from daydream import calibrate as C

    extra = {1: (160.0, 110.0), C.COMPILED_LAYERS: (300.0, 124.0)}
    monkeypatch.setattr(C, "_compiled_wrapper_ns", lambda torch, device, layers: extra[layers])
    assert C.COMPILED_LAYERS == 8
    assert C._compiled_call_ns(None, None) == ((140, 108), (10, 1))
    extra[1] = (0, 0)
    assert C._compiled_call_ns(None, None) == ((0, 0), (0, 0))


def test_compiled_wrapper_is_found_in_the_profilers_ranges(monkeypatch):
    """On this torch, a compiled call's forward and backward both spend host time outside the
    generated graphs, and the profiler's ranges that separate them are there."""
    torch = pytest.importorskip("torch")
    from daydream import calibrate as C

    try:
        torch.compile(lambda x: x + 1)(torch.ones(2))
    except Exception as exc:  # noqa: BLE001 - no compiler toolchain here
        pytest.skip(f"torch.compile does not run here: {exc}")
    monkeypatch.setattr(C, "COMPILED_ROUNDS", 1)
    monkeypatch.setattr(C, "COMPILED_CALLS", 3)
    fwd, bwd = C._compiled_wrapper_ns(torch, torch.device("cpu"), 1)
    assert 1_000 < fwd < 50_000_000 and 1_000 < bwd < 50_000_000


def test_checkpoint_calibration_times_its_calls_under_the_profiler(monkeypatch):
    """The recompute's set-up records ops of its own in a traced run, so checkpointing's extra
    cost is timed with the profiler on, as a trace's iterations run."""
    import torch

    import daydream.calibrate as cal

    profiled = []

    def fake_time(fn, device, min_time_s=0.05, **kw):
        profiled.append(torch.autograd.profiler._is_profiler_enabled)
        return 1000.0

    monkeypatch.setattr(cal, "time_call_ns", fake_time)
    assert cal._checkpoint_extra_ns(torch, torch.device("cpu"), 1) == (0.0, 0.0)
    assert profiled and all(profiled)


def test_host_cache_size_is_the_largest_cache_in_sysfs(tmp_path):
    from daydream import calibrate as C

    for name, size in (("index0", "32K"), ("index2", "2048K"), ("index3", "32768K")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "size").write_text(size + "\n")
    assert C.host_cache_bytes(str(tmp_path)) == 32 << 20
    assert C.host_cache_bytes(str(tmp_path / "absent")) == C.DEFAULT_LLC_BYTES


def test_compiled_calls_are_timed_after_the_caches_are_swept(monkeypatch):
    """In training the rest of a step passes through the caches between two compiled calls:
    the calibration writes the sweep buffer once before every forward and every backward."""
    torch = pytest.importorskip("torch")
    from daydream import calibrate as C

    m = C._tiny_mlp(torch, 1, torch.device("cpu"))
    x = torch.randn(4, 8)
    try:
        cm = torch.compile(m)
        cm(x).sum().backward()
    except Exception as exc:  # noqa: BLE001 - no compiler toolchain here
        pytest.skip(f"torch.compile does not run here: {exc}")
    monkeypatch.setattr(C, "COMPILED_CALLS", 3)
    sweep = torch.zeros(1024)
    fwd, bwd = C._compiled_round(torch, torch.device("cpu"), cm, x, sweep)
    assert sweep.eq(6.0).all() and fwd > 0 and bwd > 0
