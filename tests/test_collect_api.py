"""The Python collection API: daydream.collect.trace / step, markers, metadata."""
from __future__ import annotations

import json
import os
import stat

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from daydream.collect import CollectionError, NoIterationMarkerError, step, trace  # noqa: E402
from daydream.collect.normalize import normalize_marker_events  # noqa: E402
from daydream.collect.writer import rank_path, write_trace_atomic  # noqa: E402


def _model():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(8, 16),
        nn.BatchNorm1d(16),
        nn.ReLU(inplace=True),  # in-place on a module output: full backward hooks would break here
        nn.Sequential(nn.Linear(16, 16), nn.Identity()),
        nn.Linear(16, 2),
    )


def _train(model, opt, n, explicit=False):
    for _ in range(n):
        opt.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
        if explicit:
            step()


def _sgd_trace(tmp_path, warmup, iterations, steps):
    """The test model trained ``steps`` steps with plain SGD under ``trace``; the trace's path."""
    out = tmp_path / "t.json"
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with trace(out, warmup=warmup, iterations=iterations):
        _train(model, opt, steps)
    return out


def _events(path):
    with open(path) as fh:
        doc = json.load(fh)
    return doc, [e for e in doc["traceEvents"] if e.get("ph") == "X"]


def _names(events, prefix):
    return [e["name"] for e in events if e["name"].startswith(prefix)]


def test_with_block_writes_steps_and_metadata(tmp_path):
    out = tmp_path / "t.json"
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with trace(out, warmup=2, iterations=3) as session:
        _train(model, opt, 7)
    assert session.path == out and session.result.complete
    doc, events = _events(out)
    assert sorted(_names(events, "ProfilerStep#")) == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    meta = doc["daydream"]
    assert meta["iterations"]["recorded"] == 3 and meta["iterations"]["marker"] == "optimizer.step"
    assert meta["optimizer"]["name"] == "SGD" and meta["optimizer"]["defaults"]["momentum"] == 0.9
    assert meta["parameter_dtype"] == "float32"
    assert (meta["rank"], meta["world_size"]) == (0, 1)
    assert meta["versions"]["torch"] == torch.__version__
    rows = {r["path"]: r for r in meta["modules"]}
    assert rows["Sequential.0"]["param_bytes"] == (8 * 16 + 16) * 4
    assert rows["Sequential.0"]["output_bytes"] == 4 * 16 * 4
    assert rows["Sequential"]["param_bytes_total"] == sum(p.numel() * 4 for p in model.parameters())
    assert rows["Sequential"]["input_shapes"] == [[4, 8]]            # the batch (root modules only)
    assert "input_shapes" not in rows["Sequential.0"]
    assert rows["Sequential.0"]["param_shapes"] == [[16, 8], [16]]
    assert "cpu" in meta["device"]
    assert meta["activities"]["recorded"] == (["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"])
    # torch's own ranges for optimizer and zero_grad are there
    assert len(_names(events, "Optimizer.step#SGD.step")) == 3


@pytest.mark.parametrize("warmup, untraced", [(2, []), (7, [0, 1, 2, 3, 4])])
def test_untraced_warmup_iterations_are_timed_for_the_overhead(tmp_path, warmup, untraced):
    """Only iterations before the shape session (``warmup - 2``) and the profiler's preparation."""
    from daydream.analysis import summarize, tracing_overhead
    from daydream.loader import load_trace

    out = tmp_path / "t.json"
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with trace(out, warmup=warmup, iterations=3):
        _train(model, opt, warmup + 4)
    its = json.loads(out.read_text())["daydream"]["iterations"]
    assert its["untraced_steps"] == untraced and its["steps"] == [warmup, warmup + 1, warmup + 2]
    assert len(its["untraced_wall_ns"]) == len(its["untraced_minor_faults"]) == len(untraced)
    assert all(ns > 0 for ns in its["untraced_wall_ns"]) and all(f >= 0 for f in its["untraced_minor_faults"])
    s = summarize(load_trace([str(out)]))
    if not untraced:                                   # too few untraced iterations to say
        assert s.overhead == ()
        return
    (rank, o), = s.overhead
    ref = sorted(its["untraced_wall_ns"][2:])[1] / 1e6  # the first two left out; median of three
    assert rank == 0 and o.untraced_iterations == 3 and o.untraced_ms == pytest.approx(ref)
    assert o.recorded_ms == pytest.approx(sorted(its["wall_ns"])[1] / 1e6)
    assert tracing_overhead({"daydream": {"iterations": its}}, min_untraced=4) is None
    from click.testing import CliRunner

    from daydream.cli_core import info

    res = CliRunner().invoke(info, [str(out)])
    assert res.exit_code == 0 and f"rank 0: recording cost {o.pct:+.1f}% an iteration" in res.output


