"""``hfta``: fused-op cost model (exact times), what-if on the project's MLP trace, the fused workload."""
from __future__ import annotations

import numpy as np
import pytest

from daydream.device import Curve, DeviceProfile
from daydream.model import EventKind, LaneKind, Phase
from daydream.optimizations import NotApplicable, OptionError, get
from daydream.optimizations.hfta import STREAMING, TaskClass, classify, fused_durations
from daydream.whatif import predict

from conftest import flat_profile, settled_graph


def _graph(maker):
    cpu = maker.lane(LaneKind.CPU_THREAD)
    ids = {
        "mm": maker.task(cpu, 4000, name="aten::mm", flops=10**6, phase=Phase.FORWARD),
        "conv": maker.task(cpu, 6000, name="aten::convolution", flops=10**6, phase=Phase.BACKWARD),
        "relu": maker.task(cpu, 3000, gap=700, name="aten::relu_", bytes=4096, phase=Phase.FORWARD),
        "tiny": maker.task(cpu, 400, name="aten::add_", bytes=64, phase=Phase.OPTIMIZER),
        "view": maker.task(cpu, 900, name="aten::t", bytes=4096, phase=Phase.FORWARD),
        "dispatch": maker.task(cpu, 500, name="aten::linear", phase=Phase.FORWARD),
        "load": maker.task(cpu, 2000, name="aten::index", bytes=4096, phase=Phase.DATALOADER),
    }
    return maker.g, ids


def test_task_classes(maker):
    g, ids = _graph(maker)
    cls = classify(g)
    assert [int(cls[ids[k]]) for k in ("mm", "conv", "relu", "tiny", "view", "dispatch", "load")] == [
        TaskClass.COMPUTE, TaskClass.COMPUTE, TaskClass.MEMORY, TaskClass.MEMORY,
        TaskClass.FIXED, TaskClass.FIXED, TaskClass.FIXED]


def test_fused_durations_flat_device(maker):
    g, ids = _graph(maker)
    d = fused_durations(g, flat_profile(overhead_ns=1000), 4)
    assert d[ids["mm"]] == 16000 and d[ids["conv"]] == 24000        # 4x the work at the same rate
    assert d[ids["relu"]] == 1000 + 4 * 2000                        # overhead once, streaming 4x
    assert d[ids["tiny"]] == 400                                    # all of it is fixed cost
    assert d[ids["view"]] == 900 and d[ids["dispatch"]] == 500 and d[ids["load"]] == 2000
    assert (fused_durations(g, flat_profile(), 1) == g.tasks["dur_ns"]).all()


def test_fused_durations_follow_the_throughput_curves(maker):
    g, ids = _graph(maker)
    dev = DeviceProfile("d", "cpu", matmul={"float32": Curve(((1e6, 1e9), (4e6, 2e9)))},
                        conv={"float32": Curve(((1e6, 1e9), (4e6, 4e9)))},
                        elementwise={"float32": Curve(((6144, 2e9), (24576, 1e9)))}, op_overhead_ns=1000)
    d = fused_durations(g, dev, 4)
    assert d[ids["mm"]] == 4000 * 4 // 2          # batched GEMM runs at twice the rate
    assert d[ids["conv"]] == 6000                 # grouped conv at four times the rate
    assert d[ids["relu"]] == 1000 + 2000 * 4 * 2  # 4x the bytes moved (1.5 x inputs) at half the bandwidth


def test_on_a_gpu_kernels_grow_with_n_and_cpu_ops_stay(maker):
    cpu, gpu = maker.lane(LaneKind.CPU_THREAD), maker.lane(LaneKind.GPU_STREAM)
    launch = maker.task(cpu, 5000, name="cudaLaunchKernel", kind=EventKind.RUNTIME, phase=Phase.FORWARD)
    op = maker.task(cpu, 4000, name="aten::add_", bytes=10**6, flops=0, phase=Phase.FORWARD)
    mm = maker.task(cpu, 4000, name="aten::mm", flops=10**6, phase=Phase.FORWARD)
    k = maker.task(gpu, 3000, name="elementwise_kernel", phase=Phase.FORWARD)
    d = fused_durations(maker.g, flat_profile(), 3)
    assert d[k] == 9000
    assert d[launch] == 5000 and d[op] == 4000 and d[mm] == 4000   # CPU ops only launch kernels


