"""``tensor-parallel``: exact times on a hand-made graph, refusals, the project's own traces."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from daydream.model import Phase
from daydream.optimizations import NotApplicable, WhatIfContext, get
from daydream.optimizations.tensor_parallel import api_overhead_ns as measured_api_overhead_ns
from daydream.sim import simulate

from conftest import GraphMaker, flat_profile

MODULES = [
    {"path": "M", "type": "x.M", "param_bytes": 0},
    {"path": "M.attn", "type": "x.Attention", "param_bytes": 0},
    {"path": "M.attn.qkv", "type": "torch.nn.modules.linear.Linear", "param_bytes": 3000, "output_bytes": 3_000_000},
    {"path": "M.attn.proj", "type": "torch.nn.modules.linear.Linear", "param_bytes": 1000, "output_bytes": 1_000_000},
    {"path": "M.ln", "type": "torch.nn.modules.normalization.LayerNorm", "param_bytes": 4000},
]


def _stub_trace(modules=MODULES):
    cols = {k: np.zeros(0, np.int64) for k in ("kind", "start_ns", "dur_ns", "flops", "bytes", "lane")}
    rank = SimpleNamespace(rank=0, meta={"daydream": {"modules": modules}}, cols=cols, signatures=[],
                           world_size=lambda: 1)
    return SimpleNamespace(ranks=[rank])


def _graph(maker):
    """One CPU thread: forward qkv GEMM, attention core, proj GEMM, a norm; backward; optimizer."""
    cpu = maker.lane()
    L = maker.g.layers.intern
    t = {}
    t["qkv"] = maker.task(cpu, 1000, name="aten::addmm", layer=L("M.attn.qkv"), flops=10**9, phase=Phase.FORWARD)
    t["disp"] = maker.task(cpu, 100, name="aten::view", layer=L("M.attn"), phase=Phase.FORWARD)
    t["core"] = maker.task(cpu, 400, name="aten::scaled_dot_product_attention", layer=L("M.attn"),
                           bytes=10**6, phase=Phase.FORWARD)
    t["proj"] = maker.task(cpu, 500, name="aten::addmm", layer=L("M.attn.proj"), flops=10**9, phase=Phase.FORWARD)
    t["ln"] = maker.task(cpu, 300, name="aten::layer_norm", layer=L("M.ln"), bytes=10**6, phase=Phase.FORWARD)
    t["bproj"] = maker.task(cpu, 1000, name="aten::mm", layer=L("M.attn.proj"), flops=10**9, phase=Phase.BACKWARD)
    t["bqkv"] = maker.task(cpu, 2000, name="aten::mm", layer=L("M.attn.qkv"), flops=10**9, phase=Phase.BACKWARD)
    t["opt"] = maker.task(cpu, 800, name="aten::_foreach_add_", layer=L("Optimizer.step#SGD.step"),
                          bytes=8000, phase=Phase.OPTIMIZER)
    for k in t.values():
        maker.g.tasks["iteration"][k] = 1
    return t


@pytest.fixture(autouse=True)
def fixed_api_overhead(monkeypatch):
    """torch's TP API overhead as if measured: 7 us forward, 11 us backward, 3 us optimizer per pair."""
    import daydream.optimizations.tensor_parallel as tp

    monkeypatch.setattr(tp, "api_overhead_ns",
                        lambda *args: {"forward_ns": 7000, "backward_ns": 11000, "optimizer_ns": 3000})


def _apply(maker, spec, **prof):
    ctx = WhatIfContext(graph=maker.g, trace=_stub_trace(), device=flat_profile(**prof))
    get(spec).apply(ctx)
    return ctx


def test_split_memory_bound_op_streams_at_most_as_fast_as_traced(maker):
    """A split op traced under the streaming curve's rate keeps its rate on 1/T of the bytes
    (``streaming=roofline``, the default); ``streaming=curve`` takes the hot-cache curve's
    speed-up at the smaller size, which the validation's 2-rank runs did not show."""
    from daydream.device import Curve

    def core_ns(spec):
        m = GraphMaker()
        t = _graph(m)
        m.g.tasks["dur_ns"][t["core"]] = 301_000          # 3 MB moved (2 MB in) at 10 GB/s, + 1 us overhead
        m.g.tasks["bytes"][t["core"]] = 2_000_000
        ctx = WhatIfContext(graph=m.g, trace=_stub_trace(), device=flat_profile())
        ctx.device.elementwise["float32"] = Curve(((1e5, 1e11), (1e7, 1e10)))   # faster the smaller
        get(spec).apply(ctx)
        return int(m.g.tasks["dur_ns"][t["core"]])

    assert core_ns("tensor-parallel:degree=2,api=megatron") == 1000 + 150_000
    assert core_ns("tensor-parallel:degree=2,api=megatron,streaming=curve") < 1000 + 150_000


