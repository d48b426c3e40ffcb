"""How steady is this machine?  Times a fixed piece of work over and over.

A chunk of single-threaded work (``--op matmul``: 256x256 float32 matmuls;
``--op add``: a 4 MiB elementwise add, memory bound; ``--op python``: a pure
Python loop) lasting about ``--chunk-ms`` is repeated for ``--seconds``.
Prints the spread of the chunk times (p10 / median / p90 / max over median)
and how long a slow or fast spell lasts (lag at which the autocorrelation
of chunk times falls below 0.5), which tells how far apart two runs may be
and still see the same machine.

    python benchmarks/machine_noise.py --seconds 60 --op matmul
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch


def _work(op: str):
    if op == "matmul":
        a, b = torch.randn(256, 256), torch.randn(256, 256)
        return lambda: torch.mm(a, b)
    if op == "add":
        a, b = torch.randn(1 << 20), torch.randn(1 << 20)
        return lambda: torch.add(a, b)
    return lambda: sum(i * i for i in range(2000))


def _reps(fn, chunk_s: float) -> int:
    for _ in range(20):     # warm up (first calls allocate, load kernels)
        fn()
    n, t = 1, 0.0
    while t < chunk_s / 4:
        n *= 2
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t = time.perf_counter() - t0
    return max(int(n * chunk_s / t), 1)


def persistence_chunks(x: np.ndarray) -> int:
    """First lag at which the autocorrelation of ``x`` drops below 0.5."""
    d = x - x.mean()
    var = float((d * d).mean()) or 1.0
    for lag in range(1, len(x) // 2):
        if float((d[:-lag] * d[lag:]).mean()) / var < 0.5:
            return lag
    return len(x) // 2


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--chunk-ms", type=float, default=10.0)
    ap.add_argument("--op", choices=("matmul", "add", "python"), default="matmul")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    fn = _work(args.op)
    reps = _reps(fn, args.chunk_ms / 1e3)
    times = []
    end = time.perf_counter() + args.seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        times.append(time.perf_counter() - t0)
    x = np.array(times) * 1e3
    med = float(np.median(x))
    p10, p90 = np.percentile(x, [10, 90])
    lag = persistence_chunks(x)
    print(f"{args.op}: {len(x)} chunks of ~{args.chunk_ms:g} ms: p10 {p10 / med:.3f}, median {med:.2f} ms, "
          f"p90 {p90 / med:.3f}, max {x.max() / med:.3f} (x median); spells last ~{lag * med / 1e3:.2f} s")
    for window_s in (0.1, 1.0, 3.0, 10.0):
        k = max(int(window_s * 1e3 / med), 1)
        means = x[: len(x) // k * k].reshape(-1, k).mean(axis=1)
        if len(means) >= 3:
            print(f"runs of {window_s:g} s: mean varies by {means.std() / means.mean() * 100:.1f} % (coefficient of "
                  f"variation over {len(means)} windows; max/min {means.max() / means.min():.2f})")
    per_s = max(int(1000 / med), 1)
    secs = [float(np.median(x[i:i + per_s])) / med for i in range(0, len(x) - per_s + 1, per_s)]
    print("per-second medians (x overall median): " + " ".join(f"{s:.2f}" for s in secs))


if __name__ == "__main__":
    main()
