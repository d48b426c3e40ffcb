"""Matrix-multiply throughput alone and with a twin process running at the same time.

Checks whether two 1-thread processes slow each other down on this machine (shared
caches, memory bandwidth, SMT siblings presented as cores).  Each process reports the
best of 10-product blocks over ``--seconds``.

Usage::

    python benchmarks/corun_matmul.py --sizes 256,1024,2048
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time

__all__ = ["throughput_gflops", "main"]


def throughput_gflops(n: int, seconds: float) -> float:
    """Best fp32 ``n x n`` matmul throughput of one thread over ``seconds``."""
    import torch

    torch.set_num_threads(1)
    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(5):
        a @ b
    best, end = float("inf"), time.time() + seconds
    while time.time() < end:
        t = time.perf_counter()
        for _ in range(10):
            a @ b
        best = min(best, (time.perf_counter() - t) / 10)
    return 2 * n ** 3 / best / 1e9


def _spawn(n: int, seconds: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, __file__, "--one", str(n), "--seconds", str(seconds)],
                            stdout=subprocess.PIPE, text=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="256,1024,2048")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(f"{throughput_gflops(args.one, args.seconds):.1f}")
        return 0
    print(f"{'n':>6}{'alone GFLOP/s':>16}{'paired GFLOP/s':>22}")
    for n in map(int, args.sizes.split(",")):
        alone = _spawn(n, args.seconds).communicate()[0].strip()
        pair = [_spawn(n, args.seconds) for _ in range(2)]
        paired = " / ".join(p.communicate()[0].strip() for p in pair)
        print(f"{n:>6}{alone:>16}{paired:>22}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
