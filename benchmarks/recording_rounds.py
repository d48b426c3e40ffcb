"""The pipeline and Tessel rows with and without the tracer's recording cost taken out, round by round.

Each round traces the pipeline validation's baseline (the bundled MLP at its sizes, 10
iterations, one process), predicts from it right away (:func:`daydream.validate.predict_now`, the
co-run rate measured then) the 1-stage, GPipe and Tessel V rows twice: with ``recording_us=0``
(the trace's recording cost kept in every micro-batch pass) and with the cost measured here
(:func:`daydream.validation.pipeline.recording_us`), then runs each for real once
(:func:`daydream.validation.pipeline.measure_pipeline`).  Prints per round and row the real mean
step and both predictions with their signed errors.

Usage (a validation's profile and its Tessel V schedule)::

    python benchmarks/recording_rounds.py --profile DIR/device-cpu-1t.json --v-csv DIR/tessel-v.csv \\
        --rounds 3 --action-overhead-us 123
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

__all__ = ["main"]


def main(argv=None) -> None:
    from daydream.validate import predict_now, trace_workload
    from daydream.validation.pipeline import MODEL_ARGS, measure_pipeline, recording_us

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--profile", required=True, help="device profile (a validation's DIR/device-cpu-1t.json)")
    p.add_argument("--v-csv", required=True, help="the Tessel V schedule a validation ran (DIR/tessel-v.csv)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--action-overhead-us", type=float, default=130.0, help="the runtime's cost per action")
    args = p.parse_args(argv)
    rec, ovh = recording_us(), f"action_overhead_us={args.action_overhead_us:.0f}"
    rows = {"1-stage": (f"pipeline:stages=1,microbatches=4,schedule=gpipe,{ovh}",
                        lambda: measure_pipeline("gpipe", ("--nproc", "1"))),
            "gpipe": (f"pipeline:stages=2,microbatches=4,schedule=gpipe,partition=MLP.blocks.2,{ovh}",
                      lambda: measure_pipeline("gpipe")),
            "V": ("tessel:stages=2,microbatches=4,placement=0:1:1:0,partition=MLP.blocks.1:MLP.blocks.2:MLP.blocks.3,"
                  f"max_lag=3,budget=3000,{ovh},schedule_csv={args.v_csv}",
                  lambda: measure_pipeline("csv", ("--csv", args.v_csv)))}
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.rounds):
            trace = trace_workload("mlp", Path(tmp) / f"base.r{k}.json.gz", MODEL_ARGS, iterations=10)
            specs = {n: (f"{s},recording_us=0", f"{s},recording_us={rec:.2f}") for n, (s, _) in rows.items()}
            out = predict_now(trace, [x for pair in specs.values() for x in pair], args.profile)
            for name, (kept, cut) in specs.items():
                real = rows[name][1]()
                a, b = out[kept].predicted_ms, out[cut].predicted_ms
                print(f"round {k + 1} {name}: real {real:.1f} ms; predicted {a:.1f} ({100 * (a / real - 1):+.1f} %), "
                      f"with recording_us={rec:.2f} {b:.1f} ({100 * (b / real - 1):+.1f} %)", flush=True)


if __name__ == "__main__":
    main()
