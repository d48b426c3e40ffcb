"""Validation of ``hfta``: N really fused MLPs against the prediction from one MLP's trace.

The baseline is the bundled MLP (``daydream.workloads.mlp`` with the
validation sizes); the variant is ``daydream.workloads.hfta`` training N
copies fused into one job (batched GEMMs over stacked parameters, one fused
SGD step, different learning rates) with the same per-copy batch.  Both are
traced with ``daydream trace`` and measured the same way (mean ProfilerStep
iteration after the first).  With ``repeat`` > 1 the configurations are traced
in alternation, ``repeat`` rounds, and each keeps its fastest run.

Run with ``daydream validate --workload "" --opt hfta -o DIR --no-public``.
"""
from __future__ import annotations

import time
from pathlib import Path

from ..errors import DaydreamError
from ..analysis import replay
from ..validate import WORKLOAD_ARGS, ValidationRow, trace_workload
from ..whatif import predict

__all__ = ["MODELS", "ITERATIONS", "validate_rows"]

#: Numbers of fused copies that are validated (each traced run takes a few seconds).
MODELS = (2, 4, 8)
#: Iterations traced per run.
ITERATIONS = 5


def _traced(name, path, args, k, repeat):
    p = path.with_name(path.name.replace(".json", f".r{k}.json")) if repeat > 1 else path
    p = trace_workload(name, p, args, iterations=ITERATIONS)
    return p, replay(p)[0]


def validate_rows(out_dir: Path, profile_path: str, progress=print, repeat: int = 1) -> list:
    """Trace the MLP and N fused copies for each N, ``repeat`` rounds in alternation (each
    configuration keeps its fastest run: load from other work only adds time); one row per N."""
    tdir = Path(out_dir) / "traces"
    tdir.mkdir(parents=True, exist_ok=True)
    configs = {0: ("mlp", ())} | {n: ("hfta", ("--models", str(n), *WORKLOAD_ARGS["mlp"])) for n in MODELS}
    best = {}
    t0 = time.time()
    for k in range(max(1, repeat)):
        for n, (name, args) in configs.items():
            what = "the single-model mlp baseline" if n == 0 else f"{n} fused mlp models"
            progress(f"hfta: run {k + 1}/{max(1, repeat)}: tracing {what}")
            try:
                run = _traced(name, tdir / f"hfta.mlp.n{n}.json.gz", args, k, repeat)
            except DaydreamError as exc:
                progress(f"hfta: {what}: skipped ({exc})")
                continue
            if n not in best or run[1].measured_ms < best[n][1].measured_ms:
                best[n] = run
    if 0 not in best:
        return []
    rows = []
    for n in MODELS:
        if n not in best:
            continue
        spec = f"hfta:models={n}"
        report, _ = predict(best[0][0], [spec], profile_path=profile_path)
        row = ValidationRow("mlp", spec, report.baseline_ms, report.predicted_ms, best[n][1].measured_ms)
        rows.append(row)
        progress(f"hfta: models={n}: predicted {row.predicted_ms:.2f} ms, measured {row.measured_ms:.2f} ms, "
                 f"error {row.error_pct:.1f}% (throughput gain predicted {report.metrics['throughput_gain']:.2f}x, "
                 f"measured {n * report.measured_ms / row.measured_ms:.2f}x)")
    progress(f"hfta: {time.time() - t0:.0f} s")
    return rows
