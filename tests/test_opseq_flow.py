"""Re-runs along the recorded data flow (:func:`daydream.opseq.flow_calls`) and its recording
(:mod:`daydream.collect.flow`)."""
from __future__ import annotations

import json

import pytest

from daydream import opseq
from daydream.collect.flow import attach_flow, read_execution_trace, take_flow

torch = pytest.importorskip("torch")

FILL_, ADD, ADD_ = torch.ops.aten.fill_.Scalar, torch.ops.aten.add.Tensor, torch.ops.aten.add_.Tensor
RELU, MM = torch.ops.aten.relu.default, torch.ops.aten.mm.default


def _z(*shape):
    return torch.zeros(*shape)


def test_ops_read_what_the_flow_says_and_write_in_place_into_shared_tensors():
    """Storage 1 is written in place (fill_ 2, then add_), read twice by an add (4) whose output,
    storage 3, relu reads; each pass reads afresh, so the second pass repeats the first."""
    runs = opseq.flow_calls(
        [(FILL_, [_z(2, 2), 2.0], {}), (ADD, [_z(2, 2), _z(2, 2)], {}), (RELU, [_z(2, 2)], {}),
         (ADD_, [_z(2, 2), _z(2, 2)], {})],
        [([[1, 0], None], [[1, 0]]), ([[1, 0], [1, 0]], [[3, 0]]), ([[3, 0]], [[4, 0]]),
         ([[1, 0], [3, 0]], [[1, 0]])])
    for _ in range(2):
        out = [r()[0, 0].item() for r in runs]
        assert out == [2.0, 4.0, 4.0, 6.0]


def test_a_read_at_an_offset_is_a_view_of_the_output_and_one_out_of_range_keeps_its_operand():
    a = torch.arange(6.0)
    runs = opseq.flow_calls([(ADD, [a, a], {}), (RELU, [_z(2)], {}), (RELU, [_z(2)], {})],
                            [([[1, 0], [1, 0]], [[3, 0]]), ([[3, 2]], [[4, 0]]), ([[3, 5]], [[5, 0]])])
    out = [r() for r in runs]
    assert torch.equal(out[1], out[0][2:4].relu())
    assert out[2].tolist() == [0.0, 0.0]                 # 5 + 2 elements overrun 6: its own zeros


def test_a_storage_id_allocated_again_is_read_from_its_new_writer():
    """Storage 3 freed and allocated again (execution traces reuse ids): the later read follows
    the later writer."""
    runs = opseq.flow_calls(
        [(FILL_, [_z(2), 1.0], {}), (ADD, [_z(2), _z(2)], {}), (ADD, [_z(2), _z(2)], {}), (RELU, [_z(2)], {})],
        [([[1, 0], None], [[1, 0]]), ([[1, 0], [1, 0]], [[3, 0]]), ([[3, 0], [3, 0]], [[3, 0]]),
         ([[3, 0]], [[4, 0]])])
    assert [r()[0].item() for r in runs] == [1.0, 2.0, 4.0, 4.0]


def test_sequence_reruns_chain_by_the_flow_where_the_trace_has_one():
    """With flows and the op as its own variant (``device``), both sides read along the flow: two
    ``neg`` of the mm's input (storage 1) give one result; without flows the layouts decide
    (:func:`opseq.chain_calls`): the first reads the mm's output, the second the first's."""
    mm = json.dumps(["aten::mm", [[2, 2], [2, 2]], ["float", "float"], [[2, 1], [2, 1]], ["", ""]])
    neg = json.dumps(["aten::neg", [[2, 2]], ["float"], [[2, 1]], [""]])
    seq = [(mm, None, None, ([[1, 0], [2, 0]], [[3, 0]])), (neg, None, None, ([[1, 0]], [[4, 0]])),
           (neg, None, None, ([[1, 0]], [[5, 0]]))]
    calls = opseq._side_calls([(*e, e[0]) for e in seq], True)
    for side in (2, 3):
        out = [c[side]() for c in calls]
        assert torch.equal(out[1], out[2]) and not torch.equal(out[1], -out[0])
    guessed = opseq._side_calls([(s, k, g, None, s) for s, k, g, _ in seq], True)
    out = [c[2]() for c in guessed]
    assert torch.equal(out[1], -out[0]) and torch.equal(out[2], out[0])


