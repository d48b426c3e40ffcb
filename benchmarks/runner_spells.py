"""Do a runner's rows miss together?  Row errors over runs, correlated within and across runners.

A validation row's error moves from run to run.  If the rows of one runner (``tessel``'s chain
and V, ``hydra``'s four) move together and rows of different runners do not, what moves them
is something of the minutes that runner's rounds took: a slow spell of the host, or a figure the
runner measured once.  Then the row's rounds are not independent draws, and the median over
them passes over a spell less often than it would over rounds spread through the run.

For the ``daydream validate`` results given (rows in the same order in every file), this prints
per row:

* ``within`` / ``across``: the mean correlation over the runs of its signed error
  (:func:`rounds_subsample.rows_at`, first ``--rounds`` rounds) with the other rows of its
  runner, and with the rows of the other runners;
* ``sd`` and ``missed``: the standard deviation of its error over the runs and the share of runs
  it missed the 10 % goal;
* ``independent``: the same two figures for rows made of ``--rounds`` rounds drawn at random
  from all runs' rounds, each round's prediction kept with its own measurement
  (:func:`rounds_subsample.row_error`; the Hydra rows from the rounds' predictions, not the
  traces'): what the row would read were its rounds as independent as rounds minutes apart.

Usage::

    python benchmarks/runner_spells.py benchmarks/results/validate_parallel_2026-12-06*.csv
"""
from __future__ import annotations

import argparse
import random
import statistics

from rounds_subsample import (PAIRED_HELP, SEQUENTIAL_ROUNDS, SEQUENTIAL_ROWS, results_rows, round_times, row_error,
                              rows_at)
from rows_over_runs import row_names

__all__ = ["main", "correlation", "runner_of", "independent_rows"]


def correlation(a, b) -> float:
    """Pearson's r of two equally long series; nan where either is constant.

    >>> round(correlation([1, 2, 3, 4], [2, 4, 5, 9]), 3)
    0.965
    """
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    sab = sum((x - ma) * (y - mb) for x, y in zip(a, b))
    sa, sb = (sum((x - m) ** 2 for x in v) ** 0.5 for v, m in ((a, ma), (b, mb)))
    return sab / (sa * sb) if sa > 0 and sb > 0 else float("nan")


def runner_of(optimization: str) -> str:
    """The runner that makes a row: its optimization's name (``pipeline``, ``tessel``, ...).

    >>> runner_of("hydra:models=2,devices=2,schedule=shard-parallel")
    'hydra'
    """
    return optimization.split(":", 1)[0]


def _pooled_rounds(paths, i: int) -> list:
    """Row ``i``'s ``(predicted, measured)`` rounds of every run, in units of one round."""
    out = []
    for path in paths:
        r = results_rows(path)[i]
        per = SEQUENTIAL_ROUNDS if r["optimization"].startswith(SEQUENTIAL_ROWS) else 1
        p, m = round_times(r["predicted_rounds_ms"]), round_times(r["measured_rounds_ms"])
        out += [(p[j:j + per], m[j:j + per]) for j in range(0, min(len(p), len(m)) - per + 1, per)]
    return out


def independent_rows(paths, i: int, rounds: int, draws: int, seed: int = 0, paired: bool = False) -> list:
    """Signed errors (%) of ``draws`` rows of row ``i`` made from ``rounds`` rounds drawn at random
    (with replacement) from all runs' rounds of it (``paired``: as :func:`rounds_subsample.row_error`)."""
    pool, rng = _pooled_rounds(paths, i), random.Random(seed)
    opt = results_rows(paths[0])[i]["optimization"]
    out = []
    for _ in range(draws):
        picked = [rng.choice(pool) for _ in range(rounds)]
        out.append(row_error(opt, [x for p, _ in picked for x in p], [x for _, m in picked for x in m], paired))
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", nargs="+", help="results.csv files of `daydream validate`, same rows in each")
    p.add_argument("--rounds", type=int, default=5, help="first k rounds of each row (as rounds_subsample.py)")
    p.add_argument("--draws", type=int, default=5000, help="rows drawn for the independent figures")
    p.add_argument("--paired", action="store_true", help=PAIRED_HELP)
    args = p.parse_args(argv)
    if len(args.results) < 3:
        raise SystemExit("runner_spells: give at least three results files")
    names = row_names(args.results[0])
    opts = [r["optimization"] for r in results_rows(args.results[0])]
    runs = [rows_at(path, args.rounds, paired=args.paired) for path in args.results]
    for path, errs in zip(args.results, runs):
        if len(errs) != len(names):
            raise SystemExit(f"{path}: {len(errs)} rows, not the {len(names)} of {args.results[0]}")
    cols = [[run[i] for run in runs] for i in range(len(names))]
    print(f"{len(runs)} runs, {args.rounds} rounds a row; per row: mean r of its error with its runner's other rows "
          "/ the other runners' rows; sd and share missed over the runs; the same were its rounds independent")
    for i, name in enumerate(names):
        rs = {True: [], False: []}
        for j in range(len(names)):
            if j != i:
                rs[runner_of(opts[j]) == runner_of(opts[i])].append(correlation(cols[i], cols[j]))
        within, across = (statistics.fmean(v) if v else float("nan") for v in (rs[True], rs[False]))
        drawn = independent_rows(args.results, i, args.rounds, args.draws, paired=args.paired)
        missed = sum(abs(e) > 10.0 for e in cols[i]) / len(runs)
        print(f"{name[:56]:56s} within {within:+5.2f} across {across:+5.2f}  sd {statistics.stdev(cols[i]):4.1f} "
              f"missed {missed:4.2f}  independent: sd {statistics.stdev(drawn):4.1f} "
              f"missed {sum(abs(e) > 10.0 for e in drawn) / len(drawn):5.3f}")


if __name__ == "__main__":
    main()
