"""Sittings of the pipeline hand-over exchange in turns with real pipeline runs: does the
hand-over figure measured now follow the real runs from minute to minute?

Each round runs the validation's pipeline workload for real (2 gloo processes, the validation's
sizes: ``daydream.validation.pipeline.measure_pipeline``, one run of each) under GPipe and, with
``--csv``, a Tessel schedule CSV (a validation's ``tessel-v.csv``), then one sitting of the
calibration's GPipe-like exchange (``daydream.calibrate_handover.handover_sitting``, ``--steps``
steps), idle CPUs polling as the validation runs.  A round's hand-over figure
(``handover_latency_ns``, at ``--bandwidth``) pools the sittings before and after its runs, as a
validation round's prediction takes the traces before and after.  Prints every round, then the
correlation of each real run with the figure (``handover=now`` in ``pipeline`` and ``tessel``,
docs/validation-log.md, "Session 81").

    python benchmarks/handover_drift.py --rounds 16 --csv DIR/tessel-v.csv
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

__all__ = ["main", "correlation"]


def correlation(a, b) -> float:
    """Pearson's r of two equal-length series (nan where either is constant).

    >>> round(correlation([1, 2, 3], [2, 4, 7]), 3)
    0.993
    """
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.std() == 0 or b.std() == 0:
        return float("nan")
    return float(np.corrcoef(a, b)[0, 1])


def main(argv=None) -> None:
    from daydream.calibrate_handover import handover_latency_ns, handover_sitting
    from daydream.cpuidle import polling_idle
    from daydream.validation.pipeline import measure_pipeline

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=16)
    ap.add_argument("--steps", type=int, default=80, help="steps of each hand-over sitting (default 80)")
    ap.add_argument("--csv", default=None, help="also run this Tessel schedule (torch _load_csv format)")
    ap.add_argument("--bandwidth", type=float, default=4e9,
                    help="bytes/s taken off each hand-over for its bytes (a profile's gloo p2p fit; default 4e9)")
    args = ap.parse_args(argv)
    runs = {"gpipe": lambda: measure_pipeline("gpipe")}
    if args.csv:
        runs["csv"] = lambda: measure_pipeline("csv", ("--csv", args.csv))
    figure, real = [], {k: [] for k in runs}
    with polling_idle():
        before = handover_sitting(args.steps)
        for r in range(args.rounds):
            for k, fn in runs.items():
                real[k].append(fn())
            after = handover_sitting(args.steps)
            figure.append(handover_latency_ns(before.handovers_ns + after.handovers_ns, args.bandwidth) / 1e3)
            before = after
            print(f"round {r}: " + " ".join(f"{k} {v[-1]:.2f} ms" for k, v in real.items())
                  + f"  hand-over {figure[-1]:.0f} us  {time.strftime('%H:%M:%S')}", flush=True)
    print(f"hand-over figure {min(figure):.0f}-{max(figure):.0f} us, median {statistics.median(figure):.0f}")
    for k, v in real.items():
        print(f"{k}: median {statistics.median(v):.2f} ms, sd {100 * statistics.pstdev(v) / statistics.fmean(v):.1f} %,"
              f" r with the hand-over figure {correlation(v, figure):+.2f}")


if __name__ == "__main__":
    main()
