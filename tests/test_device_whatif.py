"""``device`` what-if and ``daydream devices``: exact rescaling on hand-made graphs, refusals, CLI."""
from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner

from daydream.device import Curve, DeviceProfile, save_profile
from daydream.model import EventKind, LaneKind, Phase
from daydream.optimizations import NotApplicable, OptionError, WhatIfContext, get
from daydream.sim import simulate

from conftest import REPO, flat_profile


def _stub_trace():
    cols = {k: np.zeros(0, np.int64) for k in ("kind", "start_ns", "dur_ns", "flops", "bytes", "lane")}
    return SimpleNamespace(ranks=[SimpleNamespace(rank=0, meta={}, cols=cols, signatures=[])])


def _gpu(name, fp32, fp16, bw, link):
    return DeviceProfile(name=name, kind="gpu", op_overhead_ns=4000,
                         matmul={"float32": Curve.flat(fp32), "float16": Curve.flat(fp16)},
                         elementwise={"float32": Curve.flat(bw)}, collective={"nccl": (link, 10_000.0)})


def _gpu_graph(maker):
    cpu, stream = maker.lane(LaneKind.CPU_THREAD), maker.lane(LaneKind.GPU_STREAM)
    t = {"host": maker.task(cpu, 5000, name="aten::linear", phase=Phase.FORWARD),
         "sgemm": maker.task(stream, 1000, name="ampere_sgemm_128x64_tn"),
         "hgemm": maker.task(stream, 1000, name="volta_h884gemm_64x64_nn"),
         "relu": maker.task(stream, 1000, name="vectorized_elementwise_kernel", bytes=10**6),
         "nccl": maker.task(stream, 1000, name="ncclDevKernel_AllReduce_Sum_f32", kind=EventKind.COLLECTIVE),
         "copy": maker.task(stream, 1000, name="Memcpy HtoD (Pageable -> Device)", kind=EventKind.MEMCPY)}
    return t


def _target(monkeypatch, profile):
    import daydream.optimizations.device as dev_mod

    monkeypatch.setattr(dev_mod, "target_profile", lambda spec: profile)


def test_gpu_kernels_rescale_by_their_bound_and_host_work_stays(maker, monkeypatch):
    t = _gpu_graph(maker)
    src, dst = _gpu("S", 1e13, 1e14, 1e12, 1e11), _gpu("D", 2e13, 4e14, 4e12, 2e11)
    _target(monkeypatch, dst)
    ctx = WhatIfContext(graph=maker.g, trace=_stub_trace(), device=src)
    get("device:target=x").apply(ctx)
    d = {k: int(maker.g.tasks["dur_ns"][v]) for k, v in t.items()}
    # fp32 GEMM x 1/2, tensor-core GEMM x 1/4, elementwise x 1/4 (bandwidth), NCCL x 1/2, host and copy stay
    assert d == {"host": 5000, "sgemm": 500, "hgemm": 250, "relu": 250, "nccl": 500, "copy": 1000}
    assert ctx.metrics["compute_bound_tasks"] == 2 and ctx.metrics["memory_bound_tasks"] == 1
    assert ctx.metrics["compute_time_ratio"] == pytest.approx(750 / 2000)


def test_cpu_ops_rescale_by_the_profiles_curves(maker, monkeypatch):
    cpu = maker.lane(LaneKind.CPU_THREAD)
    mm = maker.task(cpu, 1000, name="aten::addmm", flops=10**9, bytes=10**5)
    ew = maker.task(cpu, 1000, name="aten::add", bytes=10**6)
    disp = maker.task(cpu, 1000, name="aten::view")
    src = flat_profile(matmul=1e10, bw=1e10)
    dst = flat_profile(matmul=3e10, bw=2e10)
    _target(monkeypatch, dst)
    get("device:target=x").apply(WhatIfContext(graph=maker.g, trace=_stub_trace(), device=src))
    assert [int(maker.g.tasks["dur_ns"][x]) for x in (mm, ew, disp)] == [333, 500, 1000]
    assert int(simulate(maker.g).end_ns.max()) == 1833


def test_roofline_sends_low_intensity_flops_to_bandwidth(maker):
    cpu = maker.lane(LaneKind.CPU_THREAD)
    low = maker.task(cpu, 1000, name="aten::mul", flops=10**6, bytes=10**7)   # 0.1 flop/byte < ridge 1
    ctx = WhatIfContext(graph=maker.g, trace=_stub_trace(), device=flat_profile(matmul=1e10, bw=1e10))
    from daydream.optimizations.device import Boundness, Device

    cls, _, _ = Device.classify(ctx)
    assert int(cls[low]) == Boundness.MEMORY


