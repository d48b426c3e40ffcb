"""Validation of ``hydra``: a real 2-process shard-parallel run against the prediction.

The prediction comes from one trace of the bundled MLP on one process (the
validation sizes, one thread).  The real run (``daydream.workloads.hydra``)
trains K copies of that MLP, each split into the two shards the what-if
chose, over two gloo processes with one thread each, and measures the
makespan of one training step of all K models, one model at a time
(model-parallel) and shard-parallel, in alternating rounds (median over
rounds); a round of the validation measures the mean of
:data:`daydream.validate.REAL_PROCESSES` such runs, each in fresh processes
(since session 63).  Baseline traces and real runs alternate, ``repeat`` rounds, all
with the split chosen from the first trace, each K's runs of a round between a
trace before and one after them: a round traces before each K, and the
trace before the next K (or the last one) closes it; run in turns with other
runners (:mod:`daydream.validation.turns`), a round takes a fresh trace before
its first K.  Until session 76 a round traced once, before its first K, so its
last K's runs sat some 30 s after that trace: over the rounds of 53 runs
(2026-12-04a to 12-06a) a round's K = 2 and K = 4 real runs correlated 0.43,
its prediction with the K = 4 runs next to its later trace 0.44, with the
K = 2 runs next to its earlier trace (and to that trace's co-run measurement)
0.27: the VM's speed moves within a round; a row
holds the median of the prediction from each trace around that K's runs (with that split,
``layers=``; since session 80 over the traces themselves, not over the rounds' means of two:
:func:`daydream.validate.median_row` ``per_trace``) and the median over the rounds of the real
makespan measured in them (:func:`daydream.validate.median_row`;
until session 47 the means: one slow real round in three cost shard-parallel
K = 2 its row in two runs of session 46).  Each trace is predicted right after it
is taken, the co-run rate of the two processes measured then
(:func:`daydream.validate.predict_now`; until session 38, once after the last
run).  (Until session 37 each round traced
once, before its runs: see :func:`daydream.validate.bracket_predictions`.)
Until session 16 each side kept its fastest: the fastest of a few
5-iteration one-process traces is further below its typical run than the
fastest of the 2-process jobs, so that under-predicted.

Run with ``daydream validate --workload "" --opt hydra -o DIR --no-public``.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from ..corelink import probed
from ..errors import DaydreamError
from ..validate import REAL_PROCESSES, WORKLOAD_ARGS, median_row, predict_now, run_env, trace_workload
from ..whatif import predict
from .turns import drain

__all__ = ["MODELS", "DEVICES", "SCHEDULES", "validate_rows", "validation_rounds", "run_real"]

SCHEDULES = ("model-parallel", "shard-parallel")

#: Numbers of models validated, each split over DEVICES processes.
MODELS = (2, 4)
DEVICES = 2
#: Iterations traced for the single-model baseline, unless the caller says.
ITERATIONS = 5
#: The MLP's sizes and threads, as in the other validations.
SIZES = tuple(WORKLOAD_ARGS["mlp"])


def run_real(models: int, shard0_layers: int, rounds: int = 6, processes: int = 1) -> dict:
    """Run the real K-model, 2-process job; per schedule the median makespan (ms) over its
    ``rounds``, and with ``processes`` > 1 the mean of that over as many runs, one after the
    other, each in fresh processes (:data:`daydream.validate.REAL_PROCESSES`)."""
    runs = [_run_real_once(models, shard0_layers, rounds) for _ in range(max(processes, 1))]
    return {s: statistics.fmean(run[s] for run in runs) for s in SCHEDULES}


def _run_real_once(models: int, shard0_layers: int, rounds: int) -> dict:
    cmd = [sys.executable, "-m", "daydream.workloads.hydra", "--models", str(models), "--devices", str(DEVICES),
           "--shard0-layers", str(shard0_layers), "--rounds", str(rounds), "--pin-cores", *SIZES]
    with probed():
        proc = subprocess.run(cmd, capture_output=True, text=True, env=run_env())
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise DaydreamError(f"real hydra run (models={models}) failed: {tail}")
    out = json.loads(lines[-1])
    return {s: out[f"{s}_ms"] for s in SCHEDULES}


def validation_rounds(out_dir: Path, profile_path: str, progress=print, repeat: int = 1,
                      iterations: int = ITERATIONS):
    """Trace one MLP and run each K for real, ``repeat`` rounds, each K's runs of a round between
    a baseline trace before and one after them; two rows per K, each the median of the
    predictions from the traces around that K's runs (each trace once) and the median over the
    rounds of the real makespan (the split chosen from the first trace throughout).  A runner
    (:mod:`daydream.validation.turns`): yields between rounds (a round's first K then takes a
    fresh trace before its runs if other work ran meanwhile); returns the rows."""
    tdir = Path(out_dir) / "traces"
    tdir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    repeat = max(1, repeat)
    bases, split = [], None
    measured = {k: {s: [] for s in SCHEDULES} for k in MODELS}
    pairs = {k: [] for k in MODELS}       # each K's (trace before, trace after) its runs, per round
    done = {}

    def trace(when):
        nonlocal split
        progress(f"hydra: {when}: tracing the single-model mlp baseline")
        bases.append(trace_workload("mlp", tdir / f"hydra.mlp.base.r{len(bases)}.json.gz", (), iterations=iterations))
        split = split or _split(bases[0], profile_path)
        done[bases[-1]] = predict_now(bases[-1], _specs(split).values(), profile_path)
        return bases[-1]

    try:
        before = trace(f"run 1/{repeat}")
        for r in range(repeat):
            for i, k in enumerate(MODELS):
                progress(f"hydra: run {r + 1}/{repeat}: {k} models x {DEVICES} shards for real "
                         f"(first shard: {split[0]} layers)")
                for s, v in run_real(k, split[0], processes=REAL_PROCESSES).items():
                    measured[k][s].append(v)
                nxt = MODELS[i + 1] if i + 1 < len(MODELS) else None
                after = trace(f"run {r + 1}/{repeat}, before {nxt} models" if nxt else
                              "after the last run" if r == repeat - 1 else f"after run {r + 1}/{repeat}")
                pairs[k].append((before, after))
                before = after
            if r < repeat - 1 and (yield (r + 1) / repeat):
                before = trace(f"run {r + 2}/{repeat}")
    except DaydreamError as exc:
        progress(f"hydra: skipped ({exc})")
        return []
    rows = []
    for k in MODELS:
        for s in SCHEDULES:
            row = median_row(f"mlp x{k} on {DEVICES} procs", None, pairs[k], _specs(split)[(k, s)],
                             measured[k][s], profile_path, done, per_trace=True)
            rows.append(row)
            progress(f"hydra: models={k} {s}: predicted {row.predicted_ms:.2f} ms, measured "
                     f"{row.measured_ms:.2f} ms, error {row.error_pct:.1f}% (rounds: measured "
                     + " / ".join(f"{v:.2f}" for v in measured[k][s]) + ")")
        mp, sp = rows[-2], rows[-1]
        progress(f"hydra: models={k}: speedup predicted {mp.predicted_ms / sp.predicted_ms:.2f}x, "
                 f"measured {mp.measured_ms / sp.measured_ms:.2f}x")
    progress(f"hydra: {time.time() - t0:.0f} s")
    return rows


def validate_rows(out_dir: Path, profile_path: str, progress=print, repeat: int = 1,
                  iterations: int = ITERATIONS) -> list:
    """:func:`validation_rounds` alone, its rounds back to back."""
    return drain(validation_rounds(out_dir, profile_path, progress, repeat, iterations))


def _specs(split) -> dict:
    """``{(models, schedule): spec}`` of the rows, with the shards' layers ``split``."""
    return {(k, s): f"hydra:models={k},devices={DEVICES},schedule={s},layers={':'.join(map(str, split))}"
            for k in MODELS for s in SCHEDULES}


def _split(trace_path, profile_path) -> tuple:
    """Layers per shard in the split the what-if chooses (the real runs use the same)."""
    rep, _ = predict(trace_path, [f"hydra:models=1,devices={DEVICES}"], profile_path=profile_path)
    return tuple(int(rep.metrics[f"shard{d}_layers"]) for d in range(DEVICES))
