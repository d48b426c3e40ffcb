"""The pipeline validation's 1-stage row, round by round, with the real run logged per action.

Each round traces the validation's baseline (the bundled MLP at the pipeline validation's sizes,
10 iterations, one process), predicts ``pipeline:stages=1,microbatches=4,schedule=gpipe`` from it
with the co-run rate measured then (:func:`daydream.validate.predict_now`), and runs the real
1-stage job (torch's ``ScheduleGPipe`` on one process, 24 steps, 4 of warm-up) under
``benchmarks/pipeline_timeline.py``.  It prints per round the prediction (its forward and
backward per micro-batch), the real run's median step and per-action medians (``F<mb>`` /
``B<mb>``; torch's chunks leave the loss out), and the error of the prediction.

Usage::

    python benchmarks/onestage_rounds.py --rounds 3 --profile DIR/device-cpu-1t.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["main"]

TIMELINE = Path(__file__).with_name("pipeline_timeline.py")


def _real(model_args) -> tuple:
    """``(median step ms, the per-action medians line)`` of one real 1-stage run."""
    cmd = [sys.executable, str(TIMELINE), "--step", "10", "--", "--schedule", "gpipe", "--nproc", "1",
           "--microbatches", "4", "--steps", "24", "--warmup", "4", "--threads", "1", "--pin-cores", *model_args]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.splitlines()
    steps = json.loads(next(line for line in out if line.startswith("{")))["step_ms"][4:]
    return statistics.median(steps), next(line for line in out if line.startswith("rank 0: median"))


def main(argv=None) -> None:
    from daydream.validate import predict_now, trace_workload
    from daydream.validation.pipeline import MODEL_ARGS

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--profile", required=True, help="device profile (a validation's DIR/device-cpu-1t.json)")
    p.add_argument("--action-overhead-us", type=float, default=130.0, help="the runtime's cost per action")
    args = p.parse_args(argv)
    spec = f"pipeline:stages=1,microbatches=4,schedule=gpipe,action_overhead_us={args.action_overhead_us:.0f}"
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.rounds):
            trace = trace_workload("mlp", Path(tmp) / f"base.r{k}.json.gz", MODEL_ARGS, iterations=10)
            rep = predict_now(trace, [spec], args.profile)[spec]
            step_ms, actions = _real(MODEL_ARGS)
            print(f"round {k + 1}: predicted {rep.predicted_ms:.1f} ms (per micro-batch F "
                  f"{rep.metrics['stage0_forward_ms']:.2f} / B {rep.metrics['stage0_backward_ms']:.2f} ms), real "
                  f"median step {step_ms:.1f} ms, error {100 * (rep.predicted_ms / step_ms - 1):+.1f} %; {actions}",
                  flush=True)


if __name__ == "__main__":
    main()