def test_whatif_on_mlp_trace(own_trace):
    dev = flat_profile(matmul=1e10, bw=1e10, overhead_ns=1000)
    base = settled_graph(own_trace("mlp"))
    n = 4
    report, res = predict(own_trace("mlp"), [f"hfta:models={n},remeasure=0"], device=dev)   # curves only
    # one CPU thread, nothing overlaps: the iteration grows by exactly the added task time
    its = [1, 2, 3, 4]
    m = np.isin(base.tasks["iteration"], its)
    added = (res.graph.tasks["dur_ns"][m] - base.tasks["dur_ns"][m]).sum() / len(its) / 1e6
    assert added > 0
    assert report.predicted_ms - report.baseline_ms == pytest.approx(added, rel=1e-3)
    met = report.metrics
    assert met["fused_iteration_ms"] == pytest.approx(report.predicted_ms)
    assert met["sequential_ms"] == pytest.approx(n * report.baseline_ms)
    assert met["throughput_gain"] == pytest.approx(n * report.baseline_ms / report.predicted_ms)
    assert report.baseline_ms < report.predicted_ms < n * report.baseline_ms   # fixed costs are paid once
    one, _ = predict(own_trace("mlp"), ["hfta:models=1"], device=dev)
    assert one.predicted_ms == pytest.approx(one.baseline_ms)


def test_compute_ops_take_the_cycle_factor_of_n_models_state(own_trace):
    """A profile whose cycle figures give x1.1 at twice the traced MLP's parameters and momentum:
    fused 2-fold (`activations=false`: the state alone), every compute task (and its other
    slices) takes 1.1x its fused time, nothing else changes; `cycle=false`, or a profile without
    the figures, leaves it out."""
    import dataclasses

    from daydream.optimizations.hfta import TaskClass, classify

    trace = own_trace("mlp")
    mods = trace.ranks[0].meta["daydream"]["modules"]
    leaves = [m for m in mods if not any(q["path"].startswith(m["path"] + ".") for q in mods)]
    state = 2 * sum(int(m.get("param_bytes") or 0) for m in leaves)          # momentum SGD
    dev = dataclasses.replace(flat_profile(), cycle=((state, 1.0), (2 * state, 1.1)))
    (off, g_off), (on, g_on) = ((r, res.graph) for r, res in (
        predict(trace, [f"hfta:models=2,remeasure=0,activations=false,cycle={c}"], device=dev)
        for c in ("false", "true")))
    assert on.metrics["cycle_factor"] == pytest.approx(1.1) and "cycle_factor" not in off.metrics
    comp = classify(g_off) == TaskClass.COMPUTE
    d_off, d_on = g_off.tasks["dur_ns"], g_on.tasks["dur_ns"]
    assert comp.any() and d_on[comp] == pytest.approx(1.1 * d_off[comp], abs=1)
    changed = np.flatnonzero(d_on != d_off)
    assert set(changed.tolist()) >= set(np.flatnonzero(comp & (d_off > 10)).tolist())
    assert (d_on[changed] > d_off[changed]).all()
    plain, _ = predict(trace, ["hfta:models=2,remeasure=0"], device=flat_profile())
    assert plain.predicted_ms == pytest.approx(off.predicted_ms) and "cycle_factor" not in plain.metrics


def _cycle_case(own_trace):
    """The bundled MLP's trace, a 1-thread profile reading x1.1 at twice its footprint
    (parameters, momentum, activations) and the footprint."""
    import dataclasses

    from daydream.optimizations._common import activation_bytes

    trace = own_trace("mlp")
    mods = trace.ranks[0].meta["daydream"]["modules"]
    foot = 2 * sum(int(m.get("param_bytes") or 0) for m in mods) + activation_bytes(mods)
    dev = dataclasses.replace(flat_profile(), threads=1, cycle=((foot, 1.0), (2 * foot, 1.1)))
    return trace, dev, foot


