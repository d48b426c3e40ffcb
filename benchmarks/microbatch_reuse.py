"""Micro-batches pass over the same weights: one small pass alone against several back to back.

A chain of ``--layers`` ``addmm`` over ``--hidden`` x ``--hidden`` weights (the pipeline
validation's MLP blocks), at the full batch once and at batch / M: one pass alone and M passes
back to back, each timing after other work has gone through the caches (as the rest of a
training iteration does).  Prints, per micro-batch pass, its time over the full-batch pass: what
``pipeline`` / ``tessel`` scale each micro-batch by (``batch-size:repeats=M`` re-runs the M passes
back to back; one pass alone was the re-run before session 26).  Medians of ``--rounds``.

Usage::

    python benchmarks/microbatch_reuse.py --rounds 30
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

__all__ = ["main"]


def main(argv=None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--microbatches", type=int, default=4)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    h = args.hidden
    weights = [torch.randn(h, h) for _ in range(args.layers)]
    biases = [torch.randn(h) for _ in range(args.layers)]

    def passes(batch: int, count: int) -> float:
        xs = [torch.randn(batch, h) for _ in range(count)]
        t0 = time.perf_counter_ns()
        for x in xs:                    # GPipe's forward order: every layer for one micro-batch, then the next
            for w, b in zip(weights, biases):
                torch.addmm(b, x, w)
        return (time.perf_counter_ns() - t0) / 1e3

    def other_work():                   # the rest of an iteration, through the caches
        for _ in range(6):
            torch.randn(h, h) @ torch.randn(h, h // 4)

    m, small = args.microbatches, args.batch // args.microbatches
    got = {"full": [], "alone": [], "back to back": []}
    for _ in range(args.rounds):
        other_work()
        got["full"].append(passes(args.batch, 1))
        other_work()
        got["alone"].append(passes(small, 1))
        other_work()
        got["back to back"].append(passes(small, m) / m)
    full = statistics.median(got["full"])
    print(f"full batch {args.batch}: {full:.0f} us a pass")
    for name in ("alone", "back to back"):
        t = statistics.median(got[name])
        print(f"batch {small}, {name}: {t:.0f} us a pass, {t / full:.3f} of the full pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
