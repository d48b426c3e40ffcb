"""Op re-runs in sequence against each op alone: a micro-batched loop predicted from a full-batch trace.

Each round traces, in turns (:func:`daydream.validate.trace_in_turns`: iterations alternate, so
the machine's drift falls on both), the pipeline validation's MLP at batch 64 (``python -m
daydream.workloads.mlp``) and the same model training on 4 micro-batches of 16 in one process
(``python -m daydream.workloads.pipeline --schedule none --nproc 1``: gradients accumulated, no
pipelining runtime), then predicts the second from the first with
``pipeline:stages=1,microbatches=4,schedule=gpipe,action_overhead_us=0``, whose per-micro-batch
costs come from ``batch-size`` re-runs: once in sequence (the default,
:func:`daydream.opseq.sequence_ratios`) and once with every op timed alone in a loop.

Usage::

    python benchmarks/rerun_context.py --rounds 5
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

__all__ = ["main"]

SPEC = "pipeline:stages=1,microbatches=4,schedule=gpipe,action_overhead_us=0"


def _round(tmp: Path, k: int) -> tuple:
    from daydream import opseq
    from daydream.analysis import replay
    from daydream.validate import THREADS, trace_in_turns
    from daydream.validation.pipeline import MICROBATCHES, MODEL_ARGS
    from daydream.whatif import predict

    extra = ("--threads", str(THREADS), "--dataset-batches", "16")
    full, micro = trace_in_turns([
        ("mlp", tmp / f"full{k}.json.gz", (*MODEL_ARGS, *extra), 1),
        ("pipeline", tmp / f"micro{k}.json.gz",
         (*MODEL_ARGS, *extra, "--schedule", "none", "--nproc", "1", "--microbatches", str(MICROBATCHES)), 1)],
        iterations=8)
    measured = replay(micro)[0].measured_ms
    seq = predict(full, [SPEC])[0].predicted_ms
    real = opseq.sequence_ratios
    opseq.sequence_ratios = lambda *a, **kw: None      # what batch-size falls back to: each op alone
    try:
        alone = predict(full, [SPEC])[0].predicted_ms
    finally:
        opseq.sequence_ratios = real
    return replay(full)[0].measured_ms, measured, seq, alone


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    errs = {"in sequence": [], "alone": []}
    with tempfile.TemporaryDirectory(prefix="daydream-rerun-context-") as tmp:
        for k in range(args.rounds):
            base, measured, seq, alone = _round(Path(tmp), k)
            errs["in sequence"].append(100 * (seq - measured) / measured)
            errs["alone"].append(100 * (alone - measured) / measured)
            print(f"round {k + 1}: batch 64 {base:.2f} ms, 4 x 16 measured {measured:.2f} ms; predicted in sequence "
                  f"{seq:.2f} ({errs['in sequence'][-1]:+.1f} %), each op alone {alone:.2f} "
                  f"({errs['alone'][-1]:+.1f} %)", flush=True)
    for name, e in errs.items():
        print(f"{name:12s}: median error {statistics.median(e):+.1f} %, median |error| "
              f"{statistics.median(map(abs, e)):.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
