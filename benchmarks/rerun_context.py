"""Op re-runs in sequence against each op alone: a micro-batched loop predicted from a full-batch trace.

Each round traces, in turns (:func:`daydream.validate.trace_in_turns`: iterations alternate, so
the machine's drift falls on both), the pipeline validation's MLP at batch 64 (``python -m
daydream.workloads.mlp``) and the same model training on 4 micro-batches of 16 in one process
(``python -m daydream.workloads.pipeline --schedule none --nproc 1``: gradients accumulated, no
pipelining runtime), then predicts the second from the first with
``pipeline:stages=1,microbatches=4,schedule=gpipe,action_overhead_us=0``, whose per-micro-batch
costs come from ``batch-size`` re-runs: in sequence (the default,
:func:`daydream.opseq.sequence_ratios`: M passes back to back, each layer's weights shared by its
ops), in sequence as before session 26 (one pass, every op with operands of its own), and with
every op timed alone in a loop.

Usage::

    python benchmarks/rerun_context.py --rounds 5 [--profile PROFILE.json]

Printed per round and as the median error of each: ``in sequence``, ``one pass`` (as before
session 26), ``alone``.
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
from pathlib import Path

__all__ = ["main"]

SPEC = "pipeline:stages=1,microbatches=4,schedule=gpipe,action_overhead_us=0"


def _round(tmp: Path, k: int, profile=None) -> tuple:
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
    seq = predict(full, [SPEC], profile_path=profile)[0].predicted_ms
    with _one_private_pass():
        one_pass = predict(full, [SPEC], profile_path=profile)[0].predicted_ms
    real = opseq.sequence_ratios
    opseq.sequence_ratios = lambda *a, **kw: None      # what batch-size falls back to: each op alone
    try:
        alone = predict(full, [SPEC], profile_path=profile)[0].predicted_ms
    finally:
        opseq.sequence_ratios = real
    return replay(full)[0].measured_ms, measured, seq, one_pass, alone


@contextlib.contextmanager
def _one_private_pass():
    """``batch-size`` re-runs as before session 26: one pass at the new batch, no shared weights."""
    from daydream.optimizations import batch_size as bs

    seq, apply = bs.iteration_sequence, bs.BatchSize.apply

    def one_pass(self, ctx):
        self.repeats = 1
        return apply(self, ctx)

    bs.iteration_sequence = lambda ctx, tasks, shared=False: seq(ctx, tasks)
    bs.BatchSize.apply = one_pass
    try:
        yield
    finally:
        bs.iteration_sequence, bs.BatchSize.apply = seq, apply


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--profile", help="device profile (default: the cached 1-thread CPU profile)")
    args = ap.parse_args(argv)
    errs = {"in sequence": [], "one pass": [], "alone": []}
    with tempfile.TemporaryDirectory(prefix="daydream-rerun-context-") as tmp:
        for k in range(args.rounds):
            base, measured, *preds = _round(Path(tmp), k, args.profile)
            for e, p in zip(errs.values(), preds):
                e.append(100 * (p - measured) / measured)
            print(f"round {k + 1}: batch 64 {base:.2f} ms, 4 x 16 measured {measured:.2f} ms; predicted "
                  + ", ".join(f"{name} {p:.2f} ({e[-1]:+.1f} %)" for (name, e), p in zip(errs.items(), preds)),
                  flush=True)
    for name, e in errs.items():
        print(f"{name:12s}: median error {statistics.median(e):+.1f} %, median |error| "
              f"{statistics.median(map(abs, e)):.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
