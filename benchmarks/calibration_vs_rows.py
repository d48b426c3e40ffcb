"""A calibrated figure against the validation rows of many runs: does a run's calibration follow
its real runs, or only move its predictions?

For each validation directory (``daydream validate -o DIR``: its ``device-cpu-1t.json`` and
``results.csv``) takes one scalar of the profile (``--field``, a backend's figure such as
``p2p_handover``, or ``p2p_post`` whose send side is taken) and, per row of :data:`ROWS` (the
2-process pipeline and Tessel rows), the row's signed
error and its real time over its baseline.  Prints the table, then per row the correlation over
the runs of the figure with the error and with real / baseline.  A figure that follows the
machine correlates with real / baseline; one that only carries its calibration's noise into the
predictions correlates with the error alone (docs/validation-log.md, "Session 81").

    python benchmarks/calibration_vs_rows.py /tmp/s7[5-9]/v? /tmp/s80/v[bc] --field p2p_handover
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from handover_drift import correlation  # noqa: E402
from rounds_subsample import results_rows  # noqa: E402

__all__ = ["main", "figure_of", "ROWS"]

#: Default rows: label -> a test on the optimization spec.
ROWS = {"gpipe": lambda o: o.startswith("pipeline:stages=2") and "schedule=gpipe" in o,
        "1f1b": lambda o: o.startswith("pipeline:stages=2") and "schedule=1f1b" in o,
        "tessel chain": lambda o: o.startswith("tessel:") and "placement=" not in o,
        "tessel V": lambda o: o.startswith("tessel:") and "placement=0:1:1:0" in o}


def figure_of(profile: dict, field: str, backend: str = "gloo") -> float:
    """The scalar of ``field`` in a profile document: a number, a backend's number, or the first
    component of a backend's pair (``p2p_post``'s send).

    >>> figure_of({"p2p_handover": {"gloo": 4e5}, "p2p_post": {"gloo": [5e4, 3e4]}, "corun": 0.9}, "p2p_post")
    50000.0
    >>> figure_of({"corun": 0.9}, "corun")
    0.9
    """
    v = profile[field]
    if isinstance(v, dict):
        v = v[backend]
    if isinstance(v, (list, tuple)):
        v = v[0]
    return float(v)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dirs", nargs="+", help="validation output directories")
    ap.add_argument("--field", default="p2p_handover", help="the profile's figure (default p2p_handover)")
    args = ap.parse_args(argv)
    figures, errs, ratios = [], {k: [] for k in ROWS}, {k: [] for k in ROWS}
    for d in map(Path, args.dirs):
        try:
            fig = figure_of(json.loads((d / "device-cpu-1t.json").read_text()), args.field)
            rows = {r["optimization"]: r for r in results_rows(d / "results.csv")}
        except (OSError, KeyError, ValueError) as exc:
            print(f"{d}: passed over ({exc})")
            continue
        got = {k: next((r for o, r in rows.items() if test(o)), None) for k, test in ROWS.items()}
        if any(r is None for r in got.values()):
            print(f"{d}: passed over (not every row)")
            continue
        figures.append(fig)
        cells = []
        for k, r in got.items():
            p, m, b = float(r["predicted_ms"]), float(r["measured_ms"]), float(r["baseline_ms"])
            errs[k].append(100 * (p / m - 1))
            ratios[k].append(m / b)
            cells.append(f"{k} {errs[k][-1]:+5.1f} % ({ratios[k][-1]:.3f})")
        print(f"{d}: {args.field} {fig:.4g}  " + "  ".join(cells))
    if len(figures) < 3:
        raise SystemExit("calibration_vs_rows: fewer than three usable directories")
    print(f"{len(figures)} runs; correlation over them of {args.field} with each row's error / real over baseline:")
    for k in ROWS:
        print(f"  {k}: error r {correlation(figures, errs[k]):+.2f}, "
              f"real / baseline r {correlation(figures, ratios[k]):+.2f}")


if __name__ == "__main__":
    main()