def test_layer_markers_nest_and_cover_ops(tmp_path):
    out = tmp_path / "t.json"
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with trace(out, warmup=1, iterations=2, backward_ranges=True):
        _train(model, opt, 4)
    _, events = _events(out)
    fwd = _names(events, "daydream.fwd:")
    bwd = _names(events, "daydream.bwd:")
    assert fwd.count("daydream.fwd:Sequential.3.0") == 2
    assert "daydream.bwd:Sequential.4" in bwd and "daydream.bwd:Sequential.0" in bwd
    assert "daydream.bwd:Sequential.3.1" not in bwd  # Identity has no backward of its own
    assert all(e["cat"] == "user_annotation" for e in events if e["name"].startswith("daydream."))
    # proper nesting: no two ranges on the thread partially overlap
    spans = sorted(((e["ts"], e["ts"] + e["dur"], e["name"]) for e in events
                    if e["name"].startswith(("daydream.", "autograd::engine::evaluate_function", "ProfilerStep#"))),
                   key=lambda s: (s[0], -s[1]))
    stack = []
    for s, t, name in spans:
        while stack and stack[-1][1] <= s + 1e-6:
            stack.pop()
        assert not stack or t <= stack[-1][1] + 1e-6, f"{name} crosses {stack[-1][2]}"
        stack.append((s, t, name))

    # every addmm backward op lies inside a backward range of a Linear
    def inside(e, prefix):
        return any(r["name"].startswith(prefix) and r["ts"] <= e["ts"] and e["ts"] + e["dur"] <= r["ts"] + r["dur"]
                   for r in events)

    mms = [e for e in events if e["name"] == "AddmmBackward0"]
    assert mms and all(inside(e, "daydream.bwd:Sequential.") for e in mms)
    relu = [e for e in events if e["name"] == "aten::relu_"]
    assert relu and all(inside(e, "daydream.fwd:Sequential.2") for e in relu)


def test_backward_ops_take_their_module_from_forward_without_backward_ranges(tmp_path):
    from daydream.analysis import trace_and_graph
    from daydream.model import Phase

    out = _sgd_trace(tmp_path, 1, 2, 4)
    _, events = _events(out)
    assert not _names(events, "daydream.bwd:") and _names(events, "daydream.fwd:")
    _, g = trace_and_graph([out])
    T = g.tasks
    layer_of = {}
    for t in np.flatnonzero((T["phase"] == Phase.BACKWARD) & (T["iteration"] >= 0)):
        layer_of.setdefault(g.task_name(t), set()).add(g.layers.strings[T["layer"][t]])
    # by autograd sequence number: each Linear's backward node belongs to that Linear
    assert layer_of["AddmmBackward0"] == {"Sequential.0", "Sequential.3.0", "Sequential.4"}
    assert layer_of["NativeBatchNormBackward0"] == {"Sequential.1"}
    # gradient accumulation has no forward op: it goes with the module whose backward ran just before
    assert layer_of["torch::autograd::AccumulateGrad"] <= {"Sequential.0", "Sequential.1", "Sequential.3.0",
                                                            "Sequential.4"}


def test_loader_reads_collected_trace(tmp_path):
    loader = pytest.importorskip("daydream.loader")
    out = tmp_path / "t.json.gz"
    model = _model()
    opt = torch.optim.Adam(model.parameters())
    with trace(out, warmup=1, iterations=2):
        _train(model, opt, 3)
    tr = loader.load_trace([str(out)])
    rank = tr.ranks[0]
    assert rank.n_iterations == 2
    assert "Sequential.0" in rank.layers.strings
    assert rank.meta["daydream"]["optimizer"]["name"] == "Adam"


def test_explicit_step_takes_over_without_double_counting(tmp_path):
    out = tmp_path / "t.json"
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with trace(out, warmup=1, iterations=10) as session:
        _train(model, opt, 5, explicit=True)  # opt.step(); daydream.step()
    assert session.result.marker == "daydream.step"
    assert session.result.boundaries == 5
    assert session.result.iterations_recorded == 4


