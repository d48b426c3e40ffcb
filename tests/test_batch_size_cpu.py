"""batch-size on CPU traces: compute ops re-run at the new batch (habitat-style), batch from the trace."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

from daydream.collect import trace
from daydream.opbench import batch_time_ratios, scaled_signature
from daydream.whatif import predict
from optimizations.batch_size import batch_values, rerun_tasks
from optimizations._sequence import iteration_sequence


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


def _tiny_trace(tmp_path):
    """A traced 2-layer MLP (16 -> 40 -> 24) at batch 12, three recorded iterations."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 40), nn.ReLU(), nn.Linear(40, 24))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    out = tmp_path / "t.json"
    with trace(out, warmup=1, iterations=3):
        for _ in range(4):
            opt.zero_grad()
            model(torch.randn(12, 16)).sum().backward()
            opt.step()
    return out


def test_cpu_trace_ops_rerun_at_the_new_batch(tmp_path, profile):
    out = _tiny_trace(tmp_path)
    rep, _ = predict(out, ["batch-size:factor=0.5"], device=profile)
    assert any("re-run at x0.5 of batch 12" in n for n in rep.notes), rep.notes
    rep0, _ = predict(out, ["batch-size:factor=0.5,remeasure=0"], device=profile)
    assert not any("re-run" in n for n in rep0.notes)
    assert rep.predicted_ms != rep0.predicted_ms


def test_phase_sequence_runs_the_ops_at_the_micro_batch(tmp_path, profile):
    """``batch_factor`` scales the batch dimension of the ops that have one (the pipelines' co-run
    re-runs a micro-batch); the optimizer's updates, of the weights' shapes, and the phases stay."""
    from daydream.analysis import trace_and_graph
    from daydream.model import Phase
    from daydream.optimizations import WhatIfContext
    from daydream.optimizations._corun import phase_sequence

    tr, g = trace_and_graph(_tiny_trace(tmp_path), None)
    ctx = WhatIfContext(graph=g, trace=tr, device=profile)
    full, phases = phase_sequence(ctx)
    half, phases_half = phase_sequence(ctx, 0.5)
    assert phases_half == phases and len(half) == len(full)
    dims = [(json.loads(a)[1], json.loads(b)[1], p) for a, b, p in zip(full, half, phases)]
    forward = [(a, b) for a, b, p in dims if p == int(Phase.FORWARD) and a != b]
    assert forward and all(b == [[6 if d == 12 else d for d in arg] for arg in a] for a, b in forward)   # batch 12
    assert all(a == b for a, b, p in dims if p == int(Phase.OPTIMIZER))


class _Clock:
    """A fake ``time`` for :mod:`daydream.opseq`: calls advance it by what they are told to cost."""

    def __init__(self):
        self.now = 0

    def perf_counter_ns(self):
        return self.now

    def perf_counter(self):
        return self.now / 1e9


def _sequence_fixture(monkeypatch, costs):
    """:mod:`daydream.opseq` with ``call_for``/``_bind`` stand-ins: the op named by a signature
    costs ``costs[name](call)`` ns on a fake clock."""
    from daydream import opseq

    clock, calls = _Clock(), {}
    monkeypatch.setattr(opseq, "time", clock)
    monkeypatch.setattr(opseq, "call_for", lambda sig: (sig, None))

    def bind(sig, _):
        if sig == "broken":
            raise opseq.DaydreamError("cannot rebuild broken")
        calls[sig] = calls.get(sig, -1)

        def run():
            calls[sig] += 1
            clock.now += costs[sig](calls[sig])
        return run

    monkeypatch.setattr(opseq, "_bind", bind)
    monkeypatch.setattr(opseq, "_operand_bytes", lambda sig: 0)
    return opseq


def test_sequence_reruns_alternate_the_two_sequences_and_keep_median_ratios(monkeypatch):
    """Per round the traced sequence, then the variant's; a slow spell hitting one round whole
    (both sides 3x) does not move the ratio; each signature its own median over occurrences."""
    slow = lambda k: 3 if k == 2 else 1                                            # noqa: E731
    costs = {"mm": lambda k: 100 * slow(k), "mm/2": lambda k: 60 * slow(k),
             "relu": lambda k: 10, "relu/2": lambda k: 5, "wgrad": lambda k: 50}
    opseq = _sequence_fixture(monkeypatch, costs)
    variant = {"mm": "mm/2", "relu": "relu/2"}.get                                  # wgrad: no variant
    got = opseq.sequence_ratios(["mm", "relu", "broken", "wgrad", "mm"], variant, rounds=3)
    assert got == {"mm": 0.6, "relu": 0.5}