def test_target_from_a_profile_file_and_refusals(tmp_path, maker):
    path = save_profile(flat_profile(matmul=2e10, bw=1e10), str(tmp_path / "fast.json"))
    cpu = maker.lane(LaneKind.CPU_THREAD)
    mm = maker.task(cpu, 1000, name="aten::mm", flops=10**9)
    get(f"device:target={path}").apply(WhatIfContext(graph=maker.g, trace=_stub_trace(), device=flat_profile()))
    assert int(maker.g.tasks["dur_ns"][mm]) == 500
    with pytest.raises(OptionError, match="known: V100"):
        get("device:target=TPU9").apply(WhatIfContext(graph=maker.g, trace=_stub_trace(), device=flat_profile()))
    with pytest.raises(OptionError, match="no profile file"):
        get(f"device:target={tmp_path}/none.json").apply(
            WhatIfContext(graph=maker.g, trace=_stub_trace(), device=flat_profile()))
    with pytest.raises(OptionError, match="give target"):
        get("device").apply(WhatIfContext(graph=maker.g, trace=_stub_trace(), device=flat_profile()))
    with pytest.raises(NotApplicable, match="CPU trace cannot be mapped onto GPU"):
        get("device:target=A100").apply(WhatIfContext(graph=maker.g, trace=_stub_trace(), device=flat_profile()))


def test_devices_command_prints_a_table_with_costs(tmp_path, own_trace):
    from daydream.cli import main
    from conftest import REPO

    prof = save_profile(flat_profile(), str(tmp_path / "src.json"))
    fast = save_profile(flat_profile(matmul=4e10, bw=2e10), str(tmp_path / "fast.json"))
    prices = tmp_path / "prices.csv"
    prices.write_text("device,usd_per_hour\nfast.json,3.6\n")
    out = CliRunner().invoke(main, ["devices", str(REPO / "traces" / "mlp.trace.json.gz"), "--device",
                                    f"{fast}", "--profile", prof, "--prices", str(prices), "--json"])
    assert out.exit_code == 0, out.output
    rows = json.loads(out.stdout)["devices"]
    assert rows[0]["speedup"] > 1
    # 3.6 USD/h = 0.001 USD/s: cost of 1000 iterations = predicted seconds per iteration x 1000 x 0.001
    assert rows[0]["usd_per_1000_iterations"] == pytest.approx(rows[0]["predicted_ms"] / 1000 * 1000 * 0.001)
    bad = CliRunner().invoke(main, ["devices", str(REPO / "traces" / "mlp.trace.json.gz"), "--device", "TPU9",
                                    "--profile", prof])
    assert bad.exit_code == 2 and "known: V100" in bad.output and "Traceback" not in bad.output
    mixed = CliRunner().invoke(main, ["devices", str(REPO / "traces" / "mlp.trace.json.gz"), "--device",
                                      f"A100,{fast}", "--profile", prof])
    assert mixed.exit_code == 0 and "refused" in mixed.output and "cannot be mapped onto GPU" in mixed.output


def test_price_tables(tmp_path):
    from daydream.cli_parallel import read_prices
    from daydream.errors import DaydreamError

    (tmp_path / "p.json").write_text('{"A100": 4, "H100": "9.5"}')
    (tmp_path / "p.csv").write_text("A100,4\nH100,9.5\n")
    assert read_prices(str(tmp_path / "p.json")) == read_prices(str(tmp_path / "p.csv")) == {"A100": 4.0, "H100": 9.5}
    (tmp_path / "bad.csv").write_text("device,usd_per_hour\nA100,cheap\n")
    with pytest.raises(DaydreamError, match="not a price table"):
        read_prices(str(tmp_path / "bad.csv"))


def test_public_gpu_trace_onto_published_gpus(shared_dir):
    from daydream import load_trace
    from daydream.whatif import predict

    trace = load_trace(shared_dir / "HolisticTraceAnalysis" / "control.json.gz")
    same, _ = predict(trace, ["device:target=A100"])              # traced on an A100: nothing changes
    assert same.predicted_ms == pytest.approx(same.baseline_ms)
    slow, _ = predict(trace, ["device:target=V100"])
    assert slow.metrics["compute_time_ratio"] > 1 and slow.metrics["memory_time_ratio"] == pytest.approx(2039 / 900)
    assert slow.predicted_ms >= same.predicted_ms


