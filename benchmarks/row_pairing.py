"""How well each validation row's prediction follows its real rounds, over many runs.

A row's error is the ratio of two medians over its rounds (prediction and real runs).  Where a
round's prediction moves with that round's real runs (the machine's speed of the minute reaching
both), the two medians move together; where it does not, the round-to-round noise of each side
adds up in the row.  Per row (``workload / optimization`` as ``rows_over_runs.py`` names it), the
rounds of every file are centred on their run's mean (:func:`round_correlation.centred`, so that
one run's level against another's does not count) and pooled; printed: the rounds, the
correlation of prediction with real, the spread (standard deviation, % of the run's mean) of
each, and of their difference, which is what a row's median of ``--repeat`` rounds averages down.

Usage::

    python benchmarks/row_pairing.py benchmarks/results/validate_parallel_2026-12-0[56]*.csv
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from round_correlation import centred  # noqa: E402
from rounds_subsample import results_rows, round_times  # noqa: E402
from rows_over_runs import row_names  # noqa: E402

__all__ = ["pooled_rows", "main"]


def pooled_rows(paths) -> dict:
    """``{row name: (centred predicted rounds, centred real rounds)}`` pooled over ``paths``, in
    order of first appearance; a row without as many predicted rounds as real ones (at least two)
    is left out of its file."""
    out: dict = {}
    for path in paths:
        for name, row in zip(row_names(path), results_rows(path)):
            real, pred = round_times(row["measured_rounds_ms"]), round_times(row.get("predicted_rounds_ms", ""))
            if len(real) < 2 or len(pred) != len(real):
                continue
            p, r = out.setdefault(name, ([], []))
            p.extend(centred(pred))
            r.extend(centred(real))
    return out


def main(argv=None) -> None:
    paths = sys.argv[1:] if argv is None else argv
    got = pooled_rows(paths)
    if not got:
        raise SystemExit("row_pairing: no rows with per-round figures in " + " ".join(paths))
    print(f"{len(paths)} file(s); per row over its rounds (each centred on its run's mean): n, correlation of "
          "prediction with real, spread (sd, %) of the prediction, the real runs and their difference")
    width = max(len(n) for n in got)
    for name, (p, r) in got.items():
        p, r = np.asarray(p), np.asarray(r)
        corr = np.corrcoef(p, r)[0, 1] if p.std() > 0 and r.std() > 0 else float("nan")
        print(f"{name:{width}s}  n {len(p):4d}  r {corr:+.2f}  sd predicted {p.std():4.1f}  real {r.std():4.1f}  "
              f"difference {(r - p).std():4.1f}")


if __name__ == "__main__":
    main()