def test_split_work_shrinks_and_two_allreduces_are_added_exactly(maker):
    t = _graph(maker)
    ctx = _apply(maker, "tensor-parallel:degree=2,api=megatron")
    d = maker.g.tasks["dur_ns"]
    # flat matmul curve: GEMMs take exactly half; the attention core's 400 ns are all per-op overhead
    assert [int(d[t[k]]) for k in ("qkv", "proj", "bproj", "bqkv")] == [500, 250, 500, 1000]
    assert int(d[t["core"]]) == 400
    assert int(d[t["disp"]]) == 100 and int(d[t["ln"]]) == 300          # dispatch and the norm stay
    # optimizer: params per rank = 4000 replicated + 4000 split / 2 = 6000 of 8000
    assert int(d[t["opt"]]) == 600
    ar = [i for i in range(maker.g.n_tasks) if maker.g.task_name(i).startswith("TP all-reduce")]
    ring = int(2 * 1 / 2 * 1e6 / 1e9 * 1e9 + 2 * 10_000)                 # proj output 1 MB over 2 ranks
    assert [int(d[i]) for i in ar] == [ring, ring]
    seq = maker.g.lane_tasks[0]
    assert seq.index(ar[0]) == seq.index(t["proj"]) + 1 and seq.index(ar[1]) == seq.index(t["bqkv"]) + 1
    total = sum([500, 100, 400, 250, 300, 500, 1000, 600]) + 2 * ring
    assert int(simulate(maker.g).end_ns.max()) == total
    assert ctx.metrics["param_bytes_per_rank"] == 6000
    assert ctx.metrics["allreduce_bytes_per_iteration"] == 2_000_000


def test_gemm_time_follows_the_throughput_curve(maker):
    from daydream.device import Curve, DeviceProfile

    t = _graph(maker)
    prof = flat_profile()
    slow_small = DeviceProfile(name="c", kind="cpu", elementwise=prof.elementwise, op_overhead_ns=1000,
                               matmul={"float32": Curve(((5e8, 5e9), (1e9, 1e10)))}, collective=prof.collective)
    get("tensor-parallel:degree=2").apply(WhatIfContext(graph=maker.g, trace=_stub_trace(), device=slow_small))
    # half the FLOPs at half the rate: no gain
    assert int(maker.g.tasks["dur_ns"][t["qkv"]]) == 1000


def test_degree_one_changes_nothing(maker):
    _graph(maker)
    before = maker.g.tasks["dur_ns"].copy()
    ctx = _apply(maker, "tensor-parallel:degree=1")
    assert np.array_equal(maker.g.tasks["dur_ns"], before) and "changes nothing" in ctx.notes[0]


@pytest.mark.parametrize("spec, msg", [("tensor-parallel:degree=0", "at least 1"),
                                       ("tensor-parallel:degree=2,layers=nothing", "no pair of Linear")])
def test_bad_configurations_are_refused(maker, spec, msg):
    _graph(maker)
    with pytest.raises(NotApplicable, match=msg):
        _apply(maker, spec)


def test_no_module_table_is_refused(maker):
    _graph(maker)
    ctx = WhatIfContext(graph=maker.g, trace=_stub_trace(modules=[]), device=flat_profile())
    with pytest.raises(NotApplicable, match="daydream trace"):
        get("tensor-parallel").apply(ctx)


def test_own_transformer_trace(own_trace):
    from daydream.whatif import predict

    trace = own_trace("transformer")
    rep2, res = predict(trace, ["tensor-parallel:degree=2"], device=flat_profile())
    # split matmuls alone (no DTensor host cost, no straggler wait) beat the single device
    fast, _ = predict(trace, ["tensor-parallel:degree=2,api=megatron,stragglers=false"], device=flat_profile())
    assert fast.predicted_ms < fast.baseline_ms
    names = [res.graph.task_name(i) for i in range(res.graph.n_tasks)]
    per_it = names.count("TP all-reduce (forward)") / trace.ranks[0].n_iterations
    assert per_it == pytest.approx(4)           # 2 blocks x (attention, MLP)
    assert rep2.metrics["allreduce_bytes_per_iteration"] == 8 * 262144
    with pytest.raises(NotApplicable, match="does not divide"):
        predict(trace, ["tensor-parallel:degree=3"], device=flat_profile())
    with pytest.raises(NotApplicable, match="4 attention heads"):
        predict(trace, ["tensor-parallel:degree=8,heads=4"], device=flat_profile())


