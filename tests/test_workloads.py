"""The bundled workloads run (tiny sizes) with their variant flags, and trace cleanly."""
from __future__ import annotations

import json
import math

import pytest

torch = pytest.importorskip("torch")

from daydream.collect import trace  # noqa: E402
from daydream.workloads import cnn, mlp, transformer  # noqa: E402

TINY = {
    "mlp": (mlp, ["--in-features", "16", "--hidden", "32", "--layers", "2", "--batch-size", "8"]),
    "cnn": (cnn, ["--channels", "4", "--stages", "2", "--image-size", "8", "--batch-size", "4"]),
    "transformer": (transformer, ["--vocab", "64", "--d-model", "32", "--heads", "2", "--layers", "1",
                                  "--seq-len", "8", "--batch-size", "4"]),
}
COMMON = ["--steps", "3", "--quiet", "--dataset-batches", "2"]


@pytest.mark.parametrize(
    "name, extra",
    [
        ("mlp", []),
        ("mlp", ["--optimizer", "adam", "--optimizer-impl", "fused", "--dtype", "bfloat16"]),
        ("mlp", ["--num-workers", "1", "--optimizer-impl", "foreach"]),
        ("cnn", ["--checkpoint", "--autocast", "bfloat16"]),
        ("transformer", ["--optimizer", "adamw", "--optimizer-impl", "for-loop", "--checkpoint"]),
    ],
)
def test_workload_variants_run(name, extra, capsys):
    module, sizes = TINY[name]
    times = module.main(sizes + COMMON + extra)
    assert len(times) == 3 and all(t > 0 for t in times)
    assert f"{name}: 3 steps" in capsys.readouterr().out


def test_help_lists_variant_flags(capsys):
    with pytest.raises(SystemExit):
        mlp.main(["--help"])
    text = capsys.readouterr().out
    for flag in ("--optimizer-impl", "--autocast", "--num-workers", "--compile", "--checkpoint", "--dtype"):
        assert flag in text


def test_checkpointed_workload_traces_with_markers(tmp_path):
    out = tmp_path / "cnn.json"
    module, sizes = TINY["cnn"]
    with trace(out, warmup=1, iterations=2, backward_ranges=True):
        module.main(sizes + COMMON + ["--checkpoint"])
    doc = json.loads(out.read_text())
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    bwd = [e for e in events if e["name"].startswith("daydream.bwd:SmallResNet.stages.")]
    fwd = [e for e in events if e["name"].startswith("daydream.fwd:")]
    assert bwd and fwd
    # recomputation inside backward gets no forward ranges: forward ranges
    # all start before the first backward range of their iteration
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["name"].startswith("ProfilerStep#"))
    assert len(steps) == 2
    for s, t in steps:
        first_bwd = min((e["ts"] for e in bwd if s <= e["ts"] <= t), default=math.inf)
        assert all(e["ts"] < first_bwd for e in fwd if s <= e["ts"] <= t)
    rows = {r["path"]: r for r in doc["daydream"]["modules"]}
    assert rows["SmallResNet.stem.0"]["output_bytes"] == 4 * 4 * 8 * 8 * 4


def test_shut_down_distributed_destroys_the_group():
    """The bundled multi-rank workloads end with it: the group is destroyed (and gloo's threads
    joined) while the interpreter is alive, not during finalization."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from daydream.workloads.common import shut_down_distributed

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    model = DistributedDataParallel(torch.nn.Linear(4, 4))
    model(torch.randn(2, 4)).sum().backward()          # a gradient all-reduce through gloo
    del model
    shut_down_distributed()
    assert not dist.is_initialized()
    shut_down_distributed()                               # and again: nothing to do
