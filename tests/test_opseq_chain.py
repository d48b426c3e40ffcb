"""Chained op re-runs (:func:`daydream.opseq.chain_calls`): each op reads a recent output of its layout."""
from __future__ import annotations

import json

import pytest

from daydream import opseq

torch = pytest.importorskip("torch")

MM, RELU, ADD_ = torch.ops.aten.mm.default, torch.ops.aten.relu.default, torch.ops.aten.add_.Tensor


def test_an_op_reads_the_latest_output_of_its_layout_each_pass():
    a, b, c = torch.ones(2, 3), torch.full((2, 3), 3.0), torch.ones(3, 2)
    runs = opseq.chain_calls([(MM, [a, c], {}), (MM, [b, c], {}), (RELU, [torch.zeros(2, 2)], {})])
    assert [r() for r in runs][2].tolist() == [[9.0, 9.0], [9.0, 9.0]]      # the second mm's output
    b.fill_(1.0)                                                              # the next pass: fresh data
    assert [r() for r in runs][2].tolist() == [[3.0, 3.0], [3.0, 3.0]]


def test_each_output_once_per_call_and_fixed_positions_kept():
    """Two arguments of one layout read two different outputs; a fixed position keeps its tensor;
    an output of another layout is never read."""
    x, w = torch.ones(2, 2), torch.full((2, 2), 5.0)
    bound = [(MM, [x, x], {}), (RELU, [-x], {}), (torch.ops.aten.sum.default, [torch.ones(3)], {}),
             (torch.ops.aten.add.Tensor, [torch.zeros(2, 2), torch.zeros(2, 2)], {}),
             (torch.ops.aten.add.Tensor, [w, torch.zeros(2, 2)], {})]
    runs = opseq.chain_calls(bound, fixed=[set(), set(), set(), set(), {0}])
    out = [r() for r in runs]
    assert out[1].tolist() == [[2.0, 2.0], [2.0, 2.0]]             # relu of the mm's 2s, not of -1s
    assert out[3].tolist() == [[4.0, 4.0], [4.0, 4.0]]             # relu's output plus the mm's
    assert out[4].tolist() == [[9.0, 9.0], [9.0, 9.0]]             # w kept (fixed), plus the add's 4s
    assert out[2].item() == 3.0                                    # sum of a 3-vector: no 2x2 output fits


def test_past_the_window_an_op_reads_an_older_output_of_its_layout(monkeypatch):
    """Within the window the latest output of the layout; past it, the latest of that layout from
    further back (a backward op reading what the forward wrote)."""
    monkeypatch.setattr(opseq, "CHAIN_WINDOW", 1)
    two, one = torch.full((2, 2), 2.0), torch.full((2, 2), 0.5)
    sums = (torch.ops.aten.sum.default, [torch.ones(3)], {})
    runs = opseq.chain_calls([(MM, [two, two], {}), sums, (RELU, [torch.ones(2, 2)], {})])
    assert [r() for r in runs][2].tolist() == [[8.0, 8.0], [8.0, 8.0]]      # the mm, two calls back
    ones = torch.ones(3, 2)
    runs = opseq.chain_calls([(MM, [torch.ones(2, 3), ones], {}), (MM, [torch.full((2, 3), 0.5), ones], {}),
                              (RELU, [torch.ones(2, 2)], {})])
    assert [r() for r in runs][2].tolist() == [[1.5, 1.5], [1.5, 1.5]]      # the latest mm


def test_a_link_that_breaks_the_op_is_dropped():
    """An index read from a recent int64 output is out of range: the op keeps its own operand."""
    sevens = torch.full((2,), 7, dtype=torch.int64)
    src, idx = torch.tensor([1.0, 2.0, 3.0]), torch.zeros(2, dtype=torch.int64)
    runs = opseq.chain_calls([(torch.ops.aten.add.Tensor, [sevens, torch.zeros(2, dtype=torch.int64)], {}),
                              (torch.ops.aten.index_select.default, [src, 0, idx], {})])
    assert [r() for r in runs][1].tolist() == [1.0, 1.0]


def test_chained_sequence_reruns_give_a_ratio_per_signature():
    mm = json.dumps(["aten::mm", [[32, 32], [32, 32]], ["float", "float"], None, None])
    relu = json.dumps(["aten::relu", [[32, 32]], ["float"], None, None])
    got = opseq.sequence_ratios([mm, relu, mm], lambda sig: sig, threads=1, rounds=5, span_s=0,
                                variant_threads=1, chained=True)
    assert set(got) == {mm, relu} and all(0.1 < r < 10 for r in got.values())     # the same op, 1 thread both sides