def test_each_allreduce_waits_for_the_slowest_rank(own_trace):
    from daydream.whatif import predict
    from optimizations._stragglers import WAIT_NAME

    trace = own_trace("transformer")
    on, res = predict(trace, ["tensor-parallel:degree=2"], device=flat_profile())
    off, plain = predict(trace, ["tensor-parallel:degree=2,stragglers=false"], device=flat_profile())
    g = res.graph
    waits = [t for t in range(g.n_tasks) if g.task_name(t) == WAIT_NAME]
    reduces = [t for t in range(g.n_tasks) if g.task_name(t).startswith("TP all-reduce")]
    assert 0 < len(waits) <= len(reduces)
    for t in waits:                                   # each right before an all-reduce, on its lane
        seq = g.lane_tasks[int(g.tasks["lane"][t])]
        assert g.task_name(seq[seq.index(t) + 1]).startswith("TP all-reduce")
    assert not any(plain.graph.task_name(t) == WAIT_NAME for t in range(plain.graph.n_tasks))
    assert on.predicted_ms > off.predicted_ms


def test_own_mlp_trace_pairs_consecutive_linears(own_trace):
    from daydream.whatif import predict

    rep, _ = predict(own_trace("mlp"), ["tensor-parallel:degree=2,api=megatron,stragglers=false"],
                     device=flat_profile())
    note = next(n for n in rep.notes if "pair(s)" in n)
    assert "MLP.blocks.0.0|MLP.blocks.1.0" in note and "head" not in note
    assert rep.predicted_ms < rep.baseline_ms


def test_api_overhead_is_measured_with_the_traced_linears_input_rank(own_trace, monkeypatch):
    """A transformer's linears take (batch, sequence, features): DTensor then also dispatches the
    views that fold it into a matrix, so the overhead is measured on a 3-D input; an MLP's on 2-D;
    both on a pair of the traced sizes (DTensor copies whole activations and gradients)."""
    import daydream.optimizations.tensor_parallel as tp
    from daydream.whatif import predict

    asked = []
    monkeypatch.setattr(tp, "api_overhead_ns", lambda threads, *args: asked.append(args) or
                        {"forward_ns": 7000, "backward_ns": 11000, "optimizer_ns": 3000})
    for name in ("transformer", "mlp"):
        predict(own_trace(name), ["tensor-parallel:degree=2"], device=flat_profile())
    # the all-reduce size is each trace's first row linear's output (gloo figures: a CPU profile)
    assert [d for d, *_ in asked] == [3, 2] and asked[0][1] == 262144 and asked[1][1] > 0
    # and on a pair of the traced sizes: the first column linear's input and output features
    # (the transformer's QKV: 8 x 64 tokens of 128 features to 3 x 128; the MLP's 512 to 512)
    assert [a[2:] for a in asked] == [([8, 64, 128], 384), ([64, 512], 512)]


def test_a_row_without_output_size_is_refused_before_measuring(own_trace, monkeypatch):
    """The all-reduce size is checked before torch's TP API overhead is measured (about 30 s)."""
    import daydream.optimizations.tensor_parallel as tp
    from daydream.whatif import predict

    asked = []
    monkeypatch.setattr(tp, "api_overhead_ns", lambda *a, **k: asked.append(a) or {})
    trace = own_trace("transformer")
    for m in trace.ranks[0].meta["daydream"]["modules"]:
        if m["path"].endswith("attn.proj"):
            m["output_bytes"] = None
    with pytest.raises(NotApplicable, match="no output size for .*attn.proj"):
        predict(trace, ["tensor-parallel:degree=2"], device=flat_profile())
    assert asked == []


