"""What a validation run would have read with fewer rounds: its rows from each side's first k rounds.

``daydream validate --repeat N`` writes each row's rounds (``measured_rounds_ms``,
``predicted_rounds_ms``) to its ``results.csv``.  For each ``k`` asked for, this recomputes
every row from the first ``k`` of ``N`` rounds of both sides, as the row itself is made: the
median for the pipeline, Tessel and Hydra rows (:func:`daydream.validate.median_row`), the mean
for the others; rows with ``2 N`` rounds (tensor-parallel, device) take their first ``2 k``.
It prints, per ``k``, the median and worst error, how many rows lie within 10 %, and every
row's signed error.  The first ``k`` rounds are the run the same command with ``--repeat k``
would have made (the calibration and the runtime-overhead probe aside), in the same minutes.

Usage::

    python benchmarks/rounds_subsample.py benchmarks/results/validate_parallel_2026-12-02e.csv --rounds 3 5
"""
from __future__ import annotations

import argparse
import csv
import statistics

from daydream.validate import SEQUENTIAL_ROUNDS

__all__ = ["main", "rows_at", "row_error", "results_rows", "round_times"]

#: Rows that are the median of their rounds (the others: the mean).
MEDIAN_ROWS = ("pipeline:", "tessel:", "hydra:")
#: Rows whose runs go one after the other, ``SEQUENTIAL_ROUNDS`` rounds to a round asked for.
SEQUENTIAL_ROWS = ("tensor-parallel:", "device:")


def round_times(text: str) -> list:
    """A results column of rounds (``measured_rounds_ms``, ``predicted_rounds_ms``) as floats.

    >>> round_times("12.5 13.0")
    [12.5, 13.0]
    """
    return [float(x) for x in text.split()]


def results_rows(path) -> list:
    """The rows of a ``daydream validate`` ``results.csv`` (its ``#`` header lines skipped), as dicts."""
    with open(path, newline="") as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def rows_at(path, k: int) -> list:
    """Signed errors (%) of the rows of the results at ``path`` from their first ``k`` rounds
    (a row may have more than the run's ``--repeat``: run 2026-12-02h added rounds while a
    row's measured rounds spread, a trial of session 48 since reverted)."""
    out = []
    for r in results_rows(path):
        measured, predicted = round_times(r["measured_rounds_ms"]), round_times(r["predicted_rounds_ms"])
        if not measured or len(predicted) != len(measured):
            raise SystemExit(f"{path}: row {r['optimization']!r} lacks its rounds")
        n = k * (SEQUENTIAL_ROUNDS if r["optimization"].startswith(SEQUENTIAL_ROWS) else 1)
        out.append(row_error(r["optimization"], predicted[:n], measured[:n]))
    return out


def row_error(optimization: str, predicted, measured) -> float:
    """Signed error (%) of a row from its rounds, as the row is made: the median of each side
    for the pipeline, Tessel and Hydra rows, the mean for the others.

    >>> round(row_error("hydra:models=2", [10.0, 12.0, 30.0], [10.0, 10.0, 10.0]), 6)
    20.0
    >>> round(row_error("hfta:models=2", [10.0, 12.0, 30.0], [10.0, 10.0, 10.0]), 6)
    73.333333
    """
    how = statistics.median if optimization.startswith(MEDIAN_ROWS) else statistics.fmean
    return 100.0 * (how(predicted) / how(measured) - 1.0)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", nargs="+", help="results.csv of `daydream validate`")
    p.add_argument("--rounds", type=int, nargs="+", default=[3, 5], help="first k rounds to keep")
    args = p.parse_args(argv)
    for path in args.results:
        for k in args.rounds:
            errs = rows_at(path, k)
            sizes = [abs(e) for e in errs]
            print(f"{path}: first {k} rounds: median {statistics.median(sizes):.1f} %, worst "
                  f"{max(sizes):.1f} %, {sum(e <= 10 for e in sizes)} of {len(errs)} within 10 %; "
                  + " ".join(f"{e:+.1f}" for e in errs))


if __name__ == "__main__":
    main()
