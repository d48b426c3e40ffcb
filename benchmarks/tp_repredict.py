"""Predict a ``daydream validate`` run's tensor-parallel row again, with the code and caches of now.

Reads ``DIR/results.csv`` (the row's spec and its measured rounds), predicts each round from its
own baseline trace (``DIR/traces/tp.base.rK.json.gz``) with the run's profile
(``DIR/device-cpu-1t.json``), and prints the rounds, the mean prediction, the mean measurement
and the signed error: what a model change does to a row already measured, without measuring it
again.  With ``--spec`` (repeat; options set on the row's spec, ``""`` for the row's own) each
round is predicted with every spec in turns, the co-run rates measured afresh for each
(``optimizations._corun.forget_measured``), so the machine's drift meets them alike.  The
DTensor overhead and in-line all-reduce figures come from the cache
(``~/.cache/daydream/tp-api-overhead-*.json``; measured first where there is none).

Usage::

    python benchmarks/tp_repredict.py DIR [DIR ...]
    python benchmarks/tp_repredict.py DIR --spec corun=compute --spec ""
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
    p.add_argument("--spec", action="append", default=None, help="options to compare (repeat; '' = the row's)")
    args = p.parse_args(argv)
    from hydra_specs import with_options

    from daydream.optimizations._corun import forget_measured

    specs = args.spec if args.spec is not None else [""]
    for d in map(Path, args.dirs):
        with open(d / "results.csv") as f:
            rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
        row = next((r for r in rows if r["optimization"].startswith("tensor-parallel")), None)
        if row is None:
            raise SystemExit(f"tp_repredict: {d / 'results.csv'}: no tensor-parallel row")
        measured = [float(x) for x in row["measured_rounds_ms"].split()]
        preds = {s: [] for s in specs}
        for k in range(len(measured)):
            for s in specs:
                forget_measured()
                preds[s].append(predict(str(d / "traces" / f"tp.base.r{k}.json.gz"),
                                        [with_options(row["optimization"], s)],
                                        profile_path=str(d / "device-cpu-1t.json"))[0].predicted_ms)
        mm = statistics.fmean(measured)
        for s, got in preds.items():
            pm = statistics.fmean(got)
            print(f"{d} [{s or 'the row'}]: rounds {' '.join(f'{x:.1f}' for x in got)}; predicted {pm:.2f} ms, "
                  f"measured {mm:.2f} ms, error {100 * (pm - mm) / mm:+.1f} %")


if __name__ == "__main__":
    main()
