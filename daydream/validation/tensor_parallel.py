"""Validation of ``tensor-parallel``: the bundled transformer split over 2 gloo ranks for real.

The baseline is the unsplit model traced on one process
(``python -m daydream.workloads.tensor_parallel``); the variant is the same
workload under ``daydream trace --nproc 2``, split with torch's
tensor-parallel API (``ColwiseParallel``/``RowwiseParallel`` on a CPU
``DeviceMesh``).  Both use one intra-op thread per process, so the two ranks
get a core each on a 2-core machine; both are measured the same way (mean of
the ProfilerStep iterations after the first, rank 0), in ``repeat`` rounds of
a baseline run and then a split run; the row is the mean over the rounds.
torch's TP API overhead and its in-line all-reduce, part of the prediction,
are measured again for each round's prediction (:func:`_fresh_api_overhead`;
until session 83 once, at the start: the in-line all-reduce of one MiB read
3.01-3.90 ms in four measurements within two minutes, the API's figures per
iteration 33-43 ms of a 150 ms prediction, so one measurement moved every
round of a run alike: ``python benchmarks/tp_api_overhead.py --times 4``;
docs/validation-log.md, "Session 83").
The ranks' co-run rate is the trace's own ops re-run beside a twin when
predicting (``corun=trace``, as the pipeline, Tessel and Hydra rows; since
session 46): the profile's matmul probe (``corun=profile``, the what-if's
default) is a snapshot of the calibration, which read 0.46 and 0.50 in two
runs whose real TP rounds were not slowed (predictions +65 and +80 %;
docs/validation-log.md, sessions 38 and 46).  Each round's baseline is
predicted as soon as the round is traced, its co-run rate measured then
(:func:`daydream.validate.predict_now`'s way; until session 55 all rounds
after the last, at one rate: in run 2026-12-03f, 08:44, every round read
224-275 ms against real rounds of 155-190, and the same traces predicted
again 20 minutes later, at rates of 0.98-1.00, read 162-194).
"""
from __future__ import annotations

from pathlib import Path

from daydream.errors import DaydreamError
from daydream.validate import THREADS, iter_paired_rounds, rounds_count, rounds_label, rounds_row
from daydream.validation.turns import drain
from daydream.whatif import predict

__all__ = ["validate_rows", "validation_rounds", "WORKLOAD", "ARGS", "DEGREE"]

WORKLOAD = "tensor_parallel"
#: Model and batch of the validation run (heads divisible by the degree).
HEADS = 8
ARGS = ("--batch-size", "8", "--d-model", "256", "--heads", str(HEADS), "--seq-len", "128", "--layers", "2",
        "--threads", str(THREADS))
DEGREE = 2


def validation_rounds(out_dir: Path, profile_path: str, progress=print, repeat: int = 1, iterations: int = 5):
    """Trace the unsplit baseline and the split run, ``repeat`` rounds; one row: the means over
    the rounds of ``tensor-parallel:degree=2`` predicted from each round's baseline and of the
    split run measured in the same round (:func:`daydream.validate.rounds_row`).  A runner
    (:mod:`daydream.validation.turns`): yields between rounds; returns the rows."""
    tdir = Path(out_dir) / "traces"
    tdir.mkdir(parents=True, exist_ok=True)
    spec = f"tensor-parallel:degree={DEGREE},backend=gloo,heads={HEADS},corun=trace"
    configs = [(WORKLOAD, tdir / "tp.base.json.gz", ARGS, 1), (WORKLOAD, tdir / f"tp.t{DEGREE}.json.gz", ARGS, DEGREE)]
    progress(f"tensor-parallel: tracing the unsplit transformer (1 process) and the split one "
             f"({DEGREE} gloo ranks), {rounds_label(repeat, configs)}")
    n, rounds, predicted = rounds_count(repeat, configs), [], []
    try:
        for runs in iter_paired_rounds(repeat, configs, iterations):
            rounds.append(runs)
            predicted.append(_predict_now(runs[0][0], spec, profile_path))
            if len(rounds) < n:
                yield len(rounds) / n
        row, _ = rounds_row("transformer (torch TP)", spec, rounds, spec, profile_path, predicted=predicted)
    except DaydreamError as exc:
        progress(f"tensor-parallel: skipped ({exc})")
        return []
    progress(f"tensor-parallel: predicted {row.predicted_ms:.2f} ms, measured {row.measured_ms:.2f} ms, "
             f"error {row.error_pct:.1f}%")
    return [row]


def validate_rows(out_dir: Path, profile_path: str, progress=print, repeat: int = 1, iterations: int = 5) -> list:
    """:func:`validation_rounds` alone, its rounds back to back."""
    return drain(validation_rounds(out_dir, profile_path, progress, repeat, iterations))


def _predict_now(path, spec: str, profile_path):
    """``predict``'s ``(report, result)`` of ``spec`` from the trace at ``path``, its co-run rate
    (:func:`optimizations._corun.forget_measured`) and torch's TP API overhead
    (:func:`_fresh_api_overhead`) measured now."""
    from ..optimizations._corun import forget_measured

    forget_measured()
    _fresh_api_overhead()
    return predict(path, [spec], profile_path=profile_path)


def _fresh_api_overhead():
    """Forget torch's TP API overhead figures, so that the next prediction measures them again
    (they are part of the prediction being validated; about 35 s of two processes)."""
    from ..optimizations.tensor_parallel import forget_api_overhead

    forget_api_overhead(THREADS)
