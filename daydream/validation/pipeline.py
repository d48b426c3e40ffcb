"""Validate ``pipeline`` against torch.distributed.pipelining on 2 CPU processes (gloo).

Baseline: the bundled MLP traced on one process with ``daydream trace``.
Prediction: ``pipeline:stages=2,microbatches=M,schedule=S,partition=MLP.blocks.2``
(the split the workload makes: hidden blocks 0-1 on stage 0, blocks 2-3 and
the head on stage 1).  Measurement: ``python -m daydream.workloads.pipeline
--schedule S`` (ScheduleGPipe / Schedule1F1B), mean step time after warm-up;
with ``repeat`` > 1 the runs of the schedules alternate and each keeps its
fastest (least disturbed) run, as :func:`daydream.validate.fastest_run` does.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ..errors import DaydreamError
from ..validate import THREADS, ValidationRow, fastest_run
from ..whatif import predict

__all__ = ["validate_rows", "MODEL_ARGS", "MICROBATCHES", "measure_pipeline", "SCHEDULES"]

#: Model sizes shared by the 1-process trace and the 2-process run (``mlp`` flags).
MODEL_ARGS = ("--hidden", "1024", "--batch-size", "64", "--layers", "4", "--in-features", "512")
MICROBATCHES = 4
SCHEDULES = ("gpipe", "1f1b")
#: The workload's split of 4 hidden blocks over 2 stages starts stage 1 at this module.
PARTITION = "MLP.blocks.2"


def measure_pipeline(schedule: str, extra=(), steps: int = 14, warmup: int = 4,
                     microbatches: int = MICROBATCHES) -> float:
    """Mean step time (ms) of one 2-process run of the pipeline workload."""
    cmd = [sys.executable, "-m", "daydream.workloads.pipeline", "--schedule", schedule, "--microbatches",
           str(microbatches), "--steps", str(steps), "--warmup", str(warmup), "--threads", str(THREADS),
           *MODEL_ARGS, *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            return float(json.loads(line)["mean_ms"])
    tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
    raise DaydreamError(f"pipeline run ({schedule}) failed: {tail}")


def validate_rows(out_dir: Path, profile_path, progress=print, repeat: int = 1) -> list:
    """Rows for GPipe and 1F1B on 2 stages (see the module docstring)."""
    tdir = Path(out_dir) / "traces"
    tdir.mkdir(parents=True, exist_ok=True)
    progress("pipeline: tracing the 1-process baseline (mlp)")
    base, _ = fastest_run(repeat, "mlp", tdir / "mlp.pipeline-base.json.gz", MODEL_ARGS)
    best = {s: float("inf") for s in SCHEDULES}
    for k in range(max(repeat, 1)):
        for s in SCHEDULES:
            progress(f"pipeline: running {s} on 2 processes ({k + 1}/{max(repeat, 1)})")
            best[s] = min(best[s], measure_pipeline(s))
    rows = []
    for s in SCHEDULES:
        spec = f"pipeline:stages=2,microbatches={MICROBATCHES},schedule={s},partition={PARTITION}"
        rep, _ = predict(base, [spec], profile_path=profile_path)
        row = ValidationRow("mlp", spec, rep.baseline_ms, rep.predicted_ms, best[s])
        progress(f"pipeline: {s}: predicted {row.predicted_ms:.2f} ms, measured {row.measured_ms:.2f} ms, "
                 f"error {row.error_pct:.1f}%")
        rows.append(row)
    return rows
