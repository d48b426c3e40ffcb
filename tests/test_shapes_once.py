"""Shapes recorded in the last warm-up iteration and copied to the recorded ops (daydream.collect.shapes)."""
from __future__ import annotations

import collections
import json

import pytest

from daydream.collect.shapes import copy_shapes

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from daydream.collect import trace  # noqa: E402


def _op(name, ts, tid=1, **args):
    return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": 1, "pid": 1, "tid": tid, "args": args}


def _step(n, ts, dur):
    return {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "ts": ts, "dur": dur,
            "pid": 1, "tid": 1}


def test_copy_matches_each_thread_in_order_and_skips_what_differs():
    shapes = [_op("aten::mm", 0, **{"Input Dims": [[2, 3]], "Input type": ["float"]}),
              _op("aten::relu", 1, **{"Input Dims": [[2, 4]]}),
              _op("aten::sum", 1, tid=2, **{"Input Dims": [[7]], "Concrete Inputs": [""]})]
    trace_events = [
        _step(4, 100, 10), _op("aten::mm", 101), _op("aten::extra", 102), _op("aten::relu", 103),
        _op("aten::sum", 104, tid=2),
        _step(5, 200, 10), _op("aten::mm", 201), _op("aten::relu", 202),
        _op("aten::mm", 300),                                 # outside every iteration: untouched
    ]
    got = copy_shapes(trace_events, shapes, 3, skip_iterations=[5])
    assert (got.ops_with_shapes, got.ops_without_shapes, got.iterations_without) == (3, 3, (5,))
    assert trace_events[1]["args"] == {"Input Dims": [[2, 3]], "Input type": ["float"]}
    assert trace_events[2]["args"] == {}                      # no counterpart in the shape iteration
    assert trace_events[3]["args"] == {"Input Dims": [[2, 4]]}
    assert trace_events[4]["args"] == {"Input Dims": [[7]], "Concrete Inputs": [""]}
    assert trace_events[6]["args"] == {} and trace_events[8]["args"] == {}
    assert got.as_metadata()["iterations_without"] == [5]


def test_copy_keeps_the_recorded_ops_own_ids():
    shapes = [_op("aten::mm", 0, **{"Input Dims": [[1]], "External id": 1, "Ev Idx": 0})]
    events = [_step(0, 0, 5), _op("aten::mm", 1, **{"External id": 9, "Ev Idx": 4})]
    copy_shapes(events, shapes, 0)
    assert events[1]["args"] == {"External id": 9, "Ev Idx": 4, "Input Dims": [[1]]}


def _ops(path):
    doc = json.loads(path.read_text())
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in doc["traceEvents"]
                   if str(e.get("name", "")).startswith("ProfilerStep#"))
    per_step = [collections.Counter() for _ in steps]
    for e in doc["traceEvents"]:
        if e.get("cat") == "cpu_op":
            for k, (a, b) in enumerate(steps):
                if a <= e["ts"] <= b:
                    args = e.get("args", {})
                    per_step[k][(e["name"], json.dumps(args.get("Input Dims")),
                                 json.dumps(args.get("Concrete Inputs")))] += 1
    return doc["daydream"], per_step


def _run(out, batches, **kw):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with trace(out, warmup=2, iterations=3, **kw):
        for b in batches:
            opt.zero_grad()
            model(torch.randn(b, 8)).sum().backward()
            opt.step()


def test_copied_shapes_equal_shapes_recorded_in_every_iteration(tmp_path):
    _run(tmp_path / "once.json", [4] * 5)
    _run(tmp_path / "every.json", [4] * 5, shapes_every_iteration=True)
    meta, once = _ops(tmp_path / "once.json")
    meta_every, every = _ops(tmp_path / "every.json")
    assert meta["shapes"]["source"] == "warm-up iteration 0" and meta["shapes"]["ops_without_shapes"] == 0
    assert meta_every["shapes"] == {"source": "every iteration"}
    assert once == every and any("[[4, 8]" in k[1] for k in once[0])


def test_an_iteration_with_other_input_shapes_takes_none(tmp_path):
    _run(tmp_path / "t.json", [4, 4, 4, 6, 4])
    meta, per_step = _ops(tmp_path / "t.json")
    assert meta["shapes"]["iterations_without"] == [3]
    assert all(k[1] == "null" for k in per_step[1])           # iteration 3 (batch 6): no shapes
    assert any("[[4, 8]" in k[1] for k in per_step[0]) and per_step[0] == per_step[2]


def test_without_a_warm_up_iteration_shapes_are_recorded_while_recording(tmp_path):
    out = tmp_path / "t.json"
    torch.manual_seed(0)
    model = nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with trace(out, warmup=0, iterations=2):
        for _ in range(2):
            opt.zero_grad()
            model(torch.randn(4, 8)).sum().backward()
            opt.step()
    meta, per_step = _ops(out)
    assert meta["shapes"] == {"source": "every iteration"} and any("[[4, 8]" in k[1] for k in per_step[0])


def test_a_shape_iteration_that_cannot_be_kept_falls_back_to_recording_shapes(tmp_path, monkeypatch):
    real = torch.profiler.profile.export_chrome_trace
    calls = []

    def export(self, path):
        calls.append(path)
        if len(calls) == 1:                      # the shape session's export
            raise OSError(28, "No space left on device")
        return real(self, path)

    monkeypatch.setattr(torch.profiler.profile, "export_chrome_trace", export)
    _run(tmp_path / "t.json", [4] * 5)
    meta, per_step = _ops(tmp_path / "t.json")
    assert meta["shapes"] == {"source": "every iteration"}
    assert any("No space left on device" in n for n in meta["activities"]["notes"])
    assert any("[[4, 8]" in k[1] for k in per_step[0]) and len(calls) == 2