def test_cycle_ratio_takes_the_curve_measured_now(own_trace, monkeypatch):
    """`now=True` takes the curve `cycle_now` measured in this process (at the profile's
    threads) over the profile's; measured once until `forget_measured`, which measures again."""
    from daydream.analysis import trace_and_graph
    from daydream.optimizations import WhatIfContext, _common
    from daydream.optimizations._corun import forget_measured

    trace, dev, foot = _cycle_case(own_trace)
    calls = []
    monkeypatch.setattr("daydream.calibrate_cycle.cycle_points",
                        lambda torch: calls.append(torch.get_num_threads()) or ((foot, 1.0), (2 * foot, 1.3)))
    forget_measured()
    _, g = trace_and_graph(trace, None)
    ctx = WhatIfContext(graph=g, trace=trace, device=dev)
    got = [_common.cycle_ratio(ctx, 2, activations=True, now=now) for now in (False, True, True)]
    assert got == pytest.approx([1.1, 1.3, 1.3]) and calls == [1]
    forget_measured()
    assert _common.cycle_ratio(ctx, 2, activations=True, now=True) == pytest.approx(1.3) and calls == [1, 1]
    forget_measured()


def test_hfta_cycle_now_with_remeasure(own_trace, monkeypatch):
    """With `remeasure` (its op re-runs left out here) `hfta` takes the cycle curve measured now
    and says so; `cycle_now=false` or `remeasure=false` take the profile's."""
    from daydream.optimizations import _common
    from daydream.optimizations._corun import forget_measured
    from daydream.optimizations.hfta import HFTA

    trace, dev, foot = _cycle_case(own_trace)
    monkeypatch.setattr(HFTA, "_measured_ratios", lambda self, ctx, tasks: {})
    forget_measured()
    monkeypatch.setitem(_common._CYCLE_NOW, 1, ((foot, 1.0), (2 * foot, 1.25)))
    now, _ = predict(trace, ["hfta:models=2"], device=dev)
    assert now.metrics["cycle_factor"] == pytest.approx(1.25)
    assert any("the cycle figures measured now" in n for n in now.notes)
    for spec in ("hfta:models=2,cycle_now=false", "hfta:models=2,remeasure=false"):
        prof, _ = predict(trace, [spec], device=dev)
        assert prof.metrics["cycle_factor"] == pytest.approx(1.1), spec
        assert any("the profile's cycle figures" in n for n in prof.notes)
    forget_measured()


def test_cycle_footprint_counts_each_copys_activations(own_trace):
    """By default a copy's footprint on the cycle curve is its parameters, momentum and leaf
    modules' outputs: a profile reading x1.1 at twice that footprint gives x1.1 fused 2-fold.
    `activations=false` takes the state alone, where that curve reads something else."""
    import dataclasses

    from daydream.optimizations._common import activation_bytes

    trace = own_trace("mlp")
    mods = trace.ranks[0].meta["daydream"]["modules"]
    state = 2 * sum(int(m.get("param_bytes") or 0) for m in mods)              # momentum SGD
    acts = activation_bytes(mods)
    assert acts > 0
    dev = dataclasses.replace(flat_profile(), cycle=((state + acts, 1.0), (2 * (state + acts), 1.1)))
    on, _ = predict(trace, ["hfta:models=2,remeasure=0"], device=dev)
    off, _ = predict(trace, ["hfta:models=2,remeasure=0,activations=false"], device=dev)
    assert on.metrics["cycle_factor"] == pytest.approx(1.1)
    state_only = dev.cycle_factor(2 * state) / dev.cycle_factor(state)
    assert state_only != pytest.approx(1.1)
    assert off.metrics["cycle_factor"] == pytest.approx(state_only)
    assert on.predicted_ms != pytest.approx(off.predicted_ms)
    kept = [[n for n in rep.notes if "the fused job keeps" in n] for rep in (on, off)]
    assert "and activations" in kept[0][0] and "and activations" not in kept[1][0]


