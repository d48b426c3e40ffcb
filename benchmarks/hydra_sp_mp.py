"""The Hydra rows of validation results: shard-parallel over model-parallel, real and predicted.

A validation's shard-parallel and model-parallel rows of one K are predicted from the same
baseline traces and measured in alternating real runs of one process pair, so their ratio, round
by round, has neither the baseline's noise nor most of the machine's drift in it: where the
predicted ratio misses the real one, the shard-parallel model (co-run, landings, the order in
which devices take shards, the split of work between shards and phases) is what misses.

Prints per file and K the median over rounds of each ratio and the predicted one's error.

Usage::

    python benchmarks/hydra_sp_mp.py benchmarks/results/validate_parallel_2026-12-02*.csv
"""
from __future__ import annotations

import csv
import statistics
import sys

__all__ = ["main", "ratios", "hydra_rows"]


def hydra_rows(path) -> list:
    """``[(K, schedule, real ms per round, predicted ms per round, the row)]`` of a results CSV's
    Hydra rows (the row: the CSV's fields as strings)."""
    out = []
    with open(path, newline="") as f:
        for r in csv.DictReader(line for line in f if not line.startswith("#")):
            spec = r["optimization"]
            if spec.startswith("hydra:"):
                out.append((int(spec.split("models=")[1].split(",")[0]), spec.split("schedule=")[1].split(",")[0],
                            [float(x) for x in (r.get("measured_rounds_ms") or "").split()],
                            [float(x) for x in (r.get("predicted_rounds_ms") or "").split()], r))
    return out


def ratios(path) -> dict:
    """``{K: (real ratio, predicted ratio)}``: medians over the rounds of a results CSV (rows
    without per-round figures, from files older than those columns, left out)."""
    rows = {(k, sched == "shard-parallel"): (real, pred) for k, sched, real, pred, _ in hydra_rows(path)
            if real and pred}
    out = {}
    for k in sorted({k for k, _ in rows}):
        if (k, True) in rows and (k, False) in rows:
            (m_sp, p_sp), (m_mp, p_mp) = rows[(k, True)], rows[(k, False)]
            out[k] = (statistics.median(a / b for a, b in zip(m_sp, m_mp)),
                      statistics.median(a / b for a, b in zip(p_sp, p_mp)))
    return out


def main(argv=None) -> None:
    for path in (sys.argv[1:] if argv is None else argv):
        cells = [f"K={k} real {r:.3f} predicted {p:.3f} ({(p / r - 1) * 100:+.1f} %)" for k, (r, p) in ratios(path).items()]
        print(f"{path}: " + (" | ".join(cells) or "no Hydra rows with per-round figures"))


if __name__ == "__main__":
    main()