def test_step_marker_without_optimizer(tmp_path):
    out = tmp_path / "t.json"
    model = nn.Linear(4, 4)
    with trace(out, warmup=0, iterations=2) as session:
        for _ in range(3):
            model(torch.randn(2, 4)).sum().backward()
            session.step()
    _, events = _events(out)
    assert sorted(_names(events, "ProfilerStep#")) == ["ProfilerStep#0", "ProfilerStep#1"]


def test_wrapped_step_function(tmp_path):
    out = tmp_path / "t.json"
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    calls = []

    @trace(out, warmup=1, iterations=2)
    def train_step(x):
        calls.append(1)
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()  # ignored as a marker: each call is one iteration
        return 7

    for _ in range(5):
        assert train_step(torch.randn(4, 8)) == 7
    assert len(calls) == 5
    result = train_step.session.result
    assert result.path == out and result.iterations_recorded == 2 and result.marker == "traced function call"
    _, events = _events(out)
    assert sorted(_names(events, "ProfilerStep#")) == ["ProfilerStep#1", "ProfilerStep#2"]


def test_no_marker_is_a_clear_error(tmp_path):
    model = nn.Linear(4, 4)
    with pytest.raises(NoIterationMarkerError, match="daydream.step"):
        with trace(tmp_path / "t.json", warmup=0, iterations=2):
            model(torch.randn(2, 4)).sum().backward()
    assert not (tmp_path / "t.json").exists()


def test_interrupted_block_keeps_finished_iterations(tmp_path):
    out = tmp_path / "t.json"
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(KeyboardInterrupt):
        with trace(out, warmup=0, iterations=10):
            _train(model, opt, 3)
            model(torch.randn(4, 8))  # half an iteration
            raise KeyboardInterrupt
    doc, events = _events(out)
    assert doc["daydream"]["iterations"]["complete"] is False
    assert sorted(_names(events, "ProfilerStep#")) == ["ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2"]
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]


