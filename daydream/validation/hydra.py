"""Validation of ``hydra``: a real 2-process shard-parallel run against the prediction.

The prediction comes from one trace of the bundled MLP on one process (the
validation sizes, one thread).  The real run (``daydream.workloads.hydra``)
trains K copies of that MLP, each split into the two shards the what-if
chose, over two gloo processes with one thread each, and measures the
makespan of one training step of all K models, one model at a time
(model-parallel) and shard-parallel, in alternating rounds (median over
rounds; the fastest of ``repeat`` runs).

Run with ``daydream validate --workload "" --opt hydra -o DIR --no-public``.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from ..errors import DaydreamError
from ..validate import WORKLOAD_ARGS, ValidationRow, fastest_run
from ..whatif import predict

__all__ = ["MODELS", "DEVICES", "validate_rows", "run_real"]

#: Numbers of models validated, each split over DEVICES processes.
MODELS = (2, 4)
DEVICES = 2
#: Iterations traced for the single-model baseline.
ITERATIONS = 5
#: The MLP's sizes, as in the other validations (``validate.WORKLOAD_ARGS["mlp"]``).
SIZES = ("--hidden", "512", "--batch-size", "64", "--threads", "1")


def run_real(models: int, shard0_layers: int, repeat: int = 1, rounds: int = 6) -> dict:
    """Run the real K-model, 2-process job ``repeat`` times; per schedule the fastest median makespan (ms)."""
    best = {}
    for _ in range(max(1, repeat)):
        cmd = [sys.executable, "-m", "daydream.workloads.hydra", "--models", str(models), "--devices", str(DEVICES),
               "--shard0-layers", str(shard0_layers), "--rounds", str(rounds), *SIZES]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.returncode != 0 or not lines:
            tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise DaydreamError(f"real hydra run (models={models}) failed: {tail}")
        out = json.loads(lines[-1])
        for k, v in out.items():
            if k.endswith("_ms") and not k.endswith("rounds_ms"):
                best[k] = min(best.get(k, float("inf")), v)
    return best


def validate_rows(out_dir: Path, profile_path: str, progress=print, repeat: int = 1) -> list:
    """Trace one MLP, predict both schedules for each K, run them for real; two rows per K."""
    if tuple(WORKLOAD_ARGS["mlp"]) != SIZES:
        raise DaydreamError("hydra validation: the real run's sizes no longer match validate.WORKLOAD_ARGS['mlp']")
    tdir = Path(out_dir) / "traces"
    tdir.mkdir(parents=True, exist_ok=True)
    progress("hydra: tracing the single-model mlp baseline")
    try:
        base, _ = fastest_run(repeat, "mlp", tdir / "hydra.mlp.base.json.gz", (), ITERATIONS)
    except DaydreamError as exc:
        progress(f"hydra: skipped ({exc})")
        return []
    rows = []
    for k in MODELS:
        t0 = time.time()
        reports = {}
        try:
            for sched in ("model-parallel", "shard-parallel"):
                reports[sched], _ = predict(base, [f"hydra:models={k},devices={DEVICES},schedule={sched}"],
                                            profile_path=profile_path)
            cut = int(reports["shard-parallel"].metrics["shard0_layers"])
            progress(f"hydra: running {k} models x {DEVICES} shards for real (first shard: {cut} layers)")
            measured = run_real(k, cut, repeat)
        except DaydreamError as exc:
            progress(f"hydra: models={k}: skipped ({exc})")
            continue
        for sched, rep in reports.items():
            row = ValidationRow(f"mlp x{k} on {DEVICES} procs", rep.optimizations[0], rep.baseline_ms,
                                rep.predicted_ms, measured[f"{sched}_ms"])
            rows.append(row)
            progress(f"hydra: models={k} {sched}: predicted {row.predicted_ms:.2f} ms, measured "
                     f"{row.measured_ms:.2f} ms, error {row.error_pct:.1f}%")
        sp, mp = measured["shard-parallel_ms"], measured["model-parallel_ms"]
        progress(f"hydra: models={k}: speedup predicted {reports['shard-parallel'].metrics['shard_parallel_speedup']:.2f}x, "
                 f"measured {mp / sp:.2f}x ({time.time() - t0:.0f} s)")
    return rows