def test_cpu_trace_convolutions_and_matmuls_rerun_fused(own_trace, profile):
    """On a CPU trace with shapes the compute ops are timed fused on this machine (all of them here)."""
    rep, _ = predict(own_trace("cnn"), ["hfta:models=2"], device=profile)
    note = next(n for n in rep.notes if "re-run fused" in n)
    assert "x2 on this machine" in note and int(note.split()[1]) >= 16     # 8 convolutions x (fwd, bwd) + matmuls
    curve, _ = predict(own_trace("cnn"), ["hfta:models=2,remeasure=0"], device=profile)
    assert not any("re-run" in n for n in curve.notes) and curve.predicted_ms != rep.predicted_ms


def test_the_fused_rerun_follows_the_data_flow_unless_told_not_to(own_trace, profile, monkeypatch):
    """The convolutions' fused re-run runs as one iteration's sequence, chained along the data flow
    by default (each op reading a recent output of its layout), and not with `chained=false`;
    the ratios it returns scale the compute tasks."""
    import daydream.optimizations.hfta as hfta_opt

    calls = []

    def fake(sigs, copies, threads=None, sequence=None, chained=False, layout="hfta", warm=False, data=()):
        calls.append((copies, chained, len(sequence or ()), layout, warm, len(data)))
        return {s: 3.0 for s in sigs}

    monkeypatch.setattr(hfta_opt, "fused_time_ratios", fake)
    trace = own_trace("cnn")
    rep, _ = predict(trace, ["hfta:models=2"], device=profile)
    off, _ = predict(trace, ["hfta:models=2,chained=false,layout=traced,warm=true"], device=profile)
    assert [c[:2] + c[3:5] for c in calls] == [(2, True, "hfta", False), (2, False, "traced", True)]
    assert min(c[2] for c in calls) >= 16
    assert rep.predicted_ms == pytest.approx(off.predicted_ms)      # same ratios: same prediction
    # with remeasure_memory the memory-bound ops join the sequence, fused as data-moving ops
    memory, _ = predict(trace, ["hfta:models=2,remeasure_memory=true"], device=profile)
    assert calls[0][5] == 0 and calls[-1][5] >= 10 and calls[-1][2] > calls[0][2]
    assert memory.predicted_ms > rep.predicted_ms           # x3 for them too, not the streaming model's
    curve, _ = predict(trace, ["hfta:models=2,remeasure=0"], device=profile)
    assert rep.predicted_ms > curve.predicted_ms                     # x3 for 2 copies: slower than the curves


def test_bad_input_is_refused_with_the_reason(own_trace, maker):
    with pytest.raises(OptionError, match="at least 1"):
        predict(own_trace("mlp"), ["hfta:models=0"], device=flat_profile())
    with pytest.raises(OptionError, match="would not fit"):
        predict(own_trace("mlp"), ["hfta:models=100000"], device=flat_profile())
    with pytest.raises(OptionError, match="not a int"):
        get("hfta:models=two")
    from daydream.optimizations import WhatIfContext

    cpu = maker.lane(LaneKind.CPU_THREAD)
    maker.task(cpu, 100, name="aten::linear", phase=Phase.FORWARD)
    maker.g.markers = {0: []}
    with pytest.raises(NotApplicable, match="no compute or memory-bound ops"):
        get("hfta:models=2").apply(WhatIfContext(graph=maker.g, trace=None, device=flat_profile()))


def _train_fused_and_copies(fused, copies, lrs, x, y, steps: int = 2):
    """``steps`` SGD steps of the fused model (one lr per copy) and of each copy on its own."""
    import torch
    from torch.nn import functional as F

    from daydream.workloads.hfta import FusedSGD, _loss

    opt = FusedSGD(fused.parameters(), lrs, momentum=0.9)
    refs = [torch.optim.SGD(c.parameters(), lr=float(lr), momentum=0.9) for c, lr in zip(copies, lrs)]
    for _ in range(steps):
        opt.zero_grad()
        _loss(fused, x, y).backward()
        opt.step()
        for c, r in zip(copies, refs):
            r.zero_grad()
            F.cross_entropy(c(x), y).backward()
            r.step()


