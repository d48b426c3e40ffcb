"""Validation of ``hfta``: N really fused models against the prediction from one model's trace.

The baseline is a bundled workload (the MLP and the CNN with the validation
sizes); the variant is ``daydream.workloads.hfta`` training N copies fused
into one job (batched GEMMs over stacked parameters, grouped convolutions,
one fused SGD step, different learning rates) with the same per-copy batch.  Both are
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

#: Per bundled workload: numbers of fused copies validated (each traced run takes seconds).
MODELS = {"mlp": (2, 4, 8), "cnn": (2, 4)}
#: Iterations traced per run.
ITERATIONS = 5


def _traced(name, path, args, k, repeat):
    p = path.with_name(path.name.replace(".json", f".r{k}.json")) if repeat > 1 else path
    p = trace_workload(name, p, args, iterations=ITERATIONS)
    return p, replay(p)[0]


def validate_rows(out_dir: Path, profile_path: str, progress=print, repeat: int = 1) -> list:
    """Trace each workload alone and as N fused copies for each N, ``repeat`` rounds in
    alternation (each configuration keeps its fastest run: load from other work only adds
    time); one row per workload and N."""
    tdir = Path(out_dir) / "traces"
    tdir.mkdir(parents=True, exist_ok=True)
    configs = {}
    for w, ns in MODELS.items():
        configs[(w, 0)] = (w, ())
        configs.update({(w, n): ("hfta", ("--model", w, "--models", str(n), *WORKLOAD_ARGS[w])) for n in ns})
    best = {}
    t0 = time.time()
    repeat = max(1, repeat)
    for k in range(repeat):
        for (w, n), (name, args) in configs.items():
            what = f"the single-model {w} baseline" if n == 0 else f"{n} fused {w} models"
            progress(f"hfta: run {k + 1}/{repeat}: tracing {what}")
            try:
                run = _traced(name, tdir / f"hfta.{w}.n{n}.json.gz", args, k, repeat)
            except DaydreamError as exc:
                progress(f"hfta: {what}: skipped ({exc})")
                continue
            if (w, n) not in best or run[1].measured_ms < best[(w, n)][1].measured_ms:
                best[(w, n)] = run
    rows = []
    for (w, n), (_, measured) in best.items():
        if n == 0 or (w, 0) not in best:
            continue
        spec = f"hfta:models={n}"
        report, _ = predict(best[(w, 0)][0], [spec], profile_path=profile_path)
        row = ValidationRow(w, spec, report.baseline_ms, report.predicted_ms, measured.measured_ms)
        rows.append(row)
        progress(f"hfta: {w} models={n}: predicted {row.predicted_ms:.2f} ms, measured {row.measured_ms:.2f} ms, "
                 f"error {row.error_pct:.1f}% (throughput gain predicted {report.metrics['throughput_gain']:.2f}x, "
                 f"measured {n * report.measured_ms / row.measured_ms:.2f}x)")
    progress(f"hfta: {time.time() - t0:.0f} s")
    return rows
