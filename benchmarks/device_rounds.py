"""The ``device`` rows of validation runs, round by round: which side of the error moves.

A ``device`` row (``daydream validate --opt device``) is the mean over its rounds of the
prediction from each round's 1-thread trace against the mean of the same round's real 2-thread
run.  Per round this prints the prediction over its 1-thread baseline (``pred/base``: what the
model says two threads do, its op re-runs measured right after the round) and the real 2-thread
run over the same baseline (``real/base``), then per row their means, standard deviations and
correlation over the rounds.  A model bias shows as means apart; the machine's noise as spread,
on either side; a prediction that follows the machine's state of the round as correlation.

Reads each validation output directory's ``results.csv`` and its ``traces/`` (the 1-thread
baselines are replayed here; nothing is measured).

Usage::

    python benchmarks/device_rounds.py DIR [DIR ...]      # DIR: a `daydream validate -o DIR`
"""
from __future__ import annotations

import argparse
import re
import statistics
from pathlib import Path

from rounds_subsample import results_rows, round_times

__all__ = ["main", "round_ratios"]


def _round_of(path: Path) -> int:
    return int(re.search(r"\.r(\d+)\.json", path.name).group(1))


def round_ratios(out_dir, workload: str) -> list:
    """``[(pred/base, real/base), ...]`` per round of the ``device`` row of ``workload`` in the
    validation output ``out_dir`` (empty where it has no such row)."""
    from daydream.analysis import trace_and_graph
    from daydream.sim import simulate

    out_dir = Path(out_dir)
    rows = [r for r in results_rows(out_dir / "results.csv")
            if r["optimization"].startswith("device:") and r["workload"].split()[0] == workload]
    if not rows:
        return []
    pred, real = round_times(rows[0]["predicted_rounds_ms"]), round_times(rows[0]["measured_rounds_ms"])
    bases = sorted((out_dir / "traces").glob(f"{workload}.dev1t.r*.json.gz"), key=_round_of)
    if len(bases) != len(pred):
        raise SystemExit(f"{out_dir}: {len(bases)} 1-thread traces of {workload} for {len(pred)} rounds")
    base = [simulate(trace_and_graph(str(p))[1]).mean_iteration_ns()[1] / 1e6 for p in bases]
    return [(p / b, r / b) for p, r, b in zip(pred, real, base)]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+", help="output directories of `daydream validate` with device rows")
    ap.add_argument("--workloads", default="mlp,transformer", help="device workloads, comma-separated")
    args = ap.parse_args(argv)
    for d in args.dirs:
        for w in args.workloads.split(","):
            got = round_ratios(d, w)
            if len(got) < 2:
                continue
            p, r = zip(*got)
            print(f"{d} {w}: pred/base mean {statistics.fmean(p):.3f} sd {statistics.stdev(p):.3f}; "
                  f"real/base mean {statistics.fmean(r):.3f} sd {statistics.stdev(r):.3f}; "
                  f"correlation {statistics.correlation(p, r):+.2f}")
            print("  rounds (pred/real over base): " + " ".join(f"{a:.2f}/{b:.2f}" for a, b in got))


if __name__ == "__main__":
    main()
