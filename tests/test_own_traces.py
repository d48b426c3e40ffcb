"""The CPU traces the project recorded itself (traces/): load, map layers, replay exactly."""
from __future__ import annotations

import pytest

from daydream import load_trace, replay
from daydream.model import EventKind, Phase

from conftest import REPO

OWN = sorted((REPO / "traces").glob("*.trace.json.gz"))


@pytest.mark.parametrize("path", OWN, ids=[p.name for p in OWN])
def test_own_cpu_trace_replays_exactly_with_module_layers(path):
    r = load_trace(path).ranks[0]
    assert r.n_iterations == 5
    assert "daydream" in r.meta
    ops = (r.cols["kind"] == EventKind.CPU_OP) & (r.cols["iteration"] >= 0)
    layer_names = {r.layers[int(i)] for i in r.cols["layer"][ops] if i >= 0}
    assert any(n.count(".") >= 1 for n in layer_names)          # module paths, not just op names
    phases = set(r.cols["phase"][ops].tolist())
    assert {Phase.FORWARD, Phase.BACKWARD, Phase.OPTIMIZER} <= phases
    report, result = replay(path)
    assert report.error_pct < 1e-9
    assert (result.start_ns == result.graph.tasks["traced_start_ns"]).all()


def test_three_workloads_are_bundled():
    assert {p.name.split(".")[0] for p in OWN} == {"mlp", "cnn", "transformer"}
