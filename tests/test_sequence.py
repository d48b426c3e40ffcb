"""Which traced calls the re-run sequence keeps (:func:`optimizations._sequence.op_calls`)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from daydream.graph.graph import DependencyGraph
from daydream.model import EventKind, Lane, LaneKind
from optimizations._sequence import op_calls


def _ctx(events, slices):
    """``events``: ``(start, dur)`` per event row; ``slices``: ``(event, start, dur, flops)`` per task."""
    g = DependencyGraph()
    cpu = g.add_lane(Lane(0, LaneKind.CPU_THREAD, 1, 1))
    ev, st, du, fl = zip(*slices)
    g.add_tasks(lane=[cpu] * len(slices), kind=[EventKind.CPU_OP] * len(slices), event=list(ev),
                traced_start_ns=list(st), dur_ns=list(du), flops=list(fl))
    cols = {"start_ns": np.array([s for s, _ in events]), "dur_ns": np.array([d for _, d in events]),
            "lane": np.zeros(len(events), np.int64)}
    return SimpleNamespace(graph=g, trace=SimpleNamespace(ranks=[SimpleNamespace(rank=0, cols=cols)]))


def test_an_op_with_flops_is_kept_though_its_nested_calls_take_most_of_its_time():
    """A small ``mm`` whose nested ``resolve_conj`` calls take 60 of its 100 ns is still the call."""
    ctx = _ctx([(0, 100), (20, 60)], [(0, 0, 20, 10**6), (1, 20, 60, 0), (0, 80, 20, 0)])
    assert op_calls(ctx, np.arange(3)) == [0]


def test_an_op_that_cannot_be_rerun_does_not_hide_the_ops_nested_in_it():
    """An ``AccumulateGrad`` node (not re-runnable) with most of its time its own around an
    ``add_``: the ``add_`` is kept; were the node re-runnable, it would do the work instead."""
    ctx = _ctx([(0, 100), (10, 30)], [(0, 0, 10, 0), (1, 10, 30, 0), (0, 40, 60, 0)])
    assert op_calls(ctx, np.arange(3), rerunnable={1}) == [1]
    assert op_calls(ctx, np.arange(3), rerunnable={0, 1}) == [0]
