"""Validation of ``hfta``: N really fused models against the prediction from one model's trace.

The baseline is a bundled workload (the MLP and the CNN with the validation
sizes); the variant is ``daydream.workloads.hfta`` training N copies fused
into one job (batched GEMMs over stacked parameters, grouped convolutions,
one fused SGD step, different learning rates) with the same per-copy batch.  Both are
traced with ``daydream trace`` and measured the same way (mean ProfilerStep
iteration after the first), all of one workload's runs at once with their
iterations in turns (:func:`daydream.validate.paired_rounds`), so that the
machine's drift hits the baseline and the fused jobs alike.

Run with ``daydream validate --workload "" --opt hfta -o DIR --no-public``.
"""
from __future__ import annotations

import statistics
import time
from pathlib import Path

from ..errors import DaydreamError
from ..validate import WORKLOAD_ARGS, iter_paired_rounds, rounds_count, rounds_row
from .turns import drain

__all__ = ["MODELS", "ITERATIONS", "validate_rows", "validation_rounds"]

#: Per bundled workload: numbers of fused copies validated (each traced run takes seconds).
MODELS = {"mlp": (2, 4, 8), "cnn": (2, 4)}
#: Iterations traced per run, unless the caller says (``daydream validate --iterations``).
ITERATIONS = 5


def _configs(w, tdir: Path) -> list:
    """The baseline and each fused variant of workload ``w``, as :func:`paired_rounds` configs."""
    return [(w, tdir / f"hfta.{w}.n0.json.gz", (), 1)] + [
        ("hfta", tdir / f"hfta.{w}.n{n}.json.gz", ("--model", w, "--models", str(n), *WORKLOAD_ARGS[w]), 1)
        for n in MODELS[w]]


def validation_rounds(out_dir: Path, profile_path: str, progress=print, repeat: int = 1,
                      iterations: int = ITERATIONS):
    """Per workload, trace the single model and its N-fold fused jobs with iterations in turns,
    ``repeat`` rounds; one row per workload and N: the means over the rounds of the prediction
    from each round's baseline and of the fused job measured in the same round.  A runner
    (:mod:`daydream.validation.turns`): yields between rounds; returns the rows."""
    from ..optimizations._corun import forget_measured

    tdir = Path(out_dir) / "traces"
    tdir.mkdir(parents=True, exist_ok=True)
    rows = []
    t0 = time.time()
    total = len(MODELS) * rounds_count(repeat, _configs("mlp", tdir))
    taken = 0
    for w, ns in MODELS.items():
        progress(f"hfta: {w}: tracing the single model and {', '.join(map(str, ns))} fused copies, "
                 f"iterations in turns, x{max(repeat, 1)}")
        rounds = []
        try:
            for runs in iter_paired_rounds(repeat, _configs(w, tdir), iterations):
                rounds.append(runs)
                taken += 1
                if taken < total:
                    yield taken / total
        except DaydreamError as exc:
            progress(f"hfta: {w}: skipped ({exc})")
            continue
        forget_measured()   # the cycle curve measured when this workload's rounds are predicted
        for i, n in enumerate(ns, start=1):
            spec = f"hfta:models={n}"
            row, reports = rounds_row(w, spec, rounds, spec, profile_path, i)
            rows.append(row)
            single = statistics.fmean(r.measured_ms for r in reports)
            progress(f"hfta: {w} models={n}: predicted {row.predicted_ms:.2f} ms, measured {row.measured_ms:.2f} ms, "
                     f"error {row.error_pct:.1f}% (throughput gain predicted "
                     f"{statistics.fmean(r.metrics['throughput_gain'] for r in reports):.2f}x, "
                     f"measured {n * single / row.measured_ms:.2f}x)")
    progress(f"hfta: {time.time() - t0:.0f} s")
    return rows


def validate_rows(out_dir: Path, profile_path: str, progress=print, repeat: int = 1,
                  iterations: int = ITERATIONS) -> list:
    """:func:`validation_rounds` alone, its rounds back to back."""
    return drain(validation_rounds(out_dir, profile_path, progress, repeat, iterations))