def test_the_execution_trace_is_joined_to_the_ops_and_kept_by_external_id(tmp_path):
    """:func:`read_execution_trace` keeps each node's storages by record function id; the shape
    session's ops take them, and :func:`take_flow` moves them off the recorded ops."""
    et = {"nodes": [{"name": "aten::mm", "attrs": [{"name": "rf_id", "value": 11}],
                     "inputs": {"values": [[5, 1, 0, 4, 4, "cpu"], [6, 2, 0, 4, 4, "cpu"]]},
                     "outputs": {"values": [[7, 3, 0, 4, 4, "cpu"]]}},
                    {"name": "[pytorch|profiler|execution_trace|thread]", "attrs": []}]}
    path = tmp_path / "et.json"
    path.write_text(json.dumps(et))
    flows = read_execution_trace(str(path))
    assert flows == {11: ([[1, 0], [2, 0]], [[3, 0]])}
    shape_op = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "args": {"Record function id": 11}}
    assert attach_flow([shape_op, {"ph": "X", "cat": "cpu_op", "args": {"Record function id": 12}}], flows) == 1
    recorded = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "args": {"External id": 40, **shape_op["args"]}}
    assert take_flow([recorded]) == {"40": [[[1, 0], [2, 0]], [[3, 0]]]}
    assert "Input Storages" not in recorded["args"]


def test_the_execution_traces_storage_ids_follow_the_datas_address():
    """What ``recycle`` rests on: an output allocated where a freed one was keeps its storage id,
    one at a new address gets a new id (torch's observer, recorded by :class:`FlowRecorder`)."""
    from daydream.collect.flow import FlowRecorder

    a, ptrs, rec = torch.randn(50_000), [], FlowRecorder()
    rec.start()
    try:
        for _ in range(4):                        # each output freed before the next is made
            b = a.neg()
            ptrs.append(b.data_ptr())
            del b
            c = a.exp()
            ptrs.append(c.data_ptr())
            del c
    finally:
        rec.stop()
    try:
        flows = rec.flows()
    finally:
        rec.close()
    outs = [f[1][0][0] for _, f in sorted(flows.items()) if len(f[0]) == len(f[1]) == 1 and f[1][0]]
    assert len(outs) == 8
    assert all((outs[i] == outs[j]) == (ptrs[i] == ptrs[j]) for i in range(8) for j in range(8))
    if len(set(ptrs)) == 8:        # the observer does not always let a freed block go at once
        pytest.skip("no address was allocated twice under the observer in this process")


def test_a_traced_iterations_flow_reaches_the_device_rerun_unless_turned_off(monkeypatch, tmp_path):
    """A trace with a shape iteration carries its data flow to the ``device`` re-run's sequence
    (the forward ``addmm`` and the backward ``mm`` read one storage: the second layer's weight);
    ``flow=false`` hands the re-run none."""
    import dataclasses

    import daydream.optimizations.device as device_opt
    from conftest import flat_profile
    from daydream.collect import trace
    from daydream.device import measured_on, save_profile
    from daydream.whatif import predict

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 40), torch.nn.ReLU(), torch.nn.Linear(40, 24))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    out, before = tmp_path / "t.json", torch.get_num_threads()
    torch.set_num_threads(2)                   # the trace's thread count, re-run against the target's 1
    try:
        with trace(out, warmup=2, iterations=2):
            for _ in range(5):
                opt.zero_grad()
                model(torch.randn(12, 16)).sum().backward()
                opt.step()
    finally:
        torch.set_num_threads(before)
    seen = []
    monkeypatch.setattr(device_opt, "thread_time_ratios",
                        lambda sigs, threads, to_threads, sequence=None, chained=False, recycle=True, warm=False:
                        seen.append((sequence, recycle, warm)) or {})
    src = dataclasses.replace(flat_profile(), threads=2)
    here = save_profile(dataclasses.replace(src, threads=1, source=f"{measured_on()} 2026-12-04 21:50"),
                        str(tmp_path / "here.json"))
    for spec in (f"device:target={here}", f"device:target={here},flow=false", f"device:target={here},recycle=false",
                 f"device:target={here},warm=false"):
        predict(out, [spec], device=src)
    (on, recycled, warmed), (off, *_), (_, kept, _), (*_, cold) = seen
    assert recycled and not kept and warmed and not cold
    addmm = [flow for sig, *_, flow in on if json.loads(sig)[0] == "aten::addmm"]
    mm = [flow for sig, *_, flow in on if json.loads(sig)[0] == "aten::mm"]
    assert addmm[1][0][2][0] == mm[0][0][1][0]                 # W.t() forward, W backward: one storage
    assert all(flow is None for *_, flow in off)


