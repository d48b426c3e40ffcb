"""Shared fixtures: the public traces of ../shared, tiny hand-made graphs."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from daydream.graph.graph import Anchor, DependencyGraph, EdgeKind
from daydream.model import EventKind, Lane, LaneKind

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("DAYDREAM_SHARED_TRACES", REPO.parent / "shared" / "traces" / "public"))


def public_traces() -> list[Path]:
    """Every timing trace in ../shared/traces/public (execution traces excluded)."""
    if not SHARED.is_dir():
        return []
    return sorted(p for p in SHARED.rglob("*") if p.is_file()
                  and p.name.endswith((".json.gz", ".json", ".tar.gz")) and "_et." not in p.name)


@pytest.fixture(autouse=True)
def _short_reruns(monkeypatch):
    """Op re-runs take their minimum rounds only: the spans that steady a prediction on a noisy
    machine (:data:`daydream.opseq.SEQUENCE_SPAN_S`, :data:`daydream.opbench.PAIR_SPAN_S`) would
    add seconds to each test."""
    from daydream import opbench, opseq

    monkeypatch.setattr(opseq, "SEQUENCE_SPAN_S", 0.0)
    monkeypatch.setattr(opbench, "PAIR_SPAN_S", 0.0)


@pytest.fixture
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip("../shared/traces/public is absent")
    return SHARED


class GraphMaker:
    """Builds small graphs by hand for exact-time simulator tests.

    >>> m = GraphMaker(); cpu = m.lane(LaneKind.CPU_THREAD)
    >>> a = m.task(cpu, 10); b = m.task(cpu, 5, gap=2)
    """

    def __init__(self):
        self.g = DependencyGraph()
        for r in range(8):
            self.g.markers[r] = []

    def lane(self, kind=LaneKind.CPU_THREAD, rank=0, device=0) -> int:
        n = len(self.g.lanes)
        return self.g.add_lane(Lane(rank, kind, 100 + rank, n, f"lane {n}", device))

    def task(self, lane, dur, gap=0, kind=None, name="t", rank=None, **cols) -> int:
        ln = self.g.lanes[lane]
        if kind is None:
            kind = EventKind.CPU_OP if ln.kind == LaneKind.CPU_THREAD else EventKind.KERNEL
        (t,) = self.g.add_tasks(lane=[lane], dur_ns=[dur], gap_ns=[gap], kind=[kind],
                                name=[self.g.names.intern(name)],
                                rank=[ln.rank if rank is None else rank],
                                **{k: [v] for k, v in cols.items()})
        self.g.lane_tasks[lane].append(int(t))
        return int(t)

    def edge(self, src, dst, kind=EdgeKind.DATA, lag=0, anchor=Anchor.END, target=Anchor.START):
        self.g.add_edges(src, dst, kind, lag_ns=lag, anchor=anchor, target=target)

    def launch(self, src, dst, lag=0):
        self.edge(src, dst, EdgeKind.LAUNCH, lag, anchor=Anchor.START)


@pytest.fixture
def maker() -> GraphMaker:
    return GraphMaker()


# --- collection (daydream trace) helpers ------------------------------------

import subprocess as _subprocess
import sys as _sys

TRAIN_SCRIPT = '''
import sys, time, torch
from torch import nn
steps = int(sys.argv[1]); status = int(sys.argv[2]) if len(sys.argv) > 2 else 0
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(inplace=True), nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
i = 0
while steps < 0 or i < steps:
    opt.zero_grad()
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    i += 1
    print(f"step {i}", flush=True)
    if steps < 0:
        time.sleep(0.02)
print("script done", flush=True)
sys.exit(status)
'''


@pytest.fixture
def train_script(tmp_path) -> Path:
    """A tiny training script: ``python train.py STEPS [EXIT_STATUS]`` (STEPS < 0: forever)."""
    path = tmp_path / "train.py"
    path.write_text(TRAIN_SCRIPT)
    return path


def daydream_cmd(*args: str) -> list[str]:
    """argv running the daydream CLI from this checkout with the test interpreter."""
    return [_sys.executable, "-c", "import sys; from daydream.cli import main; sys.argv[0] = 'daydream'; main()", *args]


def run_daydream(*args: str, cwd=None, timeout=120, pythonpath=()) -> _subprocess.CompletedProcess:
    """Run ``daydream ARGS`` to completion, capturing text output."""
    parts = [str(REPO), *map(str, pythonpath), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in parts if p))
    return _subprocess.run(daydream_cmd(*args), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def bench_module(name: str):
    """The benchmark ``benchmarks/NAME.py`` loaded as a module (its own folder put on the path
    by the script itself where it imports a sibling)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"{name}_bench", REPO / "benchmarks" / f"{name}.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def flat_profile(matmul=1e10, bf16_matmul=None, bw=1e10, overhead_ns=1000, allreduce=(1e9, 10_000.0),
                 fetch=(100_000.0, 0.0)):
    """A deterministic device profile for what-if tests (flat curves)."""
    from daydream.device import Curve, DeviceProfile

    mm = {"float32": Curve.flat(matmul), "bfloat16": Curve.flat(bf16_matmul or matmul),
          "float16": Curve.flat(bf16_matmul or matmul)}
    ew = {k: Curve.flat(bw) for k in ("float32", "bfloat16", "float16")}
    return DeviceProfile(name="test device", kind="cpu", matmul=mm, elementwise=ew, op_overhead_ns=overhead_ns,
                         collective={"gloo": allreduce}, loader_fetch=fetch)


def assert_profile_refuses(path, field: str, cases) -> None:
    """Write each ``(bad value, message)`` of ``cases`` as the saved profile's ``field``; loading
    it must raise :class:`~daydream.errors.DaydreamError` matching the message."""
    import json

    from daydream.device import load_profile
    from daydream.errors import DaydreamError

    doc = json.loads(Path(path).read_text())
    for bad, why in cases:
        doc[field] = bad
        Path(path).write_text(json.dumps(doc))
        with pytest.raises(DaydreamError, match=why):
            load_profile(path)


@pytest.fixture
def profile():
    return flat_profile()


def settled_graph(trace):
    """The graph :func:`daydream.whatif.predict` starts from: built, stalled ops settled."""
    from daydream.graph import build_graph
    from daydream.graph.stalls import settle_stalls

    g = build_graph(trace)
    settle_stalls(g)
    return g


@pytest.fixture(scope="session")
def own_trace():
    from daydream import load_trace

    def get(name):
        return load_trace(REPO / "traces" / f"{name}.trace.json.gz")
    return get