def test_the_validation_measures_the_api_overhead_afresh(tmp_path, monkeypatch):
    """The validation forgets the cached DTensor overhead (every cache file of its thread count,
    whatever its input rank and all-reduce size), so it is measured again; other thread counts stay."""
    import subprocess

    from daydream.optimizations.tensor_parallel import API_MESH_RANKS, _torch_version
    from daydream.validation.tensor_parallel import THREADS, _fresh_api_overhead

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    runs = []

    def fake_run(cmd, **kw):
        import json
        import re

        runs.append(cmd)
        sized = re.search(r"input_shape=(\[[0-9, ]*\]), hidden=(\d+)", cmd[-1])
        out = {"forward_ns": 1.0, "backward_ns": 2.0, "optimizer_ns": 3.0, "torch": _torch_version(),
               "profiled": True, "evict_bytes": 1, "mesh_ranks": API_MESH_RANKS, "input_dims": 3,
               "allreduce_bytes": 4096, "input_shape": json.loads(sized.group(1)) if sized else None,
               "hidden": int(sized.group(2)) if sized else 0}
        return subprocess.CompletedProcess(cmd, 0, stdout=json.dumps(out) + "\n", stderr="")

    monkeypatch.setattr(subprocess, "run", fake_run)
    measured_api_overhead_ns(THREADS, 3, 4096)
    measured_api_overhead_ns(THREADS, 3, 4096)
    assert len(runs) == 1                                    # the second call read the cache
    measured_api_overhead_ns(THREADS, 3, 4096, [2, 4, 8], 16)      # a pair of the traced sizes:
    measured_api_overhead_ns(THREADS, 3, 4096, [2, 4, 8], 16)      # its own figure, cached apart
    assert len(runs) == 2 and "input_shape=[2, 4, 8], hidden=16" in runs[-1][-1]
    del runs[1:]
    other = tmp_path / "daydream" / f"tp-api-overhead-{THREADS + 1}t-3d-4096b.json"
    other.write_text("{}")
    _fresh_api_overhead()
    measured_api_overhead_ns(THREADS, 3, 4096)
    assert len(runs) == 2 and other.exists()


def test_torch_api_allreduces_cost_what_they_were_measured_to_cost_in_line(monkeypatch):
    """``api=torch``: an all-reduce of the measured size costs the in-line time measured for it,
    other sizes the ring model's figure scaled alike; ``api=megatron`` keeps the profile's figure."""
    import daydream.optimizations.tensor_parallel as tp

    measured_bytes = 500_000
    ring = lambda nb: int(2 * 1 / 2 * nb / 1e9 * 1e9 + 2 * 10_000)      # flat profile, 2 ranks  # noqa: E731
    monkeypatch.setattr(tp, "api_overhead_ns", lambda *args:
                        {"forward_ns": 0, "backward_ns": 0, "optimizer_ns": 0, "allreduce_bytes": measured_bytes,
                         "allreduce_in_line_ns": 2 * ring(measured_bytes)})
    durations, notes = {}, {}
    for api in ("torch", "megatron"):
        m = GraphMaker()
        _graph(m)
        notes[api] = _apply(m, f"tensor-parallel:degree=2,api={api}").notes
        durations[api] = [int(m.g.tasks["dur_ns"][i]) for i in range(m.g.n_tasks)
                          if m.g.task_name(i).startswith("TP all-reduce")]
    # the graph's all-reduces move 1 MB: twice the measured size's profile figure scaled to 1 MB
    assert durations == {"torch": [2 * ring(1_000_000)] * 2, "megatron": [ring(1_000_000)] * 2}
    assert any("all-reduce of 0.48 MiB as run in training 1.04 ms" in n for n in notes["torch"])


def test_torch_api_overhead_is_added_around_the_column_linear(maker):
    _graph(maker)
    _apply(maker, "tensor-parallel:degree=2,api=megatron")
    megatron = int(simulate(maker.g).end_ns.max())
    maker2 = type(maker)()
    _graph(maker2)
    ctx = _apply(maker2, "tensor-parallel:degree=2,api=torch")
    assert int(simulate(maker2.g).end_ns.max()) == megatron + 7000 + 11000 + 3000
    seq, g = maker2.g.lane_tasks[0], maker2.g
    names = [g.task_name(i) for i in seq]
    assert names[names.index("DTensor dispatch (forward)") + 1] == "aten::addmm"
    assert names[names.index("DTensor dispatch (backward)") - 1] == "TP all-reduce (backward)"
    assert names[names.index("DTensor dispatch (optimizer)") + 1] == "aten::_foreach_add_"
    assert any("measured here" in n for n in ctx.notes)