def _aten_calls(step, names=("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")) -> list:
    """``(op, dims, strides)`` of each call of ``names`` (default: the GEMMs) that ``step()`` runs,
    autograd's backward included (recorded below autograd, as the aten calls are made)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    calls = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = f"aten::{func.overloadpacket.__name__}"
            if name in names:
                ts = [a for a in args if isinstance(a, torch.Tensor)]
                calls.append((name, [list(t.shape) for t in ts], [list(t.stride()) for t in ts]))
            return func(*args, **(kwargs or {}))

    with Record():
        step()
    return calls


@pytest.mark.parametrize("width", [512, 10])
def test_fused_linear_calls_are_those_hftas_linear_makes(width):
    """Each GEMM of a traced linear layer (forward and backward) becomes exactly the call that the
    fused workload's HFTA-style ``FusedLinear`` makes over 2 copies, operands' layouts included: its
    weights are ``[N, in, out]`` row-major, and a narrow layer's weight gradient computed that way
    runs several times longer than N copies of the traced call stacked (session 82)."""
    import json

    import torch

    from daydream.opbench import fused_signature
    from daydream.workloads.hfta import FusedLinear

    def step(model, x):
        y = model(x)
        y.backward(torch.randn_like(y))      # a gradient of its own layout (a sum's would be expanded)

    def signature(name, dims, strides):
        return json.dumps([name, dims, ["float"] * len(dims), strides, [""] * len(dims)])

    copies = [torch.nn.Linear(64, width) for _ in range(2)]
    x1, xs = torch.randn(16, 64, requires_grad=True), torch.randn(2, 16, 64, requires_grad=True)
    single = _aten_calls(lambda: step(copies[0], x1))
    fused = _aten_calls(lambda: step(FusedLinear(copies), xs))
    assert len(single) == len(fused) == 3
    for call, want in zip(single, fused):
        got = json.loads(fused_signature(signature(*call), 2))
        assert (got[0], got[1], got[3]) == want
    weight_grad = signature(*single[-1])
    stacked = json.loads(fused_signature(weight_grad, 2, "traced"))
    assert stacked[1] == [[2] + d for d in single[-1][1]] and stacked[1] != fused[-1][1]
    with pytest.raises(ValueError, match="layout must be one of hfta, traced"):
        fused_signature(weight_grad, 2, "columns")


def test_fused_data_moving_calls_are_those_the_fused_cnn_makes():
    """Each batch norm, ReLU backward and residual add of the CNN (forward and backward) becomes,
    fused over 2 copies, exactly a call that the fused workload's ``FusedCNN`` makes: channels
    N-fold, per-channel weights and statistics N-fold, strides in the traced memory order."""
    import json

    import torch

    from daydream.opbench import fused_data_signature
    from daydream.workloads.cnn import SmallResNet
    from daydream.workloads.hfta import FusedCNN

    names = ("aten::native_batch_norm", "aten::native_batch_norm_backward", "aten::threshold_backward",
             "aten::add")
    torch.manual_seed(0)
    copies = [SmallResNet(4, 2, 1, 3) for _ in range(2)]
    fused_model, x = FusedCNN(copies), torch.randn(4, 3, 8, 8)
    single = _aten_calls(lambda: copies[0](x).sum().backward(), names)
    fused = {(n, json.dumps(d), json.dumps(s)) for n, d, s in
             _aten_calls(lambda: fused_model(x).sum().backward(), names)}
    assert {n for n, _, _ in single} == set(names)
    for name, dims, strides in single:
        if name == "aten::add" and len(dims[0]) != 4:
            continue                        # the loss's scalar adds: not the model's data
        got = json.loads(fused_data_signature(json.dumps([name, dims, ["float"] * len(dims), strides,
                                                          [""] * len(dims)]), 2))
        assert (name, json.dumps(got[1]), json.dumps(got[3])) in fused, (name, dims)


def test_fused_workload_trains_each_copy_like_the_unfused_model():
    torch = pytest.importorskip("torch")
    from daydream.workloads.hfta import FusedMLP
    from daydream.workloads.mlp import MLP

    torch.manual_seed(0)
    copies = [MLP(8, 16, 2, 3) for _ in range(3)]
    fused = FusedMLP(copies)
    lrs = torch.tensor([0.1, 0.05, 0.025])
    x, y = torch.randn(5, 8), torch.randint(0, 3, (5,))
    _train_fused_and_copies(fused, copies, lrs, x, y)
    out = fused(x)
    for i, c in enumerate(copies):
        torch.testing.assert_close(out[i], c(x), rtol=1e-5, atol=1e-6)


def test_fused_workload_runs(capsys):
    pytest.importorskip("torch")
    from daydream.workloads import hfta

    times = hfta.main(["--models", "2", "--in-features", "16", "--hidden", "32", "--layers", "2",
                       "--batch-size", "8", "--steps", "3", "--quiet", "--dataset-batches", "2"])
    assert len(times) == 3 and all(t > 0 for t in times)
    assert "hfta: 2 fused mlp models, 3 steps" in capsys.readouterr().out


def test_fused_cnn_trains_each_copy_like_the_unfused_model():
    torch = pytest.importorskip("torch")
    from daydream.workloads.cnn import SmallResNet
    from daydream.workloads.hfta import FusedCNN

    torch.manual_seed(0)
    copies = [SmallResNet(4, 2, 1, 3) for _ in range(2)]
    fused = FusedCNN(copies)
    lrs = torch.tensor([0.1, 0.02])
    x, y = torch.randn(4, 3, 8, 8), torch.randint(0, 3, (4,))
    _train_fused_and_copies(fused, copies, lrs, x, y)
    fused.eval()
    out = fused(x)
    for i, c in enumerate(copies):
        c.eval()
        torch.testing.assert_close(out[i], c(x), rtol=1e-4, atol=1e-5)


def test_docstring_examples():
    import doctest

    from daydream.optimizations import hfta

    assert doctest.testmod(hfta).failed == 0


def test_fused_linear_uses_the_calibrated_batched_matmul_curve():
    from daydream.device import Curve, DeviceProfile
    from daydream.graph.graph import DependencyGraph
    from daydream.model import Lane, LaneKind, Phase
    from daydream.optimizations.hfta import fused_durations

    g = DependencyGraph()
    cpu = g.add_lane(Lane(0, LaneKind.CPU_THREAD, 1, 1))
    g.add_tasks(lane=[cpu], dur_ns=[1000], name=[g.names.intern("aten::mm")], flops=[10**6], bytes=[0],
                phase=[Phase.FORWARD])
    mm = {"float32": Curve(((1e6, 1e9), (4e6, 2e9)))}
    plain = DeviceProfile("d", "cpu", mm, {"float32": Curve.flat(1e9)}, op_overhead_ns=500)
    batched = DeviceProfile("d", "cpu", mm, {"float32": Curve.flat(1e9)}, op_overhead_ns=500,
                            bmm={"float32": Curve.flat(1.6e9)})
    assert fused_durations(g, plain, 4).tolist() == [2000]      # 4x work at the matmul curve's 2x rate
    assert fused_durations(g, batched, 4).tolist() == [2500]    # 4x work at bmm's 1.6x rate
    again = DeviceProfile.from_json(batched.to_json())
    assert again.bmm_flops_per_s("float32", 4e6) == 1.6e9 and plain.bmm_flops_per_s("float32", 1e6) == 1e9


def test_calibration_measures_batched_matmul_and_grouped_convolution():
    torch = pytest.importorskip("torch")
    from daydream import calibrate as C

    dev = torch.device("cpu")
    bmm = C._bmm_curve(torch, dev, torch.float32, [(4, 8, 8), (8, 16, 16)], 0.001, copies=3)
    assert [f for f, _ in bmm.points] == [2.0 * 4 * 8 * 8 * 3, 2.0 * 8 * 16 * 16 * 3]   # FLOPs of all copies
    gconv = C._conv_curve(torch, dev, torch.float32, [(1, 2, 2, 4)], 0.001, groups=2)
    assert [f for f, _ in gconv.points] == [2.0 * 1 * 2 * 4 * 4 * 2 * 9 * 2]
    assert all(r > 0 for _, r in bmm.points + gconv.points)


def test_memory_bound_growth_past_a_cache_cliff_by_each_streaming_rule():
    """Streaming time of an elementwise op fused 20-fold, exact: past a cache cliff the curve's
    rule slows it by the curve's ratio at 20x the bytes whatever its traced rate; the roofline
    (the default) keeps a traced rate already below the curve's at 20x the bytes and slows a
    faster one to the curve's; none gets faster per byte than traced."""
    from daydream.graph.graph import DependencyGraph
    from daydream.model import Lane

    g = DependencyGraph()
    cpu = g.add_lane(Lane(0, LaneKind.CPU_THREAD, 1, 1))
    relu = g.names.intern("aten::relu")
    g.add_tasks(lane=[cpu] * 2, dur_ns=[500 + 8000, 500 + 1000], name=[relu] * 2, flops=[0, 0],
                bytes=[4000, 4000], phase=[Phase.FORWARD] * 2)   # 6000 bytes moved each; fused: 120 kB

    def dev(small, large):
        return DeviceProfile("d", "cpu", {"float32": Curve.flat(1e9)},
                             {"float32": Curve(((1e4, small), (1e5, large)))}, op_overhead_ns=500)

    cliff = dev(1e10, 1e9)           # 10x slower out of cache
    assert fused_durations(g, cliff, 20, streaming="curve").tolist() == [500 + 20 * 8000 * 10,
                                                                         500 + 20 * 1000 * 10]
    # traced at 0.75 GB/s (below the curve's 1 GB/s at 120 kB: kept) and at 6 GB/s (slowed 6x)
    assert fused_durations(g, cliff, 20).tolist() == [500 + 20 * 8000, 500 + 20 * 1000 * 6]
    # the traced time past the curve's (0.75 and 0.067 ns/B) stays, the curve's 0.1 ns/B becomes 1
    assert fused_durations(g, cliff, 20, streaming="additive").tolist() == [
        500 + round(20 * 8000 * (8000 / 6000 - 0.1 + 1) / (8000 / 6000)),
        500 + round(20 * 1000 * (1000 / 6000 - 0.1 + 1) / (1000 / 6000))]
    rising = dev(1e9, 1e10)          # the curve speeds up with size: traced rate kept
    for rule in STREAMING:
        assert fused_durations(g, rising, 20, streaming=rule).tolist() == [500 + 20 * 8000, 500 + 20 * 1000]
    with pytest.raises(OptionError, match="streaming='fast'"):
        fused_durations(g, cliff, 2, streaming="fast")


