"""Validation of ``tensor-parallel``: the bundled transformer split over 2 gloo ranks for real.

The baseline is the unsplit model traced on one process
(``python -m daydream.workloads.tensor_parallel``); the variant is the same
workload under ``daydream trace --nproc 2``, split with torch's
tensor-parallel API (``ColwiseParallel``/``RowwiseParallel`` on a CPU
``DeviceMesh``).  Both use one intra-op thread per process, so the two ranks
get a core each on a 2-core machine; both are measured the same way (mean of
the ProfilerStep iterations after the first, rank 0), the fastest of
``repeat`` runs kept (baseline and split runs alternate).  torch's TP API
overhead, part of the prediction, is re-measured at the start.
"""
from __future__ import annotations

from pathlib import Path

from daydream.analysis import replay
from daydream.errors import DaydreamError
from daydream.validate import THREADS, ValidationRow, trace_workload
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
    _fresh_api_overhead()
    try:
        base, measured = _interleaved(repeat, tdir, iterations, progress)
        report, _ = predict(base[0], [spec], profile_path=profile_path)
    except DaydreamError as exc:
        progress(f"tensor-parallel: skipped ({exc})")
        return []
    measured = measured[1]
    row = ValidationRow("transformer (torch TP)", spec, report.baseline_ms, report.predicted_ms, measured.measured_ms)
    progress(f"tensor-parallel: predicted {row.predicted_ms:.2f} ms, measured {row.measured_ms:.2f} ms, "
             f"error {row.error_pct:.1f}%")
    return [row]


def _interleaved(repeat, tdir, iterations, progress):
    """Baseline and split runs alternated ``repeat`` times (load that drifts hits both alike);
    the fastest of each is kept.  Returns ((path, report) of the baseline, of the split run)."""
    base, split = [], []
    for k in range(max(repeat, 1)):
        progress(f"tensor-parallel: run {k + 1}/{max(repeat, 1)}: unsplit transformer (1 process)")
        p = trace_workload(WORKLOAD, tdir / f"tp.base.r{k}.json.gz", ARGS, iterations=iterations)
        base.append((p, replay(p)[0]))
        progress(f"tensor-parallel: run {k + 1}/{max(repeat, 1)}: split over {DEGREE} gloo ranks")
        p = trace_workload(WORKLOAD, tdir / f"tp.t{DEGREE}.r{k}.json.gz", ARGS, iterations=iterations, nproc=DEGREE)
        split.append((p, replay(p)[0]))
    fastest = lambda runs: min(runs, key=lambda r: r[1].measured_ms)  # noqa: E731
    return fastest(base), fastest(split)


def _fresh_api_overhead():
    """Re-measure torch's TP API overhead now (it is part of the prediction being validated)."""
    from daydream.device import default_profile_path

    path = Path(default_profile_path("cpu", THREADS)).with_name(f"tp-api-overhead-{THREADS}t.json")
    path.unlink(missing_ok=True)
