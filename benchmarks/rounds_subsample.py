"""What a validation run would have read with fewer rounds: its rows from each side's first k rounds.

``daydream validate --repeat N`` writes each row's rounds (``measured_rounds_ms``,
``predicted_rounds_ms``) to its ``results.csv``.  For each ``k`` asked for, this recomputes
every row from the first ``k`` of ``N`` rounds of both sides, as the row itself is made: the
median for the pipeline, Tessel and Hydra rows (:func:`daydream.validate.median_row`), the mean
for the others; rows with ``2 N`` rounds (tensor-parallel, device) take their first ``2 k``, and
rows made from their traces' own predictions (``predicted_traces_ms``: the Hydra rows since
session 80) the traces of those rounds.
It prints, per ``k``, the median and worst error, how many rows lie within 10 %, and every
row's signed error.  The first ``k`` rounds are the run the same command with ``--repeat k``
would have made (the calibration and the runtime-overhead probe aside), in the same minutes.
With ``--skip s`` the rows come from rounds ``s + 1`` to ``s + k`` instead: a run of
``--repeat 15`` read as three of ``--repeat 5`` (``--rounds 5 --skip 0 5 10``), later ones
sharing the first's calibration.

Usage::

    python benchmarks/rounds_subsample.py benchmarks/results/validate_parallel_2026-12-02e.csv --rounds 3 5
    python benchmarks/rounds_subsample.py FILE --rounds 5 --skip 0 5 10
"""
from __future__ import annotations

import argparse
import csv
import statistics

from daydream.validate import SEQUENTIAL_ROUNDS, median_round

__all__ = ["main", "rows_at", "row_error", "results_rows", "round_times", "trace_side", "PAIRED_HELP"]

#: ``--paired``'s help, shared by the benchmarks that read rows from their rounds.
PAIRED_HELP = ("the pipeline, Tessel and Hydra rows as made since session 84 (runs 2026-12-06zf on): the "
               "median over the rounds of each prediction over its round's measurement, not each side's median")
#: Rows that are the median of their rounds (the others: the mean): of each side's until session
#: 84, the median round's error since (``--paired``).
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


def rows_at(path, k: int, skip: int = 0, paired: bool = False) -> list:
    """Signed errors (%) of the rows of the results at ``path`` from their first ``k`` rounds
    after the first ``skip`` (a row may have more than the run's ``--repeat``: run 2026-12-02h
    added rounds while a row's measured rounds spread, a trial of session 48 since reverted).
    A row with fewer than ``skip + k`` rounds is refused.  ``paired``: as :func:`row_error`."""
    out = []
    for r in results_rows(path):
        measured, predicted = round_times(r["measured_rounds_ms"]), round_times(r["predicted_rounds_ms"])
        if not measured or len(predicted) != len(measured):
            raise SystemExit(f"{path}: row {r['optimization']!r} lacks its rounds")
        per = SEQUENTIAL_ROUNDS if r["optimization"].startswith(SEQUENTIAL_ROWS) else 1
        first, last = skip * per, (skip + k) * per
        if last > len(measured):
            raise SystemExit(f"{path}: row {r['optimization']!r} has {len(measured) // per} rounds, "
                             f"not {skip + k}")
        traces, t = trace_side(path, r, measured)
        side = traces[first * t:last * t] if traces else predicted[first:last]
        out.append(row_error(r["optimization"], side, measured[first:last], paired))
    return out


def trace_side(path, row, measured) -> tuple:
    """``(predictions, per round)`` of a row made from its traces' own predictions
    (``predicted_traces_ms``, the Hydra rows since session 80: the median over them), in the
    order traced, so many to a measured round; ``((), 0)`` for a row made from its rounds.

    >>> trace_side("f", {"predicted_traces_ms": "1 2 3 4"}, [10.0, 11.0])
    ([1.0, 2.0, 3.0, 4.0], 2)
    >>> trace_side("f", {"predicted_rounds_ms": "1 2"}, [10.0, 11.0])
    ((), 0)
    """
    traces = round_times(row.get("predicted_traces_ms") or "")
    if not traces:
        return (), 0
    if len(traces) % len(measured):
        raise SystemExit(f"{path}: row {row['optimization']!r} has {len(traces)} trace predictions "
                         f"for {len(measured)} rounds")
    return traces, len(traces) // len(measured)


def row_error(optimization: str, predicted, measured, paired: bool = False) -> float:
    """Signed error (%) of a row from its rounds, as the row is made: the median of each side
    for the pipeline, Tessel and Hydra rows, the mean for the others; with ``paired`` (those
    rows since session 84, :func:`daydream.validate.median_round`) the median over the rounds
    of each prediction over its round's measurement, ``len(predicted) / len(measured)``
    predictions to a round, in order (a row made from its traces' own predictions: two).

    >>> round(row_error("hydra:models=2", [10.0, 12.0, 30.0], [10.0, 10.0, 10.0]), 6)
    20.0
    >>> round(row_error("hfta:models=2", [10.0, 12.0, 30.0], [10.0, 10.0, 10.0]), 6)
    73.333333
    >>> round(row_error("tessel:stages=2", [12.0, 9.0, 30.0], [10.0, 10.0, 20.0], paired=True), 6)
    20.0
    """
    if paired and optimization.startswith(MEDIAN_ROWS):
        made, measured_ms = median_round(predicted, measured)
        return 100.0 * (made / measured_ms - 1.0)
    how = statistics.median if optimization.startswith(MEDIAN_ROWS) else statistics.fmean
    return 100.0 * (how(predicted) / how(measured) - 1.0)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", nargs="+", help="results.csv of `daydream validate`")
    p.add_argument("--rounds", type=int, nargs="+", default=[3, 5], help="first k rounds to keep")
    p.add_argument("--skip", type=int, nargs="+", default=[0],
                   help="rounds to pass over before them (one line per value)")
    p.add_argument("--paired", action="store_true", help=PAIRED_HELP)
    args = p.parse_args(argv)
    for path in args.results:
        for k, skip in ((k, s) for k in args.rounds for s in args.skip):
            errs = rows_at(path, k, skip, args.paired)
            sizes = [abs(e) for e in errs]
            which = f"rounds {skip + 1}-{skip + k}" if skip else f"first {k} rounds"
            print(f"{path}: {which}: median {statistics.median(sizes):.1f} %, worst "
                  f"{max(sizes):.1f} %, {sum(e <= 10 for e in sizes)} of {len(errs)} within 10 %; "
                  + " ".join(f"{e:+.1f}" for e in errs))


if __name__ == "__main__":
    main()
