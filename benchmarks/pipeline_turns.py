"""Would the 2-process pipeline rows gain from turns?  Bracketed rounds against rounds in turns.

The 1-stage pipeline row runs its real job in turns with a baseline trace of its own
(:func:`daydream.validation.pipeline.one_stage_in_turns`), which cut its per-round error's spread
from 13.7 % to 2.7 % (docs/validation-log.md, "Session 61").  This asks the same of a 2-process
schedule.  Each of ``--rounds`` rounds makes, in alternating order:

* ``bracket``: as ``daydream validate`` does: a baseline trace, the real 2-process run, another
  trace; the prediction is the mean of both traces' (each predicted right after it is taken);
* ``turns``: the baseline traced while the real job runs, their iterations in turns (the job's
  two ranks as one group, :func:`daydream.validate.run_in_turns`), predicted from that trace.

It prints every round's prediction, real run and signed error, and per mode the mean and the
standard deviation of the errors.  It calibrates the machine first if the default 1-thread profile
is missing (a few minutes).

Usage::

    python benchmarks/pipeline_turns.py --rounds 8 --schedule 1f1b
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

__all__ = ["main"]


def _bracket(out: Path, k: int, schedule: str, spec: str, prof: str) -> tuple:
    from daydream.validate import predict_now, trace_workload
    from daydream.validation.pipeline import MODEL_ARGS, STEPS, measure_pipeline

    preds = []
    real = None
    for side in ("a", "b"):
        path = trace_workload("mlp", out / f"b{k}{side}.json.gz", MODEL_ARGS, iterations=STEPS)
        preds.append(predict_now(path, [spec], prof)[spec].predicted_ms)
        if real is None:
            real = measure_pipeline(schedule, steps=STEPS)
    return statistics.fmean(preds), real


def _turns(out: Path, k: int, schedule: str, spec: str, prof: str) -> tuple:
    from daydream.validate import _trace_cmd, _traced, predict_now, run_in_turns
    from daydream.validation.pipeline import MODEL_ARGS, STEPS, WARMUP_STEPS, _cmd, _summary

    path = out / f"t{k}.json.gz"
    (code, _, err), (_, job_out, job_err) = run_in_turns(
        [(_trace_cmd("mlp", path, MODEL_ARGS, 2, STEPS, 1), 1),
         (_cmd(schedule, (), WARMUP_STEPS + STEPS, WARMUP_STEPS), 2)], one_core=False)
    trace = _traced("mlp", path, MODEL_ARGS, 1, code, err)
    real = float(_summary(schedule, job_out, job_err)["mean_ms"])
    return predict_now(trace, [spec], prof)[spec].predicted_ms, real


def main(argv=None) -> None:
    from daydream.validate import ensure_profile
    from daydream.validation.pipeline import MICROBATCHES, PARTITION, action_overhead_us, recording_us

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--schedule", default="1f1b", choices=("gpipe", "1f1b"))
    args = p.parse_args(argv)
    prof = ensure_profile()
    spec = (f"pipeline:stages=2,microbatches={MICROBATCHES},schedule={args.schedule},partition={PARTITION},"
            f"action_overhead_us={action_overhead_us(1):.0f},recording_us={recording_us():.2f}")
    errors = {"bracket": [], "turns": []}
    modes = {"bracket": _bracket, "turns": _turns}
    with tempfile.TemporaryDirectory(prefix="daydream-pipeline-turns-") as tmp:
        for k in range(args.rounds):
            for mode in (("bracket", "turns") if k % 2 == 0 else ("turns", "bracket")):
                pred, real = modes[mode](Path(tmp), k, args.schedule, spec, prof)
                errors[mode].append(100.0 * (pred / real - 1.0))
                print(f"{time.strftime('%T')} round {k} {mode:7s} predicted {pred:6.2f} real {real:6.2f} ms "
                      f"error {errors[mode][-1]:+6.1f} %", flush=True)
    for mode, v in errors.items():
        print(f"{mode}: mean {statistics.fmean(v):+.1f} %, sd {statistics.stdev(v) if len(v) > 1 else 0:.1f} %: "
              + " ".join(f"{x:+.1f}" for x in v))


if __name__ == "__main__":
    main()