def test_sequence_reruns_go_on_until_their_span(monkeypatch):
    """At least ``rounds`` rounds after the warm-up, and more while the rounds took less than
    ``span_s``: a round here costs 435 ns of the fake clock; the span ends 1000 ns after the
    warm-up round, so rounds 1, 2 and 3 run (3 started before it ended)."""
    seen = []
    costs = {"mm": lambda k: 100, "mm/2": lambda k: seen.append(k) or 60, "relu": lambda k: 10,
             "relu/2": lambda k: 5, "wgrad": lambda k: 50}
    opseq = _sequence_fixture(monkeypatch, costs)
    variant = {"mm": "mm/2", "relu": "relu/2"}.get
    assert opseq.sequence_ratios(["mm", "relu", "wgrad", "mm"], variant, rounds=1, span_s=1e-6) == {
        "mm": 0.6, "relu": 0.5}
    assert len(seen) == 2 * 4                      # two mm occurrences, warm-up + 3 rounds
    seen.clear()
    opseq.sequence_ratios(["mm", "relu", "wgrad", "mm"], variant, rounds=1, span_s=0)
    assert len(seen) == 2 * 2


def test_sequence_reruns_repeat_the_variant_back_to_back_for_micro_batches(monkeypatch):
    """``variant_repeats``: the variant's whole sequence runs that many times in a row on the
    same operands and each occurrence counts its mean, exact: a pass that finds its weights
    cold costs 60, one right after another 20, so two passes count 40 each (one pass: 60)."""
    costs = {"mm": lambda k: 100, "mm/4": lambda k: 60 if k % 2 == 0 else 20}
    opseq = _sequence_fixture(monkeypatch, costs)
    assert opseq.sequence_ratios(["mm"], lambda s: "mm/4", rounds=3, span_s=0, variant_repeats=2) == {"mm": 0.4}
    opseq = _sequence_fixture(monkeypatch, {"mm": lambda k: 100, "mm/4": lambda k: 60})
    assert opseq.sequence_ratios(["mm"], lambda s: "mm/4", rounds=3, span_s=0) == {"mm": 0.6}


def test_sequence_reruns_at_another_thread_count(monkeypatch):
    """``variant_threads``: the variant's side of every round runs at that many intra-op threads
    (here the same op costs 60 instead of 100 at 2 threads); the caller's count is restored."""
    import torch

    before = torch.get_num_threads()
    try:
        opseq = _sequence_fixture(monkeypatch, {"mm": lambda k: 100 if torch.get_num_threads() == 1 else 60})
        assert opseq.sequence_ratios(["mm", "mm"], lambda s: s, threads=1, rounds=2, variant_threads=2) == {"mm": 0.6}
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_sequence_reruns_warm_each_side_at_its_own_thread_count(monkeypatch):
    """``warm``: each side's timed pass follows an untimed pass of its own.  Here a 2-thread call
    straight after a 1-thread one finds its caches cold (120 instead of 60); without ``warm``
    every 2-thread pass follows a 1-thread one, with it none of the timed ones does."""
    import torch

    last = []

    def mm(_):
        n = torch.get_num_threads()
        cold = n == 2 and last[-1:] != [2]
        last.append(n)
        return 120 if cold else (60 if n == 2 else 100)

    before = torch.get_num_threads()
    try:
        for warm, ratio in ((False, 1.2), (True, 0.6)):
            last.clear()
            opseq = _sequence_fixture(monkeypatch, {"mm": mm})
            assert opseq.sequence_ratios(["mm"], lambda s: s, threads=1, rounds=3, span_s=0, variant_threads=2,
                                         warm=warm) == {"mm": ratio}
    finally:
        torch.set_num_threads(before)


def test_sequence_reruns_give_way_to_single_reruns_above_the_memory_limit(monkeypatch):
    from daydream import opbench

    a = _mm([12, 16], [16, 24])
    opseq = _sequence_fixture(monkeypatch, {a: lambda k: 1, "b": lambda k: 1})
    monkeypatch.setattr(opseq, "_operand_bytes", lambda sig: opseq.SEQUENCE_MAX_BYTES)
    assert opseq.sequence_ratios([a], lambda s: "b") is None
    monkeypatch.setattr(opbench, "_ratios", lambda sigs, other, threads: {"alone": 1.0})
    assert opbench.batch_time_ratios([a], {12}, 0.5, sequence=[a]) == {"alone": 1.0}


def test_batch_size_reruns_one_iterations_ops_in_traced_order(tmp_path, profile, monkeypatch):
    """The sequence handed to the re-runs is one iteration's compute ops in traced order."""
    from daydream import opseq

    out = _tiny_trace(tmp_path)
    seen = []
    real = opseq.sequence_ratios
    monkeypatch.setattr(opseq, "sequence_ratios", lambda seq, *a, **k: seen.append(list(seq)) or real(seq, *a, **k))
    rep, _ = predict(out, ["batch-size:factor=0.5"], device=profile)
    assert len(seen) == 1
    names = [json.loads(s)[0] for s, *_ in seen[0]]
    dims = [json.loads(s)[1][:2] for s, *_ in seen[0]]
    # forward: two addmm (16 -> 40, 40 -> 24); backward: the last layer's grads first, then the first's
    assert names[:2] == ["aten::addmm", "aten::addmm"] and dims[0][1] == [12, 16] and dims[1][1] == [12, 40]
    assert "aten::mm" in names[2:] and "aten::addmm" not in names[2:]
    off, _ = predict(out, ["batch-size:factor=0.5,in_sequence=0"], device=profile)
    assert len(seen) == 1                                  # each op alone: no sequence
    assert rep.predicted_ms > 0 and off.predicted_ms > 0


