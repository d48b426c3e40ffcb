"""Validation of ``hfta``: N really fused MLPs against the prediction from one MLP's trace.

The baseline is the bundled MLP (``daydream.workloads.mlp`` with the
validation sizes); the variant is ``daydream.workloads.hfta`` training N
copies fused into one job (batched GEMMs over stacked parameters, one fused
SGD step, different learning rates) with the same per-copy batch.  Both are
traced with ``daydream trace`` and measured the same way (mean ProfilerStep
iteration after the first; the fastest of ``repeat`` runs).

Run with ``daydream validate --workload "" --opt hfta -o DIR --no-public``.
"""
from __future__ import annotations

import time
from pathlib import Path

from ..errors import DaydreamError
from ..validate import WORKLOAD_ARGS, ValidationRow, fastest_run
from ..whatif import predict

__all__ = ["MODELS", "ITERATIONS", "validate_rows"]

#: Numbers of fused copies that are validated (each traced run takes a few seconds).
MODELS = (2, 4, 8)
#: Iterations traced per run.
ITERATIONS = 5


def validate_rows(out_dir: Path, profile_path: str, progress=print, repeat: int = 1) -> list:
    """Trace the MLP once, predict each N, trace N fused copies for real; one row per N."""
    tdir = Path(out_dir) / "traces"
    tdir.mkdir(parents=True, exist_ok=True)
    progress("hfta: tracing the single-model mlp baseline")
    try:
        base, _ = fastest_run(repeat, "mlp", tdir / "hfta.mlp.base.json.gz", (), ITERATIONS)
    except DaydreamError as exc:
        progress(f"hfta: skipped ({exc})")
        return []
    rows = []
    for n in MODELS:
        t0 = time.time()
        spec = f"hfta:models={n}"
        try:
            report, _ = predict(base, [spec], profile_path=profile_path)
            progress(f"hfta: tracing {n} fused mlp models for real")
            _, measured = fastest_run(repeat, "hfta", tdir / f"hfta.mlp.n{n}.json.gz",
                                      ("--models", str(n), *WORKLOAD_ARGS["mlp"]), ITERATIONS)
        except DaydreamError as exc:
            progress(f"hfta: models={n}: skipped ({exc})")
            continue
        row = ValidationRow("mlp", spec, report.baseline_ms, report.predicted_ms, measured.measured_ms)
        rows.append(row)
        progress(f"hfta: models={n}: predicted {row.predicted_ms:.2f} ms, measured {row.measured_ms:.2f} ms, "
                 f"error {row.error_pct:.1f}% (throughput gain predicted {report.metrics['throughput_gain']:.2f}x, "
                 f"measured {n * report.measured_ms / measured.measured_ms:.2f}x; {time.time() - t0:.0f} s)")
    return rows
