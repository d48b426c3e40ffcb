"""How well a validation's Hydra rounds pair: per row, the correlation over rounds of the prediction
with the real runs, and of one K's real runs with the other's.

A Hydra row's rounds (``predicted_rounds_ms``, ``measured_rounds_ms``) are each centred on their
run's mean (in %), so that what correlates is the movement from round to round within a run, not
one run's level against another's; the rounds of all ``FILES`` are then pooled.  A prediction that
follows the machine's speed through a run correlates with its real rounds; one from traces taken
too far from its runs does not (the reason ``daydream.validation.hydra`` traces before each K's
runs since session 76).

Usage::

    python benchmarks/round_correlation.py benchmarks/results/validate_parallel_2026-12-0[45]*.csv
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from hydra_sp_mp import hydra_rows  # noqa: E402

__all__ = ["centred", "pooled_rounds", "main"]


def centred(values) -> list:
    """Each value's departure from the values' mean, in %.

    >>> [round(v, 6) for v in centred([9.0, 11.0])]
    [-10.0, 10.0]
    """
    m = statistics.fmean(values)
    return [100.0 * (v / m - 1.0) for v in values]


def pooled_rounds(paths) -> dict:
    """``{(K, schedule, "pred" | "real"): [centred round values, pooled over the files]}``; a file
    whose Hydra rows lack per-round figures or differ in their number of rounds is left out."""
    out: dict = {}
    for path in paths:
        rows = [r for r in hydra_rows(path) if r[2] and len(r[3]) == len(r[2])]
        if len({len(r[2]) for r in rows}) != 1 or len(rows[0][2]) < 2:
            continue
        for k, sched, real, pred, _ in rows:
            out.setdefault((k, sched, "real"), []).extend(centred(real))
            out.setdefault((k, sched, "pred"), []).extend(centred(pred))
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", nargs="+", help="results.csv files of `daydream validate` with Hydra rows")
    paths = ap.parse_args(argv).results
    got = pooled_rounds(paths)
    keys = sorted({(k, s) for k, s, _ in got})
    if not keys:
        raise SystemExit("round_correlation: no Hydra rows with per-round figures in " + " ".join(paths))
    print(f"{len(paths)} file(s), {len(got[(*keys[0], 'real')])} rounds a row; correlation over rounds (each run's "
          "rounds centred on its mean)")
    for k, s in keys:
        print(f"K={k} {s}: prediction with real r = {np.corrcoef(got[(k, s, 'pred')], got[(k, s, 'real')])[0, 1]:+.2f}")
    ks = sorted({k for k, _ in keys})
    for s in sorted({s for _, s in keys}):
        for a, b in zip(ks, ks[1:]):
            print(f"{s}: real K={a} with real K={b} r = {np.corrcoef(got[(a, s, 'real')], got[(b, s, 'real')])[0, 1]:+.2f}")


if __name__ == "__main__":
    main()