def test_the_streaming_option_reaches_the_prediction(own_trace):
    """``hfta:streaming=...`` picks the rule: with a curve far above every traced op's rate at one
    copy's bytes, the curve's rule slows them all by its fall, the roofline less."""
    dev = DeviceProfile("d", "cpu", {"float32": Curve.flat(1e10)},
                        {"float32": Curve(((1e3, 1e12), (1e9, 1e9)))}, op_overhead_ns=500)
    got = {rule: predict(own_trace("mlp"), [f"hfta:models=4,remeasure=0,streaming={rule}"], device=dev)[0]
           for rule in STREAMING}
    assert got["roofline"].predicted_ms < got["additive"].predicted_ms < got["curve"].predicted_ms
    default, _ = predict(own_trace("mlp"), ["hfta:models=4,remeasure=0"], device=dev)
    assert default.predicted_ms == pytest.approx(got["roofline"].predicted_ms)
    with pytest.raises(OptionError, match="streaming"):
        predict(own_trace("mlp"), ["hfta:models=4,remeasure=0,streaming=fast"], device=dev)


def test_every_slice_of_a_compute_op_grows_as_its_work_slice():
    """An op with a nested call is two self-time slices and only one carries its FLOPs
    (``convolution_backward``'s grad-input and grad-weight halves): both grow 4x; the nested
    allocation and an unrelated op with no work stay."""
    from daydream.graph.graph import DependencyGraph
    from daydream.model import Lane

    g = DependencyGraph()
    cpu = g.add_lane(Lane(0, LaneKind.CPU_THREAD, 1, 1))
    nm = [g.names.intern(s) for s in ("aten::convolution_backward", "aten::empty", "aten::convolution_backward",
                                      "aten::linear")]
    g.add_tasks(lane=[cpu] * 4, dur_ns=[3000, 200, 5000, 700], name=nm, event=[1, 2, 1, 3],
                flops=[0, 0, 10**6, 0], bytes=[0, 0, 0, 0], phase=[Phase.BACKWARD] * 3 + [Phase.FORWARD])
    assert fused_durations(g, flat_profile(), 4).tolist() == [12000, 200, 20000, 700]


