"""Are this machine's slow spells per core or the whole machine's?  One process, two cores, in turns.

A fixed chunk of single-threaded work (as ``machine_noise.py``) runs on core 0,
then on core 1 (the process moved with ``sched_setaffinity``; a few warm-up
calls after each move are not timed), the order alternating, for
``--seconds``.  Per window of ``--window-s``: each core's median chunk time.
Prints each core's spread, the correlation of the two cores' window medians
(near 1: spells slow the whole machine; near 0: one core at a time), and the
share of windows in which the cores' medians differ by more than
``--apart`` (default 10 %).

Why it matters: the Hydra and pipeline validations predict 2-process runs
(one process pinned to each core) from a 1-process trace that Linux places on
either core; a spell on one core slows that trace fully and the 2-process
run on one side only.

    python benchmarks/core_spells.py --seconds 120 --op matmul
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch

from machine_noise import _reps, _work

#: Untimed calls after each move to the other core (its caches are cold for us).
WARM_CALLS = 3


def chunk_on(core: int, fn, reps: int) -> float:
    """Seconds ``reps`` calls of ``fn`` took on ``core`` (after :data:`WARM_CALLS` untimed ones)."""
    os.sched_setaffinity(0, {core})
    for _ in range(WARM_CALLS):
        fn()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return time.perf_counter() - t0


def window_medians(stamps, times, window_s: float) -> np.ndarray:
    """Median of ``times`` per window of ``window_s`` of ``stamps`` (s); NaN where none fell.

    >>> window_medians([0.0, 0.1, 1.2, 1.3], [1.0, 3.0, 5.0, 5.0], 1.0).tolist()
    [2.0, 5.0]
    """
    stamps, times = np.asarray(stamps), np.asarray(times)
    idx = (stamps // window_s).astype(int)
    return np.array([np.median(times[idx == i]) if (idx == i).any() else np.nan for i in range(idx.max() + 1)])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--chunk-ms", type=float, default=20.0)
    ap.add_argument("--window-s", type=float, default=1.0)
    ap.add_argument("--apart", type=float, default=0.10, help="cores this far apart in a window count as apart")
    ap.add_argument("--op", choices=("matmul", "add", "python"), default="matmul")
    ap.add_argument("--cores", default="0,1", help="the two cores")
    args = ap.parse_args(argv)
    cores = [int(c) for c in args.cores.split(",")]
    torch.set_num_threads(1)
    fn = _work(args.op)
    reps = _reps(fn, args.chunk_ms / 1e3)
    got = {c: ([], []) for c in cores}
    t_start = time.perf_counter()
    step = 0
    while time.perf_counter() - t_start < args.seconds:
        for c in (cores if step % 2 == 0 else cores[::-1]):
            dt = chunk_on(c, fn, reps)
            got[c][0].append(time.perf_counter() - t_start)
            got[c][1].append(dt * 1e3)
        step += 1
    os.sched_setaffinity(0, set(cores))
    meds = [window_medians(*got[c], args.window_s) for c in cores]
    n = min(len(m) for m in meds)
    a, b = meds[0][:n], meds[1][:n]
    ok = ~(np.isnan(a) | np.isnan(b))
    a, b = a[ok], b[ok]
    for c, m in zip(cores, (a, b)):
        med = float(np.median(m))
        print(f"core {c}: {len(got[c][1])} chunks, window medians {med:.2f} ms, p10 {np.percentile(m, 10) / med:.3f} "
              f"p90 {np.percentile(m, 90) / med:.3f} max {m.max() / med:.3f} (x median)")
    ratio = a / b
    apart = float(np.mean(np.abs(ratio / np.median(ratio) - 1) > args.apart))
    print(f"{len(a)} windows of {args.window_s:g} s: correlation of the cores' medians {np.corrcoef(a, b)[0, 1]:+.2f}; "
          f"core {cores[0]} / core {cores[1]} median {np.median(ratio):.3f}, apart by > {args.apart:.0%} in "
          f"{apart:.0%} of windows")
    print("per-window core ratios: " + " ".join(f"{r:.2f}" for r in ratio))
    print(f"per-window core {cores[0]} (x its median): " + " ".join(f"{x:.2f}" for x in a / np.median(a)))


if __name__ == "__main__":
    main()
