"""batch-size on CPU traces: compute ops re-run at the new batch (habitat-style), batch from the trace."""
from __future__ import annotations

import json

import torch
from torch import nn

from daydream.collect import trace
from daydream.opbench import batch_time_ratios, scaled_signature
from daydream.whatif import predict
from optimizations.batch_size import batch_values


def _mm(a, b, strides=None):
    return json.dumps(["aten::mm", [a, b], ["float", "float"], strides or [[a[1], 1], [b[1], 1]], ["", ""]])


def test_scaled_signature_keeps_layout_and_skips_weight_only_ops():
    wgrad = _mm([32, 12], [12, 24], [[1, 32], [24, 1]])      # input.t() @ grad: the batch (12) is reduced
    got = json.loads(scaled_signature(wgrad, {12}, 0.5))
    assert got[1] == [[32, 6], [6, 24]] and got[3] == [[1, 32], [24, 1]]   # still transposed
    assert scaled_signature(_mm([32, 16], [16, 24]), {12}, 0.5) is None     # no batch dimension
    assert scaled_signature(_mm([12, 16], [16, 24]), {12}, 1 / 5) is None   # 2.4 rows: not a batch


def test_batch_time_ratios_cover_only_ops_with_a_batch_dimension():
    sigs = [_mm([12, 16], [16, 24]), _mm([32, 16], [16, 24])]
    ratios = batch_time_ratios(sigs, {12}, 0.5)
    assert set(ratios) == {sigs[0]} and ratios[sigs[0]] > 0


def test_batch_values_leave_out_what_a_parameter_dimension_could_be():
    rows = [{"path": "M", "depth": 0, "input_shapes": [[12, 16]], "param_shapes": []},
            {"path": "M.0", "depth": 1, "param_shapes": [[24, 16], [24]]}]
    assert batch_values({"modules": rows}) == {12, 192}
    rows[1]["param_shapes"] = [[12, 16]]
    assert batch_values({"modules": rows}) == {192}
    assert batch_values({}) == set()


def test_cpu_trace_ops_rerun_at_the_new_batch(tmp_path, profile):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 40), nn.ReLU(), nn.Linear(40, 24))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    out = tmp_path / "t.json"
    with trace(out, warmup=1, iterations=3):
        for _ in range(4):
            opt.zero_grad()
            model(torch.randn(12, 16)).sum().backward()
            opt.step()
    rep, _ = predict(out, ["batch-size:factor=0.5"], device=profile)
    assert any("re-run at x0.5 of batch 12" in n for n in rep.notes), rep.notes
    rep0, _ = predict(out, ["batch-size:factor=0.5,remeasure=0"], device=profile)
    assert not any("re-run" in n for n in rep0.notes)
    assert rep.predicted_ms != rep0.predicted_ms
