"""How much per-action noise alone lengthens a GPipe iteration (Monte-Carlo, no torch).

Two stages, M micro-batches, per-action times F0, F1 (forward of stage 0, 1) and B0, B1
(backward), each multiplied by log-normal noise of coefficient of variation ``--cv``; the
iteration is the dependency-respecting makespan.  Prints the noiseless makespan and the mean
over ``--samples`` noisy ones.  Defaults: the per-micro-batch costs predicted for the 2-stage mlp
pipeline validation (ms).

Usage::

    python benchmarks/gpipe_noise.py --cv 0.1,0.2,0.3
"""
from __future__ import annotations

import argparse
import math
import random
import statistics
import sys

__all__ = ["gpipe_ms", "main"]


def gpipe_ms(f0, f1, b0, b1) -> float:
    """Makespan of 2-stage GPipe given per-micro-batch times (lists of equal length)."""
    m = len(f0)
    s0f, t = [], 0.0
    for k in range(m):
        t += f0[k]
        s0f.append(t)
    s1f, t = [], 0.0
    for k in range(m):
        t = max(t, s0f[k]) + f1[k]
        s1f.append(t)
    t, s1b = s1f[-1], {}
    for k in reversed(range(m)):
        t += b1[k]
        s1b[k] = t
    t = s0f[-1]
    for k in reversed(range(m)):
        t = max(t, s1b[k]) + b0[k]
    return t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--costs", default="2.0,2.3,3.8,6.2", help="F0,F1,B0,B1 per micro-batch, ms")
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--cv", default="0.1,0.2,0.3")
    ap.add_argument("--samples", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    rng = random.Random(a.seed)
    costs = [float(x) for x in a.costs.split(",")]
    m = a.microbatches
    base = gpipe_ms(*([c] * m for c in costs))
    for cv in (float(x) for x in a.cv.split(",")):
        sig = math.sqrt(math.log(1 + cv * cv))

        def noisy(c):
            return [c * rng.lognormvariate(-sig * sig / 2, sig) for _ in range(m)]

        mean = statistics.fmean(gpipe_ms(*(noisy(c) for c in costs)) for _ in range(a.samples))
        print(f"cv {cv:.2f}: noiseless {base:.2f} ms, mean with noise {mean:.2f} ms (+{100 * (mean / base - 1):.1f} %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
