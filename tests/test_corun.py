"""Co-run rate: one process's compute beside a second busy one, calibrated and used by the
CPU data-parallel what-if (its workers share one host)."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from daydream.device import load_profile, save_profile
from daydream.errors import DaydreamError
from daydream.graph import build_graph
from daydream.model import LaneKind
from daydream.whatif import predict

from conftest import flat_profile


def test_profile_keeps_corun_and_refuses_bad_ones(tmp_path):
    path = save_profile(dataclasses.replace(flat_profile(), corun=0.8), str(tmp_path / "p.json"))
    assert load_profile(path).corun == 0.8
    doc = json.loads(open(path).read())
    for bad in (0, 1.5, float("nan")):
        doc["corun"] = bad
        open(path, "w").write(json.dumps(doc))
        with pytest.raises(DaydreamError, match="corun"):
            load_profile(path)


def test_data_parallel_runs_the_traced_work_at_the_corun_rate(own_trace):
    trace = own_trace("mlp")
    spec = ["data-parallel:workers=2,stragglers=false"]
    _, alone = predict(trace, spec, device=flat_profile())
    _, shared = predict(trace, spec, device=dataclasses.replace(flat_profile(), corun=0.5))
    g, T = alone.graph, alone.graph.tasks
    cpu = [i for i, ln in enumerate(g.lanes) if ln.kind == LaneKind.CPU_THREAD]
    n = build_graph(trace).n_tasks                     # inserted tasks come after the traced ones
    traced = np.flatnonzero(np.isin(T["lane"], cpu) & (T["iteration"] >= 0) & (np.arange(g.n_tasks) < n))
    S = shared.graph.tasks
    assert len(traced) > 0
    assert np.array_equal(S["dur_ns"][traced], np.round(T["dur_ns"][traced] * 2))
    assert np.array_equal(S["gap_ns"][traced], np.round(T["gap_ns"][traced] * 2))
    assert shared.mean_iteration_ns()[1] > 1.5 * alone.mean_iteration_ns()[1]


def test_corun_factor_measures_two_processes():
    torch = pytest.importorskip("torch")
    from daydream.calibrate import _corun_factor

    f = _corun_factor(torch)
    assert 0 < f <= 1
