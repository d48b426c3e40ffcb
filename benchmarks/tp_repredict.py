"""Predict a ``daydream validate`` run's tensor-parallel row again, with the code and caches of now.

Reads ``DIR/results.csv`` (the row's spec and its measured rounds), predicts each round from its
own baseline trace (``DIR/traces/tp.base.rK.json.gz``) with the run's profile
(``DIR/device-cpu-1t.json``), and prints the rounds, the mean prediction, the mean measurement
and the signed error: what a model change does to a row already measured, without measuring it
again.  The DTensor overhead and in-line all-reduce figures come from the cache
(``~/.cache/daydream/tp-api-overhead-*.json``; measured first where there is none).

Usage::

    python benchmarks/tp_repredict.py DIR [DIR ...]
"""
from __future__ import annotations

import argparse
import csv
import statistics
from pathlib import Path

from daydream.whatif import predict

__all__ = ["main"]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("dirs", nargs="+", help="output directories of daydream validate")
    for d in map(Path, p.parse_args(argv).dirs):
        with open(d / "results.csv") as f:
            rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
        row = next((r for r in rows if r["optimization"].startswith("tensor-parallel")), None)
        if row is None:
            raise SystemExit(f"tp_repredict: {d / 'results.csv'}: no tensor-parallel row")
        measured = [float(x) for x in row["measured_rounds_ms"].split()]
        preds = [predict(str(d / "traces" / f"tp.base.r{k}.json.gz"), [row["optimization"]],
                         profile_path=str(d / "device-cpu-1t.json"))[0].predicted_ms for k in range(len(measured))]
        pm, mm = statistics.fmean(preds), statistics.fmean(measured)
        print(f"{d}: rounds {' '.join(f'{x:.1f}' for x in preds)}; predicted {pm:.2f} ms, measured {mm:.2f} ms, "
              f"error {100 * (pm - mm) / mm:+.1f} %")


if __name__ == "__main__":
    main()