def _wrapper_graph():
    """``aten::relu_`` around the ``aten::clamp_min_`` that moves its data, and ``aten::sum``
    around the small ``aten::fill_`` that zeroes its output first (traced times: nesting)."""
    from daydream.graph.graph import DependencyGraph
    from daydream.model import Lane

    g = DependencyGraph()
    cpu = g.add_lane(Lane(0, LaneKind.CPU_THREAD, 1, 1))
    nm = [g.names.intern(s) for s in ("aten::relu_", "aten::clamp_min_", "aten::relu_", "aten::sum", "aten::fill_",
                                      "aten::sum", "aten::as_strided_")]
    g.add_tasks(lane=[cpu] * 7, event=[0, 1, 0, 2, 3, 2, 4], dur_ns=[2000, 5000, 1000, 3000, 1500, 6000, 900],
                traced_start_ns=[0, 2000, 7000, 9000, 12000, 13500, 20000], name=nm,
                bytes=[4096, 4096, 0, 4096, 64, 0, 4096], phase=[Phase.FORWARD] * 7)
    return g


def test_a_wrapper_of_the_op_moving_its_data_is_paid_once():
    """Fused 4-fold on a flat device (1 us fixed per op): ``relu_``'s own slices are dispatch and
    stay, its nested ``clamp_min_`` streams 4x; ``sum`` moves its data itself (its nested
    ``fill_`` reads a sixty-fourth of its bytes) and grows as its work slice; ``as_strided_`` is
    metadata.  ``wrappers_once=False`` scales ``relu_`` as a mover of its input bytes."""
    g = _wrapper_graph()
    assert classify(g).tolist() == [TaskClass.FIXED, TaskClass.MEMORY, TaskClass.FIXED, TaskClass.MEMORY,
                                    TaskClass.MEMORY, TaskClass.FIXED, TaskClass.FIXED]
    dev = flat_profile(overhead_ns=1000)
    assert fused_durations(g, dev, 4).tolist() == [2000, 17000, 1000, 9000, 3000, 18000, 900]
    assert fused_durations(g, dev, 4, wrappers_once=False).tolist() == [5000, 17000, 2500, 9000, 3000, 18000, 900]


