"""What more rounds would give: each row recomputed from the rounds of consecutive runs pooled.

A row of ``daydream validate --repeat N`` compares the median (pipeline, Tessel, Hydra) or the
mean (the others) of its predicted rounds with that of its measured rounds
(:func:`rounds_subsample.row_error`).  If a row's misses came from too few rounds, the same row
from the rounds of two or three runs of the same command, pooled, would miss less often; if
they come from a lean of the model, or from a state of the machine that outlasts a run, pooling
keeps them.  For each group size asked for, this pools the files given (in the order given,
consecutive groups, a short last group dropped) and prints how many pooled runs have every row
within 10 %, the misses per pooled run, and per row the mean and standard deviation of its
signed error over the pooled runs and its misses.

Usage::

    python benchmarks/pool_runs.py benchmarks/results/validate_parallel_2026-12-03?.csv --groups 1 2 3
"""
from __future__ import annotations

import argparse
import statistics

from rounds_subsample import results_rows, round_times, row_error

__all__ = ["main", "pooled_errors"]


def pooled_errors(paths) -> list:
    """Signed errors (%) of the rows of the results at ``paths`` (one command's runs, rows in the
    same order), each from the rounds of all of them together."""
    tables = [results_rows(p) for p in paths]
    if len({len(t) for t in tables}) != 1:
        raise SystemExit(f"{' '.join(map(str, paths))}: the runs have different rows")
    out = []
    for parts in zip(*tables):
        measured = [x for r in parts for x in round_times(r["measured_rounds_ms"])]
        # rows made from their traces' own predictions (Hydra since session 80), where all runs have them
        column = "predicted_traces_ms" if all(r.get("predicted_traces_ms") for r in parts) else "predicted_rounds_ms"
        predicted = [x for r in parts for x in round_times(r[column])]
        out.append(row_error(parts[0]["optimization"], predicted, measured))
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+", help="results.csv files of one command's runs, in the order they ran")
    ap.add_argument("--groups", type=int, nargs="+", default=[1, 2, 3], help="runs pooled into one")
    ap.add_argument("--tolerance", type=float, default=10.0, help="a row misses beyond this error (%%)")
    a = ap.parse_args(argv)
    names = [r["optimization"].split(",")[0][:34] for r in results_rows(a.files[0])]
    for g in a.groups:
        runs = [pooled_errors(a.files[i:i + g]) for i in range(0, len(a.files) - g + 1, g)]
        if not runs:
            continue
        misses = [[abs(e) > a.tolerance for e in run] for run in runs]
        print(f"{g} run(s) pooled: {len(runs)} pooled runs, {sum(not any(m) for m in misses)} with every row "
              f"within {a.tolerance:g} %, {sum(map(sum, misses)) / len(runs):.2f} misses a run")
        for j, name in enumerate(names):
            col = [run[j] for run in runs]
            sd = statistics.stdev(col) if len(col) > 1 else 0.0
            print(f"  {j:2d} {name:34s} mean {statistics.fmean(col):+5.1f} % sd {sd:4.1f} "
                  f"missed {sum(m[j] for m in misses)} of {len(runs)}")


if __name__ == "__main__":
    main()