def test_existing_output_needs_force(tmp_path):
    out = tmp_path / "t.json"
    out.write_text("{}")
    with pytest.raises(CollectionError, match="already exists"):
        trace(out, force=False)
    trace(out, force=True)  # no error


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_directory(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
    with pytest.raises(CollectionError, match="cannot write"):
        trace(ro / "t.json")


def test_missing_directory(tmp_path):
    with pytest.raises(CollectionError, match="does not exist"):
        trace(tmp_path / "nope" / "t.json")


def test_bad_arguments(tmp_path):
    with pytest.raises(CollectionError, match="iterations"):
        trace(tmp_path / "t.json", iterations=0)
    with pytest.raises(CollectionError, match="activities"):
        trace(tmp_path / "t.json", activities="tpu")


def test_rank_path():
    assert rank_path("a/out.json", 3, 4).name == "out.rank3.json"
    assert rank_path("out.json.gz", 1, 2).name == "out.rank1.json.gz"
    assert rank_path("out.json", 0, 1).name == "out.json"


def test_atomic_write_leaves_nothing_on_failure(tmp_path):
    out = tmp_path / "t.json"
    with pytest.raises(TypeError):
        write_trace_atomic({"traceEvents": [object()]}, out)
    assert os.listdir(tmp_path) == []
    write_trace_atomic({"traceEvents": []}, out)
    assert json.loads(out.read_text()) == {"traceEvents": []}


def test_normalize_moves_backward_ranges_to_node_edges():
    ev = [
        {"ph": "X", "name": "autograd::engine::evaluate_function: A", "ts": 100.0, "dur": 10.0, "pid": 1, "tid": 1},
        {"ph": "X", "name": "autograd::engine::evaluate_function: B", "ts": 115.0, "dur": 10.0, "pid": 1, "tid": 1},
        {"ph": "X", "name": "daydream.bwd:M", "ts": 101.0, "dur": 15.0, "pid": 1, "tid": 1, "cat": "cpu_op"},
        {"ph": "X", "name": "daydream.bwd:M.a", "ts": 101.5, "dur": 14.0, "pid": 1, "tid": 1, "cat": "cpu_op"},
    ]
    normalize_marker_events(ev)
    outer, inner = ev[2], ev[3]
    assert outer["ts"] == inner["ts"] == 100.0
    assert outer["ts"] + outer["dur"] == pytest.approx(115.0)
    assert inner["ts"] + inner["dur"] == pytest.approx(114.999)
    assert outer["cat"] == inner["cat"] == "user_annotation"


def test_kernel_collector_seam_merges_events(tmp_path, monkeypatch):
    from daydream.collect import tracer as tracer_mod
    from daydream.collect.activities import ActivityPlan, CudaSource

    class FakeCollector:
        started = stopped = False

        def start(self):
            self.started = True

        def stop(self):
            self.stopped = True

        def chrome_events(self, doc):
            return [{"ph": "X", "cat": "kernel", "name": "fake_kernel", "pid": 0, "tid": 7,
                     "ts": 1.0, "dur": 2.0, "args": {"External id": 1}}]

    fake = FakeCollector()
    plan = ActivityPlan(("cpu", "cuda"), (torch.profiler.ProfilerActivity.CPU,), CudaSource.CUPTI_EXTENSION)
    monkeypatch.setattr(tracer_mod, "plan_activities", lambda acts, use_cupti: (plan, fake))
    out = tmp_path / "t.json"
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with trace(out, warmup=0, iterations=1, use_cupti=True):
        _train(model, opt, 2)
    doc, events = _events(out)
    assert fake.started and fake.stopped
    assert [e["name"] for e in events if e.get("cat") == "kernel"] == ["fake_kernel"]
    assert doc["daydream"]["activities"]["cuda_source"] == "daydream.cupti"


def test_nested_trace_is_inert(tmp_path, capsys):
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with trace(tmp_path / "outer.json", warmup=0, iterations=2) as outer:
        with trace(tmp_path / "inner.json", warmup=0, iterations=1):
            _train(model, opt, 3)
    assert outer.result.iterations_recorded == 2
    assert not (tmp_path / "inner.json").exists()
    assert "already being recorded" in capsys.readouterr().err


def test_a_module_that_raises_keeps_ranges_nested_and_tracing_on(tmp_path):
    class Flaky(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            if self.calls == 4:
                raise ValueError("bad batch")
            return self.fc(x)

    torch.manual_seed(0)
    model = nn.Sequential(Flaky(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    out = tmp_path / "t.json"
    with trace(out, warmup=2, iterations=3) as session:
        for _ in range(6):
            opt.zero_grad()
            try:
                loss = model(torch.randn(4, 8)).sum()
            except ValueError:
                continue                          # the user's loop skips the bad batch
            loss.backward()
            opt.step()
    assert session.result.complete and torch.nn.Module.__call__ is not None
    doc, events = _events(out)
    # recorded iterations 2-4 hold calls 3-6 of Flaky; call 4 raised: its range is closed all the same
    inner = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["name"] == "daydream.fwd:Sequential.0")
    outer = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["name"] == "daydream.fwd:Sequential")
    assert len(inner) == 4 and len(outer) == 4
    assert all(a0 <= b0 and b1 <= a1 for (a0, a1), (b0, b1) in zip(outer, inner))    # nested
    assert "_daydream_markers" not in vars(torch.nn.Module.__call__)   # the wrapper was removed


def test_the_shape_iteration_records_which_storage_each_op_read_and_wrote(tmp_path, capfd):
    """The execution trace beside the shape session: per recorded op (by External id) its inputs'
    and outputs' storages, in which each linear's output is what the next op reads; the
    observer's start and stop lines do not reach the user's stderr."""
    doc, events = _events(_sgd_trace(tmp_path, 2, 2, 6))
    flow = doc["daydream"]["flow"]
    assert flow["source"] == "execution trace of warm-up iteration 0" and flow["ops_linked"] > 0
    ops = sorted((e for e in events if e.get("cat") == "cpu_op" and str(e["args"].get("External id")) in flow["ops"]),
                 key=lambda e: e["ts"])
    assert all("Input Storages" not in e["args"] for e in ops)
    written = {}
    for e in ops:
        ins, outs = flow["ops"][str(e["args"]["External id"])]
        for ref in outs:
            if ref:
                written.setdefault(ref[0], e["name"])
        if e["name"] == "aten::native_batch_norm":       # reads the first linear's addmm output
            assert written.get(ins[0][0]) in ("aten::addmm", "aten::linear")
            break
    else:
        pytest.fail("no batch norm op with a recorded flow")
    assert "Execution Trace Observer" not in capfd.readouterr().err