def test_the_wrappers_option_reaches_the_prediction(own_trace):
    """On the bundled MLP trace (``aten::linear`` > ``aten::addmm``, ``aten::relu_`` >
    ``aten::clamp_min_``, ...) scaling the wrappers as movers predicts a slower fused job."""
    dev = flat_profile(overhead_ns=500)
    once, _ = predict(own_trace("mlp"), ["hfta:models=4,remeasure=0,cycle=0"], device=dev)
    moved, _ = predict(own_trace("mlp"), ["hfta:models=4,remeasure=0,cycle=0,wrappers_once=0"], device=dev)
    assert once.predicted_ms < moved.predicted_ms


@pytest.mark.parametrize("name", ["aten::as_strided_", "aten::resize_", "detach"])
def test_metadata_ops_with_input_bytes_stay_fixed(maker, name):
    """In-place metadata (``as_strided_``, ``resize_``) and autograd's ``detach`` touch no data,
    though the trace gives them input bytes."""
    cpu = maker.lane(LaneKind.CPU_THREAD)
    t = maker.task(cpu, 900, name=name, bytes=4096, phase=Phase.FORWARD)
    assert classify(maker.g)[t] == TaskClass.FIXED
    assert fused_durations(maker.g, flat_profile(), 4)[t] == 900
