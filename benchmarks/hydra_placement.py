"""The Hydra rows' rounds sorted by where the host had placed the two CPUs.

On this project's VM the host moves the two virtual CPUs between a near placement (a cache-line
round trip of 50-130 ns: one shared last-level cache) and a far one (300-550 ns) every few seconds
(:mod:`daydream.corelink`). ``daydream validate`` probes the placement before and after every
measured run and writes the probes, in the order taken, with each row (``core_to_core_ns``). The
Hydra validation (:mod:`daydream.validation.hydra`) takes them in a fixed order: per round and K
of :data:`~daydream.validation.hydra.MODELS`, a baseline trace (two probes), then
:data:`~daydream.validate.REAL_PROCESSES` real runs (two probes each), and after the last round one
more trace (until session 76 a round traced once, before its first K: files of that layout are read
too, told apart by their number of probes). So each round's error (``predicted_rounds_ms`` over
``measured_rounds_ms``) can be set beside the placement its real runs saw and the one its two
traces saw, which the prediction's co-run rates were measured in (right after each trace).

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

__all__ = ["FAR_NS", "rounds", "spans", "placement", "main"]

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

    return MODELS, 2 * REAL_PROCESSES               # probes per K's runs in a round


def spans(rounds_n: int, models: int, k_index: int, per_k: int, probes_n: int):
    """Per round, ``(runs, traces)``: the probe index ranges of K number ``k_index``'s real runs and
    of the two traces around them, in a Hydra row's ``probes_n`` probes; None where the count fits
    neither layout (a trace before each K since session 76; one trace a round before it).

    >>> spans(1, 2, 1, 2, 10)          # trace, K0 runs, trace, K1 runs, trace
    [((6, 8), ((4, 6), (8, 10)))]
    >>> spans(1, 2, 1, 2, 8)           # trace, K0 runs, K1 runs, trace
    [((4, 6), ((0, 2), (6, 8)))]
    >>> spans(2, 2, 0, 2, 9) is None
    True
    """
    each = 2 + per_k                                # a trace's two probes, then one K's runs
    if probes_n == models * each * rounds_n + 2:
        return [((b + 2, b + each), ((b, b + 2), (b + each, b + each + 2)))
                for b in (each * (r * models + k_index) for r in range(rounds_n))]
    per_round = 2 + per_k * models
    if probes_n == per_round * rounds_n + 2:
        first = 2 + per_k * k_index
        return [((b + first, b + first + per_k), ((b, b + 2), (b + per_round, b + per_round + 2)))
                for b in (per_round * r for r in range(rounds_n))]
    return None


def rounds(path) -> dict:
    """``{(K, schedule): [(error %, real runs' placement, traces' placement), ...]}`` of a
    results CSV's Hydra rows, one tuple per round; rows whose probes do not follow the Hydra
    validation's order (older files, unprobed runs) are left out."""
    from hydra_sp_mp import hydra_rows

    models, per_k = _layout()
    out = {}
    for k, sched, real, pred, row in hydra_rows(path):
        probes = [float(x) for x in (row.get("core_to_core_ns") or "").split()]
        n = len(real)
        got = spans(n, len(models), models.index(k), per_k, len(probes)) if k in models and n else None
        if not got or len(pred) != n:
            continue
        out[(k, sched)] = [(100.0 * (p / m - 1.0), placement(probes[slice(*runs)]),
                            placement(probes[slice(*before)] + probes[slice(*after)]))
                           for (p, m), (runs, (before, after)) in zip(zip(pred, real), got)]
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
