"""How much of a real 2-process pipeline run's speed is its processes' own?  Runs in a row.

Runs the pipeline validation's real 2-process job (``daydream.validation.pipeline``: torch's
pipelining runtime over gloo, the validation MLP, 4 micro-batches, a core per rank) ``--runs``
times one after the other, each in fresh processes, ``--steps`` measured steps after the usual
warm-up, and prints each run's blocks of ``--block`` steps (their means) and:

* how the blocks of one run correlate with each other (high: a run keeps its speed, so more
  steps in one run average little of it out);
* the spread (sd over mean) of single runs' first block, as ``daydream validate`` measured a
  round until session 63, and of the whole runs;
* the spread of the mean of ``--group`` consecutive runs' first blocks, as a round now measures
  (:data:`daydream.validate.REAL_PROCESSES`), and of their median.

Usage::

    python benchmarks/real_processes.py --runs 18 --schedule 1f1b --steps 30
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

__all__ = ["main", "spread_pct", "grouped"]


def spread_pct(values) -> float:
    """Standard deviation over mean, in %.

    >>> round(spread_pct([9.0, 10.0, 11.0]), 1)
    10.0
    """
    return 100.0 * statistics.stdev(values) / statistics.fmean(values)


def grouped(values, size: int, how=statistics.fmean) -> list:
    """``how`` of each run of ``size`` consecutive values (a short tail dropped).

    >>> grouped([1.0, 2.0, 3.0, 10.0, 20.0, 30.0, 5.0], 3)
    [2.0, 20.0]
    """
    return [how(values[i:i + size]) for i in range(0, len(values) - size + 1, size)]


def main(argv=None) -> None:
    from daydream.validation.pipeline import WARMUP_STEPS, _run

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=18)
    p.add_argument("--schedule", default="1f1b", choices=("gpipe", "1f1b"))
    p.add_argument("--steps", type=int, default=30, help="measured steps a run (after the warm-up)")
    p.add_argument("--block", type=int, default=10, help="steps a block (validate measures one block)")
    p.add_argument("--group", type=int, default=3, help="consecutive runs a round would average")
    args = p.parse_args(argv)
    blocks = []
    for _ in range(args.runs):
        steps = _run(args.schedule, (), WARMUP_STEPS + args.steps, WARMUP_STEPS)["step_ms"][WARMUP_STEPS:]
        blocks.append([statistics.fmean(steps[i:i + args.block])
                       for i in range(0, len(steps) - args.block + 1, args.block)])
        print(time.strftime("%T"), " ".join(f"{b:.1f}" for b in blocks[-1]), f"| {statistics.fmean(steps):.1f} ms",
              flush=True)
    first = [b[0] for b in blocks]
    whole = [statistics.fmean(b) for b in blocks]
    if len(blocks[0]) > 1:
        corr = np.corrcoef(np.array(blocks).T)
        pairs = [corr[i, j] for i in range(len(corr)) for j in range(i + 1, len(corr))]
        print(f"blocks of one run correlate {min(pairs):.2f} to {max(pairs):.2f}")
    print(f"spread of single runs: first {args.block} steps {spread_pct(first):.1f} %, all {args.steps} "
          f"{spread_pct(whole):.1f} %")
    means, medians = grouped(first, args.group), grouped(first, args.group, statistics.median)
    if len(means) > 1:
        print(f"spread over {len(means)} groups of {args.group} consecutive runs: mean {spread_pct(means):.1f} %, "
              f"median {spread_pct(medians):.1f} %")


if __name__ == "__main__":
    main()
