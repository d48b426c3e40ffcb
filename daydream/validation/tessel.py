"""Validate ``tessel``: the searched schedule executed for real by torch's schedule runtime.

Baseline: the bundled MLP traced on one process (shared with the pipeline
validation's sizes).  The ``tessel`` what-if searches a 2-device schedule for
two placements (:data:`PLACEMENTS`: the 2-stage chain, and 4 stages in a V
over 2 devices) and writes each winner as a per-rank action CSV; the pipeline
workload runs that CSV on 2 gloo processes with ``_PipelineScheduleRuntime``
(``--schedule csv``, the model cut into as many stages as the CSV names).
The schedules are searched on a first baseline trace; baseline traces and
runs then alternate (:func:`daydream.validation.pipeline.alternating`: a trace
before and after each round) and the median of the predictions of the
schedule that ran (``schedule_csv=``), one from each round's baselines, is
compared with the median run (each trace predicted right after it is taken, the
ranks' co-run rate and, since session 81, the hand-over figures measured then:
:func:`daydream.validate.predict_now`, ``handover=now``; a round's run is
the mean of :data:`daydream.validate.REAL_PROCESSES` runs in fresh processes, since session 63).  Until session 16 the
row predicted what a new search on the median baseline found, another
schedule than the one measured in three of five runs in session 16 (marked "other
schedule"); whether the search there would pick another is now only said.
"""
from __future__ import annotations

from pathlib import Path

from ..validate import REAL_PROCESSES, median_row, predict_now
from ..whatif import predict
from .pipeline import (MICROBATCHES, MODEL_ARGS, PARTITION, STEPS, action_overhead_us, alternating,
                       measure_pipeline, recording_us)
from .turns import drain

__all__ = ["validate_rows", "validation_rounds", "PLACEMENTS"]

#: Searched placements: a chain (stage k on device k, the workload's 2-stage split) and a V
#: (4 stages, one hidden block each, the head with the last; stages 0 and 3 on device 0).
PLACEMENTS = (("chain", f"partition={PARTITION}"),
              ("v", "placement=0:1:1:0,partition=MLP.blocks.1:MLP.blocks.2:MLP.blocks.3,max_lag=3,budget=3000"))


def validation_rounds(out_dir: Path, profile_path, progress=print, repeat: int = 1, iterations: int = STEPS):
    """One row per placement: the searched schedule, predicted and executed.  A runner
    (:mod:`daydream.validation.turns`): yields between rounds; returns the rows."""
    from ..validate import trace_workload

    out_dir = Path(out_dir)
    tdir = out_dir / "traces"
    tdir.mkdir(parents=True, exist_ok=True)
    overhead, rec = action_overhead_us(repeat, progress), recording_us(progress)
    progress("tessel: tracing a 1-process baseline (mlp) to search schedules on")
    first = trace_workload("mlp", tdir / "mlp.tessel-search.json.gz", MODEL_ARGS, iterations=iterations)
    specs = {}
    for tag, extra in PLACEMENTS:
        csv = out_dir / f"tessel-{tag}.csv"
        specs[tag] = (f"tessel:stages=2,microbatches={MICROBATCHES},{extra},action_overhead_us={overhead:.0f},"
                      f"recording_us={rec:.2f},handover=now")
        rep, _ = predict(first, [f"{specs[tag]},csv={csv}"], profile_path=profile_path)
        ref = rep.metrics.get("1f1b_ms")
        ref = f"1F1B on the same stages {ref:.2f} ms" if ref else "no 1F1B for this placement"
        progress(f"tessel: {tag}: best schedule {rep.metrics.get('schedule')} (predicted {rep.predicted_ms:.2f} ms, "
                 f"{ref})")
    runs = {tag: (lambda tag=tag: measure_pipeline("csv", ("--csv", str(out_dir / f"tessel-{tag}.csv")),
                                                   steps=iterations, processes=REAL_PROCESSES))
            for tag in specs}
    executed = {tag: f"{spec},schedule_csv={out_dir / f'tessel-{tag}.csv'}" for tag, spec in specs.items()}
    done = {}
    base, rounds, got = yield from alternating(
        repeat, tdir, runs, progress, tag="tessel", iterations=iterations,
        on_trace=lambda p: done.update({p: predict_now(p, executed.values(), profile_path)}))
    rows = []
    for tag, spec in specs.items():
        ran = out_dir / f"tessel-{tag}.csv"
        again = out_dir / f"tessel-{tag}.check.csv"
        best, _ = predict(base, [f"{spec},csv={again}"], profile_path=profile_path)
        row = median_row("mlp", f"{spec},schedule_csv={ran.name}", rounds, executed[tag], got[tag], profile_path, done)
        if again.read_text() != ran.read_text():
            progress(f"tessel: {tag}: searched on the median baseline, another schedule would win "
                     f"({best.predicted_ms:.2f} ms there; the one that ran: {row.predicted_ms:.2f} ms, the median "
                     "over the rounds)")
        name = row.optimization
        progress(f"tessel: {name}: predicted {row.predicted_ms:.2f} ms, measured {row.measured_ms:.2f} ms, "
                 f"error {row.error_pct:.1f}%")
        rows.append(row)
    return rows


def validate_rows(out_dir: Path, profile_path, progress=print, repeat: int = 1, iterations: int = STEPS) -> list:
    """:func:`validation_rounds` alone, its rounds back to back."""
    return drain(validation_rounds(out_dir, profile_path, progress, repeat, iterations))
