"""The ``device`` rows' rounds split by the machine's state: where does the row's lean come from?

On this project's VMs a 2-thread run of the MLP lands in one of two states: two threads help
(2-thread over 1-thread time near 0.7) or barely (near 1.0).  The ``device`` prediction's op
re-run lands in one of the same two states, minutes or seconds apart from the real run.  For
the ``device`` row of ``--workload`` in each ``daydream validate`` results file given, this takes
every round's prediction and real 2-thread run over the row's baseline (the mean of its rounds'
1-thread baselines: the files keep no per-round baseline, so a round's own baseline noise is
left in) and calls a round *slow* on a side where that ratio is above ``--slow``.  It prints how
often each side was slow, the mean ratio of each side in each state, and the rounds by pair of
states with their mean prediction over real run.  A model bias within a state shows as means
apart in that state; a sampling difference as the two sides slow at different rates.

Usage::

    python benchmarks/device_modes.py benchmarks/results/validate_parallel_2026-12-0[34]?.csv
"""
from __future__ import annotations

import argparse
import statistics

from rounds_subsample import results_rows

__all__ = ["main", "round_ratios", "split"]


def round_ratios(path, workload: str) -> list:
    """``[(prediction / baseline, real / baseline), ...]`` per round of the ``device`` row of
    ``workload`` in one results file (the row's mean baseline; empty without such a row)."""
    out = []
    for r in results_rows(path):
        if r["optimization"].startswith("device:") and r["workload"].split()[0] == workload:
            base = float(r["baseline_ms"])
            pred = [float(x) / base for x in r["predicted_rounds_ms"].split()]
            real = [float(x) / base for x in r["measured_rounds_ms"].split()]
            out += list(zip(pred, real))
    return out


def split(pairs, slow: float) -> dict:
    """``{(prediction slow, real slow): [prediction / real, ...]}`` of ``(pred, real)`` ratio pairs.

    >>> split([(0.7, 0.72), (1.0, 0.95), (1.0, 0.7)], 0.85)
    {(False, False): [0.9722222222222222], (True, True): [1.0526315789473684], (True, False): [1.4285714285714286]}
    """
    got: dict = {}
    for p, r in pairs:
        got.setdefault((p > slow, r > slow), []).append(p / r)
    return got


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", help="results files of `daydream validate` with device rows")
    ap.add_argument("--workload", default="mlp", help="the device row's workload (mlp, transformer)")
    ap.add_argument("--slow", type=float, default=0.85, help="2-thread over 1-thread ratio above which a round is slow")
    a = ap.parse_args(argv)
    pairs = [x for f in a.files for x in round_ratios(f, a.workload)]
    if not pairs:
        raise SystemExit(f"no device row of {a.workload} in the files given")
    print(f"{a.workload}: {len(pairs)} rounds of {len(a.files)} files; slow: ratio over {a.slow}")
    for side, i in (("prediction", 0), ("real run", 1)):
        slow = [x[i] for x in pairs if x[i] > a.slow]
        fast = [x[i] for x in pairs if x[i] <= a.slow]
        print(f"  {side:10s}: slow in {len(slow)}; mean over baseline slow {statistics.fmean(slow or [float('nan')]):.3f}, "
              f"fast {statistics.fmean(fast or [float('nan')]):.3f}")
    for (ps, rs), v in sorted(split(pairs, a.slow).items()):
        print(f"  prediction {'slow' if ps else 'fast'}, real {'slow' if rs else 'fast'}: {len(v):3d} rounds, "
              f"prediction over real {statistics.fmean(v):.3f}")


if __name__ == "__main__":
    main()
