"""The Hydra rows' rounds sorted by where the host had placed the two CPUs.

On this project's VM the host moves the two virtual CPUs between a near placement (a cache-line
round trip of 50-130 ns: one shared last-level cache) and a far one (300-550 ns) every few seconds
(:mod:`daydream.corelink`). ``daydream validate`` probes the placement before and after every
measured run and writes the probes, in the order taken, with each row (``core_to_core_ns``). The
Hydra validation (:mod:`daydream.validation.hydra`) takes them in a fixed order: per round, the
baseline trace (two probes), then for each K of :data:`~daydream.validation.hydra.MODELS`
:data:`~daydream.validate.REAL_PROCESSES` real runs (two probes each), and after the last round one
more trace. So each round's error (``predicted_rounds_ms`` over ``measured_rounds_ms``) can be set
beside the placement its real runs saw and the one its two traces saw, which the prediction's
co-run rates were measured in (right after each trace).

Prints, per row (K and schedule), the rounds' mean and median signed error and their spread in each
class: real runs near / mixed / far against traces near / mixed / far (a run is near when at most
one probe in five of its K's runs reads far; far when at least four in five do).

Usage::

    python benchmarks/hydra_placement.py benchmarks/results/validate_parallel_2026-12-0*.csv
"""
from __future__ import annotations

import csv
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

__all__ = ["FAR_NS", "rounds", "placement", "main"]

#: A probe above this reads far (the VM's two placements: 50-130 ns and 300-550 ns).
FAR_NS = 250.0
_CLASSES = ("near", "mixed", "far")


def placement(probes_ns, far_ns: float = FAR_NS) -> str:
    """``near``, ``mixed`` or ``far``: the share of probes over ``far_ns`` (at most 1/5, in
    between, at least 4/5).

    >>> placement([90, 110, 95]), placement([330, 95]), placement([340, 360, 90, 350, 400])
    ('near', 'mixed', 'far')
    """
    share = sum(p > far_ns for p in probes_ns) / len(probes_ns)
    return "near" if share <= 0.2 else "far" if share >= 0.8 else "mixed"


def _layout():
    from daydream.validate import REAL_PROCESSES
    from daydream.validation.hydra import MODELS

    runs = 2 * REAL_PROCESSES                       # probes per K per round
    return MODELS, runs, 2 + runs * len(MODELS)     # and per round, its trace's two first


def rounds(path) -> dict:
    """``{(K, schedule): [(error %, real runs' placement, traces' placement), ...]}`` of a
    results CSV's Hydra rows, one tuple per round; rows whose probes do not follow the Hydra
    validation's order (older files, unprobed runs) are left out."""
    from hydra_sp_mp import hydra_rows

    models, per_k, per_round = _layout()
    out = {}
    for k, sched, real, pred, row in hydra_rows(path):
        probes = [float(x) for x in (row.get("core_to_core_ns") or "").split()]
        n = len(real)
        if not n or len(pred) != n or len(probes) != per_round * n + 2 or k not in models:
            continue
        first = 2 + per_k * models.index(k)
        out[(k, sched)] = [(100.0 * (p / m - 1.0),
                            placement(probes[i * per_round + first:i * per_round + first + per_k]),
                            placement(probes[i * per_round:i * per_round + 2]
                                      + probes[(i + 1) * per_round:(i + 1) * per_round + 2]))
                           for i, (p, m) in enumerate(zip(pred, real))]
    return out


def main(argv=None) -> None:
    paths = sys.argv[1:] if argv is None else argv
    pooled: dict = {}
    for path in paths:
        try:
            got = rounds(path)
        except (OSError, KeyError, ValueError, csv.Error) as e:
            raise SystemExit(f"hydra_placement: {path}: not a validation results CSV ({e})") from None
        for key, rows in got.items():
            pooled.setdefault(key, []).extend(rows)
    print(f"{len(paths)} file(s); per Hydra row, its rounds by placement (real runs / traces): n, mean and median "
          "signed error, standard deviation")
    for (k, sched), rows in sorted(pooled.items()):
        print(f"K={k} {sched}: {len(rows)} rounds")
        for run in _CLASSES:
            for tr in _CLASSES:
                e = [x for x, a, b in rows if a == run and b == tr]
                if e:
                    print(f"  runs {run:5s} traces {tr:5s} n {len(e):3d}  mean {statistics.fmean(e):+6.1f} %  "
                          f"median {statistics.median(e):+6.1f} %  sd {statistics.pstdev(e):4.1f}")


if __name__ == "__main__":
    main()