NEG = torch.ops.aten.neg.default


def test_outputs_training_placed_at_one_address_share_one_buffer_and_still_compute_the_flow():
    """Storage 3 holds the add's output, then (freed after relu read it) the neg's: recycled, the
    two share memory as they did in training, and every call still computes what it did."""
    bound = [(ADD, [torch.ones(4), torch.ones(4)], {}), (RELU, [_z(4)], {}), (NEG, [_z(4)], {})]
    flows = [([[1, 0], [1, 0]], [[3, 0]]), ([[3, 0]], [[4, 0]]), ([[4, 0]], [[3, 0]])]
    for recycle in (True, False):
        runs = opseq.flow_calls(bound, flows, recycle=recycle)
        for _ in range(2):
            out = [r() for r in runs[:2]]
            x, y = out[0].clone(), out[1].clone()          # the add: storage 1 (pooled, random) doubled
            assert not torch.equal(x, torch.zeros(4)) and torch.equal(y, x.relu())
            z = runs[2]()
            assert torch.equal(z, -y)
        assert (out[0].data_ptr() == z.data_ptr()) is recycle


def test_a_storages_buffer_spans_the_largest_output_placed_in_it():
    """Storage 3 holds 4 elements, then (freed) 8: both outputs fit its one buffer."""
    runs = opseq.flow_calls([(ADD, [torch.ones(4), torch.ones(4)], {}), (ADD, [torch.ones(8), torch.ones(8)], {})],
                            [([None, None], [[3, 0]]), ([None, None], [[3, 0]])])
    small = runs[0]().clone()
    big = runs[1]()
    assert small.tolist() == [2.0] * 4 and big.tolist() == [2.0] * 8
    assert runs[0]().data_ptr() == big.data_ptr()


def test_an_op_without_an_out_form_or_reading_its_own_storage_allocates_as_before():
    assert opseq.out_overload(torch.ops.aten.t.default) is None
    assert opseq.out_overload(torch.ops.aten.native_dropout.default) is None      # a generated wrapper
    assert opseq.out_overload(torch.ops.aten.nll_loss_forward.default)[1] == ["output", "total_weight"]
    runs = opseq.flow_calls([(ADD, [torch.ones(4), torch.ones(4)], {}), (ADD, [_z(4), _z(4)], {})],
                            [([[1, 0], [1, 0]], [[3, 0]]), ([[3, 0], [3, 0]], [[3, 0]])])
    a = runs[0]().clone()
    b = runs[1]()
    assert torch.equal(b, a * 2) and runs[0]().data_ptr() != b.data_ptr()


def test_an_out_form_that_refuses_the_calls_operands_leaves_the_call_as_traced():
    """An out= form does not take operands that need gradients: the call allocates as before."""
    a = torch.ones(4, requires_grad=True)
    runs = opseq.flow_calls([(ADD, [a, torch.ones(4)], {})], [([None, None], [[3, 0]])])
    got = runs[0]()
    assert got.tolist() == [2.0] * 4 and got.requires_grad
