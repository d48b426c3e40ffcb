"""Each validation row over many runs: its mean signed error, spread and misses (bias or noise?).

A row that misses the 10 % goal in some runs may lean one way (its mean error far from 0 against
its spread: a model bias) or scatter about 0 (the machine's noise between a prediction and its
real rounds).  For the ``daydream validate`` results given (rows in the same order in every
file, as the figures' command writes them), this prints per row the mean and standard deviation
of its signed error over the runs (:func:`rounds_subsample.rows_at` with ``--rounds``), how many
runs it missed, and ``t``: the mean over its standard error (far beyond 2: a lean the noise does
not explain); and the spread of its rounds within a run (standard deviation over mean of the
real rounds and of the predicted ones, averaged over the runs): how noisy one round is.

Usage::

    python benchmarks/rows_over_runs.py benchmarks/results/validate_parallel_2026-12-03?.csv
"""
from __future__ import annotations

import argparse
import math
import statistics

from rounds_subsample import PAIRED_HELP, results_rows, rows_at

__all__ = ["main", "row_names", "summary", "rounds_spread_pct"]


def _label(spec: str) -> str:
    """An optimization spec cut to its first option, its ``schedule`` and its ``placement``."""
    parts = spec.split(",")
    return ",".join([parts[0]] + [x for x in parts[1:] if x.startswith(("schedule=", "placement="))])


def row_names(path) -> list:
    """``workload / optimization`` (as :func:`_label` cuts it) of each row of a results file, in order."""
    return [f"{r['workload']} / {_label(r['optimization'])}" for r in results_rows(path)]


def summary(errors) -> tuple:
    """``(mean, sd, misses, t)`` of one row's signed errors (%) over runs.

    >>> summary([-12.0, -8.0, -10.0, -14.0])
    (-11.0, 2.581988897471611, 2, -8.52...)
    """
    mean = statistics.fmean(errors)
    sd = statistics.stdev(errors) if len(errors) > 1 else float("nan")
    t = mean / (sd / math.sqrt(len(errors))) if len(errors) > 1 and sd > 0 else float("nan")
    return mean, sd, sum(abs(e) > 10.0 for e in errors), t


def rounds_spread_pct(path) -> list:
    """Per row of a results file: ``(real, predicted)`` spread of its rounds (sd over mean, %; nan
    where fewer than two rounds are recorded)."""
    def spread(text: str) -> float:
        v = [float(x) for x in (text or "").split()]
        return 100.0 * statistics.stdev(v) / statistics.fmean(v) if len(v) > 1 else float("nan")

    return [(spread(r["measured_rounds_ms"]), spread(r.get("predicted_rounds_ms", ""))) for r in results_rows(path)]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", nargs="+", help="results.csv files of `daydream validate`, same rows in each")
    p.add_argument("--rounds", type=int, default=5, help="first k rounds of each row (as rounds_subsample.py)")
    p.add_argument("--paired", action="store_true", help=PAIRED_HELP)
    args = p.parse_args(argv)
    names = row_names(args.results[0])
    runs = [rows_at(path, args.rounds, paired=args.paired) for path in args.results]
    for path, errs in zip(args.results, runs):
        if len(errs) != len(names):
            raise SystemExit(f"{path}: {len(errs)} rows, not the {len(names)} of {args.results[0]}")
    spreads = [rounds_spread_pct(path) for path in args.results]
    print(f"{len(runs)} runs; per row: mean signed error, its standard deviation over the runs, runs missed "
          "(|error| > 10 %), t = mean / standard error; the rounds' spread in a run, real / predicted (mean sd %)")
    for i, name in enumerate(names):
        mean, sd, misses, t = summary([r[i] for r in runs])
        real, pred = (statistics.fmean(s[i][j] for s in spreads) for j in (0, 1))
        print(f"{name[:60]:60s} {mean:+6.1f} % sd {sd:5.1f}  missed {misses:2d} of {len(runs)}  t {t:+6.1f}  "
              f"rounds {real:4.1f} / {pred:4.1f} %")


if __name__ == "__main__":
    main()
