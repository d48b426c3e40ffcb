"""The calibration's cycle probe measured again and again: how far its curve moves within minutes.

``daydream calibrate`` measures the ``cycle`` curve (:mod:`daydream.calibrate_cycle`: a step of
one of N copies of a small shard taken in turns, over one copy's, by the state the N copies keep)
once, in three sittings; ``hfta`` takes its factor for N fused copies from the curve's points
either side of the model's state (``cycle_now``: measured again when predicting).  This takes
``--probes`` curves in a row, each of ``--rounds`` rounds, and prints each with its time and the
one-copy step, then per point the least, median and greatest factor: where the knee sits and
how fast it moves (on this project's VM, with other tenants on the host's shared cache).

Usage::

    python benchmarks/cycle_drift.py --probes 20 --rounds 9 --pin 1
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

__all__ = ["main", "spread"]


def spread(curves) -> list:
    """Per point of ``curves`` (each ``((state bytes, factor), ...)``): ``(MB, least, median,
    greatest)`` of its factor.

    >>> spread([((4e6, 1.0), (8e6, 1.1)), ((4e6, 1.0), (8e6, 1.3)), ((4e6, 1.0), (8e6, 1.2))])
    [(4.0, 1.0, 1.0, 1.0), (8.0, 1.1, 1.2, 1.3)]
    """
    points = zip(*curves)
    return [(p[0][0] / 1e6, min(f for _, f in p), statistics.median(f for _, f in p), max(f for _, f in p))
            for p in points]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--probes", type=int, default=20, help="curves measured one after another")
    ap.add_argument("--rounds", type=int, default=9, help="rounds per curve (a calibration takes 27)")
    ap.add_argument("--pin", type=int, default=None, help="run on this core only (default: anywhere)")
    args = ap.parse_args(argv)
    import torch

    from daydream.calibrate_cycle import cycle_curve, cycle_times

    torch.set_num_threads(1)
    if args.pin is not None:
        os.sched_setaffinity(0, {args.pin})
    curves, t0 = [], time.perf_counter()
    for _ in range(args.probes):
        times = cycle_times(torch, args.rounds)
        curves.append(cycle_curve(times))
        print(f"{time.perf_counter() - t0:6.1f} s  x" + " / ".join(f"{f:.3f}" for _, f in curves[-1])
              + f"  one copy {statistics.median(times[1]) / 1e6:.3f} ms", flush=True)
    for mb, lo, med, hi in spread(curves):
        print(f"{mb:5.1f} MB: x{lo:.3f}-{hi:.3f}, median x{med:.3f}")


if __name__ == "__main__":
    main()