def test_cpu_target_of_this_machine_rescales_ops_by_their_rerun_thread_ratio(own_trace, monkeypatch, tmp_path):
    """The bundled trace (2 threads) onto a 1-thread profile measured on this host: every re-run
    op takes its measured ratio (here a stand-in: 0.5 for every op); a profile from another
    host keeps the curves."""
    import dataclasses

    import daydream.optimizations.device as device_opt
    from daydream.device import measured_on
    from daydream.whatif import predict

    calls = []

    def halve(sigs, threads, to_threads, sequence=None, chained=False, recycle=True, warm=False):
        calls.append((threads, to_threads, chained))
        in_seq = {s for s, *_ in sequence}                        # one iteration's ops, in order
        assert sequence and in_seq <= set(sigs) and any('"aten::addmm"' in s for s in in_seq)
        return {s: 0.5 for s in sigs}

    monkeypatch.setattr(device_opt, "thread_time_ratios", halve)
    src = dataclasses.replace(flat_profile(), threads=2)
    here = dataclasses.replace(src, threads=1, source=f"{measured_on()} 2026-11-22 09:22")
    elsewhere = dataclasses.replace(here, source=f"{measured_on('another-host')} 2026-11-22 09:22")
    trace = own_trace("mlp")
    got = {}
    for name, prof in (("here", here), ("elsewhere", elsewhere)):
        path = save_profile(prof, str(tmp_path / f"{name}.json"))
        rep, res = predict(trace, [f"device:target={path}"], device=src)
        got[name] = rep.metrics
    assert calls and set(calls) == {(2, 1, True)}
    assert got["here"]["compute_time_ratio"] == pytest.approx(0.5, abs=0.01)
    assert got["elsewhere"]["compute_time_ratio"] == pytest.approx(1.0)     # flat curves, same figures


def test_the_optimizers_in_place_updates_rerun_on_the_weights_the_forward_reads(monkeypatch, tmp_path):
    """In the re-run sequence an optimizer's in-place update (element-wise: its signature kept for
    its bytes) names the layer weight that the forward's ``addmm`` of that layer reads."""
    import dataclasses
    import json

    import daydream.optimizations.device as device_opt
    from daydream import load_trace
    from daydream.device import measured_on
    from daydream.whatif import predict

    trace = load_trace(REPO / "traces" / "mlp.trace.json.gz")       # a copy: its module table gets shapes
    for m in trace.ranks[0].meta["daydream"]["modules"]:             # (newer traces record them)
        if m.get("param_bytes"):
            out = 10 if m["path"] == "MLP.head" else 512
            m["param_shapes"] = [[out, 512], [out]]
    seen = []
    monkeypatch.setattr(device_opt, "thread_time_ratios",
                        lambda sigs, threads, to_threads, sequence=None, chained=False, recycle=True, warm=False:
                        seen.extend(sequence) or {})
    src = dataclasses.replace(flat_profile(), threads=2)
    here = dataclasses.replace(src, threads=1, source=f"{measured_on()} 2026-11-22 09:22")
    predict(trace, [f"device:target={save_profile(here, str(tmp_path / 'here.json'))}"], device=src)
    forward = {k for s, keys, *_ in seen if json.loads(s)[0] == "aten::addmm" for k in keys or () if k}
    written = {keys[0] for s, keys, *_ in seen if json.loads(s)[0].endswith("_") and keys and keys[0]}
    updates = {k for k in written if not k.endswith((".state", ".grad"))}
    assert "MLP.blocks.0.0#0" in forward and "MLP.blocks.0.0#0" in updates and updates <= forward
    # the updates read each parameter's gradient, which a backward op of its layer produces
    read = {k for _, keys, *_ in seen for k in (keys or ())[1:] if k and k.endswith(".grad")}
    produced = {key for _, _, grads, _ in seen for _, key in grads or ()}
    assert "MLP.blocks.0.0#0.grad" in read and read <= produced


def test_the_rerun_benchmarks_sum_the_covered_ops_alike_for_training_and_the_rerun(monkeypatch):
    """``benchmarks/device_rerun_gap.py`` and ``device_warm.py`` take one covered-ops ratio for
    training's blocks and the re-run's: training's names missing at 2 threads count 0."""
    import doctest
    import importlib
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    gap = importlib.import_module("device_rerun_gap")
    times = gap.training_times({"mm": 100.0, "add_": 10.0, "gelu": 5.0}, {"mm": 60.0, "add_": 9.0}, ["mm", "add_"])
    assert gap.covered_ratio(times, ["mm", "add_"]) == pytest.approx(69 / 110)
    assert gap.covered_ratio(gap.training_times({"a": 4.0}, {}, ["a"]), ["a"]) == 0.0
    for name in ("device_rerun_gap", "device_warm"):
        assert doctest.testmod(importlib.import_module(name)).failed == 0