def test_an_op_that_returns_a_number_is_no_producer():
    """``aten::_local_scalar_dense`` returns a Python number: nothing to link, nothing raised."""
    runs = opseq.chain_calls([(torch.ops.aten._local_scalar_dense.default, [torch.tensor(3.0)], {}),
                              (RELU, [torch.ones(2)], {})])
    assert runs[0]() == 3.0 and runs[1]().tolist() == [1.0, 1.0]


def test_an_update_reads_its_parameters_gradient_by_name_not_the_latest_of_its_layout():
    """Two layers' weight gradients of one layout: each update reads its own layer's (keyed),
    where the layout alone would give both the latest one; outputs of other shapes are no gradient."""
    ones = torch.ones(3, 2)
    g0, g1 = (MM, [torch.ones(2, 3), ones], {}), (MM, [torch.full((2, 3), 2.0), ones], {})
    other = (MM, [torch.ones(1, 3), ones], {})                       # a 1 x 2 output: not the gradient
    upd = lambda: (torch.ops.aten.add.Tensor, [torch.zeros(2, 2), torch.zeros(2, 2)], {})  # noqa: E731
    bound = [g0, other, g1, upd(), upd()]
    produces = [(((2, 2), "a#0.grad"), ((1, 2), "x")), (((2, 2), "a#0.grad"),), (((2, 2), "b#0.grad"),), (), ()]
    reads = [{}, {}, {}, {1: "a#0.grad"}, {1: "b#0.grad"}]
    out = [r() for r in opseq.chain_calls(bound, fixed=[set()] * 3 + [{0}] * 2, reads=reads, produces=produces)]
    assert out[3].tolist() == [[3.0, 3.0], [3.0, 3.0]]     # layer a's gradient (the first mm's 3s)
    assert out[4].tolist() == [[6.0, 6.0], [6.0, 6.0]]     # layer b's (the second's 6s)
    keyless = [r() for r in opseq.chain_calls(bound, fixed=[set()] * 3 + [{0}] * 2)]
    assert keyless[3].tolist() == keyless[4].tolist() == [[6.0, 6.0], [6.0, 6.0]]   # by layout: the latest


def test_two_views_of_one_output_are_one_output():
    """A ``view`` of the ``mm``'s output has its layout and its data: an add reading two arguments
    of that layout reads the view and, for the other, the older output (5s), not the mm's again."""
    full = lambda v: torch.full((2, 2), v)  # noqa: E731
    bound = [(torch.ops.aten.add.Tensor, [full(2.0), full(3.0)], {}),
             (MM, [torch.ones(2, 2), torch.ones(2, 2)], {}),
             (torch.ops.aten.view.default, [torch.zeros(2, 2), [2, 2]], {}),
             (torch.ops.aten.add.Tensor, [torch.zeros(2, 2), torch.zeros(2, 2)], {})]
    runs = opseq.chain_calls(bound, fixed=[set(), {0, 1}, set(), set()])
    out = [r() for r in runs]
    assert out[2].tolist() == [[2.0, 2.0], [2.0, 2.0]]            # the view reads the mm's 2s
    assert out[3].tolist() == [[7.0, 7.0], [7.0, 7.0]]            # 2s (the view) + 5s, not 2s + 2s


def test_a_view_of_the_weight_is_not_its_gradient():
    """A linear layer's backward: the weight-gradient ``mm`` writes the gradient, and the ``t``
    after it, keyed as the weight (fixed), is a view of the weight, not a newer gradient: the
    update reads the ``mm``'s output."""
    T = torch.ops.aten.t.default
    w = torch.full((2, 2), 7.0)                                       # the weight (shared by name)
    bound = [(MM, [torch.ones(2, 2), torch.ones(2, 2)], {}),          # the weight gradient: 2s
             (T, [w], {}),                                            # keyed as the weight
             (torch.ops.aten.add.Tensor, [torch.zeros(2, 2), torch.zeros(2, 2)], {})]
    produces = [(((2, 2), "W#0.grad"),)] * 2 + [()]
    reads = [{}, {}, {1: "W#0.grad"}]
    out = [r() for r in opseq.chain_calls(bound, fixed=[set(), {0}, {0}], reads=reads, produces=produces)]
    assert out[1].tolist() == [[7.0, 7.0], [7.0, 7.0]]               # t read the weight
    assert out[2].tolist() == [[2.0, 2.0], [2.0, 2.0]]               # the update, the mm's 2s