def test_api_overhead_is_measured_on_a_two_rank_mesh_against_the_pair_split_by_hand():
    """Two gloo processes (about 15 s, mostly start-up): DTensor's pair costs the training thread
    more CPU than the same pair on plain tensors with the same all-reduces."""
    pytest.importorskip("torch")
    from daydream.optimizations.tensor_parallel import API_MESH_RANKS
    from daydream.workloads.tensor_parallel import measure_api_overhead

    out = measure_api_overhead(calls=5, repeats=1, profiled=False, input_dims=3, allreduce_bytes=4096)
    assert out["mesh_ranks"] == API_MESH_RANKS == 2 and out["input_dims"] == 3
    assert out["allreduce_calibrated_ns"] > 0 and out["allreduce_in_line_ns"] > 0
    with pytest.raises(ValueError, match="input_dims"):
        measure_api_overhead(input_dims=1)
    assert out["forward_ns"] > 0 and out["backward_ns"] >= 0 and out["optimizer_ns"] >= 0
    assert out["profiled"] is False and out["threads"] == 1


def test_pair_split_by_hand_matches_the_whole_pair():
    """:class:`MegatronPair` on one rank (all-reduces of one) is the plain two-linear MLP."""
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    from daydream.workloads.tensor_parallel import MegatronPair

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        pair = MegatronPair(8, 1)
        x, y = (torch.randn(4, 8).requires_grad_() for _ in range(2))
        with torch.no_grad():
            y.copy_(x)
        want = torch.relu(y @ pair.col.weight.T + pair.col.bias) @ pair.row.weight.T + pair.bias
        got = pair(x)
        assert torch.allclose(got, want)
        got.square().sum().backward()
        want.square().sum().backward()
        assert torch.allclose(x.grad, y.grad)
    finally:
        dist.destroy_process_group()


def test_the_validation_row_takes_the_co_run_rate_of_the_trace_s_own_ops(tmp_path, monkeypatch):
    """The TP row predicts at ``corun=trace`` (measured when predicting), not the profile's co-run
    snapshot, which read 0.46 and 0.50 in calibrations whose real rounds were not slowed."""
    import types

    import daydream.validation.tensor_parallel as vtp

    specs = []
    monkeypatch.setattr(vtp, "_fresh_api_overhead", lambda: None)
    monkeypatch.setattr(vtp, "iter_paired_rounds", lambda repeat, configs, iterations: iter(()))
    row = types.SimpleNamespace(predicted_ms=1.0, measured_ms=1.0, error_pct=0.0)
    monkeypatch.setattr(vtp, "rounds_row", lambda label, opt, rounds, spec, profile, predicted=None:
                        (specs.append(spec) or (row, None)))
    monkeypatch.setattr(vtp, "rounds_label", lambda repeat, configs: "x1")
    vtp.validate_rows(tmp_path, "profile.json", progress=lambda m: None)
    assert len(specs) == 1 and "corun=trace" in specs[0].split(",")


def test_the_validation_predicts_each_round_as_it_is_traced_at_a_fresh_co_run_rate(tmp_path, monkeypatch):
    """Each round's baseline is predicted right after the round, the co-run rate and torch's TP
    API overhead forgotten first, and the row takes those predictions (not one rate for all rounds,
    measured after the last; not one API overhead for all, measured before the first)."""
    import types

    import daydream.optimizations._corun as corun
    import daydream.validation.tensor_parallel as vtp

    events, taken = [], {}

    def rounds(repeat, configs, iterations):
        for k in range(3):
            events.append(f"traced {k}")
            yield [(f"base{k}", None, None), (f"split{k}", None, None)]

    monkeypatch.setattr(vtp, "_fresh_api_overhead", lambda: events.append("forget api"))
    monkeypatch.setattr(vtp, "iter_paired_rounds", rounds)
    monkeypatch.setattr(corun, "forget_measured", lambda: events.append("forget"))
    monkeypatch.setattr(vtp, "predict", lambda path, specs, profile_path: events.append(f"predict {path}") or path)
    row = types.SimpleNamespace(predicted_ms=1.0, measured_ms=1.0, error_pct=0.0)
    monkeypatch.setattr(vtp, "rounds_row", lambda label, opt, rounds, spec, profile, predicted=None:
                        (taken.setdefault("predicted", predicted), (row, None))[1])
    monkeypatch.setattr(vtp, "rounds_label", lambda repeat, configs: "x3")
    vtp.validate_rows(tmp_path, "profile.json", progress=lambda m: None, repeat=3)
    assert events == [x for k in range(3) for x in (f"traced {k}", "forget", "forget api", f"predict base{k}")]
    assert taken["predicted"] == ["base0", "base1", "base2"]
