"""Matrix-multiply throughput alone and with a twin process running at the same time.

Checks whether two 1-thread processes slow each other down on this machine (shared
caches, memory bandwidth, SMT siblings presented as cores).  Each process reports the
best and the median of 10-product blocks over ``--seconds`` (the median also shows
intermittent slow-downs that the best hides).  A size is ``n`` (square) or ``MxKxN``.

Usage::

    python benchmarks/corun_matmul.py --sizes 256,1024,2048
    python benchmarks/corun_matmul.py --sizes 16x1024x1024   # a pipeline micro-batch's matmul
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time

__all__ = ["throughput_gflops", "main"]


def throughput_gflops(size: str, seconds: float) -> tuple[float, float]:
    """Best and median fp32 matmul throughput (GFLOP/s) of one thread over ``seconds``."""
    import statistics

    import torch

    m, k, n = (int(x) for x in size.split("x")) if "x" in size else (int(size),) * 3
    torch.set_num_threads(1)
    a, b = torch.randn(m, k), torch.randn(k, n)
    for _ in range(5):
        a @ b
    blocks, end = [], time.time() + seconds
    while time.time() < end:
        t = time.perf_counter()
        for _ in range(10):
            a @ b
        blocks.append((time.perf_counter() - t) / 10)
    return 2 * m * k * n / min(blocks) / 1e9, 2 * m * k * n / statistics.median(blocks) / 1e9


def _spawn(size: str, seconds: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, __file__, "--one", size, "--seconds", str(seconds)],
                            stdout=subprocess.PIPE, text=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="256,1024,2048")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        best, med = throughput_gflops(args.one, args.seconds)
        print(f"{best:.1f}/{med:.1f}")
        return 0
    print(f"{'size':>14}{'alone best/median':>22}{'paired best/median (2 processes)':>36}")
    for size in args.sizes.split(","):
        alone = _spawn(size, args.seconds).communicate()[0].strip()
        pair = [_spawn(size, args.seconds) for _ in range(2)]
        paired = "  ".join(p.communicate()[0].strip() for p in pair)
        print(f"{size:>14}{alone:>22}{paired:>36}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
