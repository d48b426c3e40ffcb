"""Validation of ``tensor-parallel``: the bundled transformer split over 2 gloo ranks for real.

The baseline is the unsplit model traced on one process
(``python -m daydream.workloads.tensor_parallel``); the variant is the same
workload under ``daydream trace --nproc 2``, split with torch's
tensor-parallel API (``ColwiseParallel``/``RowwiseParallel`` on a CPU
``DeviceMesh``).  Both use one intra-op thread per process, so the two ranks
get a core each on a 2-core machine; both are measured the same way (mean of
the ProfilerStep iterations after the first, rank 0), the fastest of
``repeat`` runs kept.
"""
from __future__ import annotations

from pathlib import Path

from daydream.errors import DaydreamError
from daydream.validate import THREADS, ValidationRow, fastest_run
from daydream.whatif import predict

__all__ = ["validate_rows", "WORKLOAD", "ARGS", "DEGREE"]

WORKLOAD = "tensor_parallel"
#: Model and batch of the validation run (heads divisible by the degree).
HEADS = 8
ARGS = ("--batch-size", "8", "--d-model", "256", "--heads", str(HEADS), "--seq-len", "128", "--layers", "2",
        "--threads", str(THREADS))
DEGREE = 2


def validate_rows(out_dir: Path, profile_path: str, progress=print, repeat: int = 1, iterations: int = 5) -> list:
    """Trace the unsplit baseline, predict ``tensor-parallel:degree=2``, run it for real, compare."""
    tdir = Path(out_dir) / "traces"
    tdir.mkdir(parents=True, exist_ok=True)
    spec = f"tensor-parallel:degree={DEGREE},backend=gloo,heads={HEADS}"
    try:
        progress("tensor-parallel: tracing the unsplit transformer (1 process)")
        base, _ = fastest_run(repeat, WORKLOAD, tdir / "tp.base.json.gz", ARGS, iterations)
        report, _ = predict(base, [spec], profile_path=profile_path)
        progress(f"tensor-parallel: tracing the transformer split over {DEGREE} gloo ranks for real")
        _, measured = fastest_run(repeat, WORKLOAD, tdir / f"tp.t{DEGREE}.json.gz", ARGS, iterations, nproc=DEGREE)
    except DaydreamError as exc:
        progress(f"tensor-parallel: skipped ({exc})")
        return []
    row = ValidationRow("transformer (torch TP)", spec, report.baseline_ms, report.predicted_ms, measured.measured_ms)
    progress(f"tensor-parallel: predicted {row.predicted_ms:.2f} ms, measured {row.measured_ms:.2f} ms, "
             f"error {row.error_pct:.1f}%")
    return [row]