def test_a_layers_ops_share_its_weight_in_the_rerun_sequence(tmp_path, profile):
    """The re-run sequence names each argument that is a layer's parameter (the module table's
    shapes): the forward ``addmm`` reads ``W.t()`` and the backward ``mm`` reads ``W``, one key."""
    from daydream.analysis import trace_and_graph
    from daydream.optimizations.base import WhatIfContext

    tr, g = trace_and_graph(_tiny_trace(tmp_path))
    ctx = WhatIfContext(graph=g, trace=tr, device=profile)
    seq = iteration_sequence(ctx, rerun_tasks(ctx), shared=True)
    named = [(json.loads(s)[0], keys) for s, keys, *_ in seq]
    assert named[1] == ("aten::addmm", ("Sequential.2#1", None, "Sequential.2#0", None, None))   # bias, x, W.t()
    assert named[2] == ("aten::mm", (None, "Sequential.2#0"))             # its grad-input: grad @ W
    assert named[3][1] is None                                            # grad-weight: no parameter read
    assert all(isinstance(s, str) for s in iteration_sequence(ctx, rerun_tasks(ctx)))


def test_micro_batches_rerun_their_sequence_back_to_back(tmp_path, profile, monkeypatch):
    """``batch-size:repeats=N`` re-runs the scaled sequence N times in a row; the pipeline's
    micro-batch costs ask for M passes of batch / M; a repeat count below 1 is refused."""
    from daydream import opseq
    from daydream.optimizations.base import OptionError

    out = _tiny_trace(tmp_path)
    seen = []
    real = opseq.sequence_ratios
    monkeypatch.setattr(opseq, "sequence_ratios",
                        lambda seq, *a, **k: seen.append(k.get("variant_repeats", 1)) or real(seq, *a, **k))
    predict(out, ["batch-size:factor=0.5,repeats=2"], device=profile)
    predict(out, ["pipeline:stages=1,microbatches=4"], device=profile)
    assert seen == [2, 4]
    with pytest.raises(OptionError, match="repeats must be at least 1"):
        predict(out, ["batch-size:factor=0.5,repeats=0"], device=profile)


def test_sequence_reruns_by_time_weigh_each_occurrence_by_its_time(monkeypatch):
    """``by_time``: a signature's ratio is its occurrences' summed variant time over their summed
    traced time; the default median over occurrences drops the one occurrence that costs more."""
    costs = {"mm": lambda k: 100, "mm/2": lambda k: 300 if k % 3 == 0 else 50}
    opseq = _sequence_fixture(monkeypatch, costs)
    variant = {"mm": "mm/2"}.get
    assert opseq.sequence_ratios(["mm"] * 3, variant, rounds=3) == {"mm": 0.5}
    got = opseq.sequence_ratios(["mm"] * 3, variant, rounds=3, by_time=True)
    assert got == {"mm": pytest.approx(400 / 300)}


def test_the_rerun_sequence_has_each_call_once_and_no_wrapper(tmp_path, profile):
    """Every CPU op of an iteration asked for: an op split into slices by its nested calls is one
    call (``aten::mm`` around ``resolve_conj``), and ``aten::linear`` is left out for the
    ``addmm`` it wraps, which the re-run of a ``linear`` would run a second time."""
    from daydream.analysis import trace_and_graph
    from daydream.model import EventKind
    from daydream.optimizations.base import WhatIfContext
    from optimizations._sequence import op_calls

    tr, g = trace_and_graph(_tiny_trace(tmp_path))
    ctx = WhatIfContext(graph=g, trace=tr, device=profile)
    T = g.tasks
    ops = np.flatnonzero(T["kind"] == EventKind.CPU_OP)
    names = [json.loads(s)[0] for s in iteration_sequence(ctx, ops)]
    assert names.count("aten::addmm") == 2 and names.count("aten::mm") == 3       # 2 forward, 3 backward
    assert "aten::linear" not in names
    its = T["iteration"][ops]
    first = ops[its == its[its >= 0].min()]
    first = first[np.argsort(T["traced_start_ns"][first], kind="stable")]
    calls = op_calls(ctx, first)
    events = [int(T["event"][t]) for t in calls]
    assert len(events) == len(set(events)) < len(first)        # once each, fewer than the slices
