"""In-place element-wise passes against the calibration's out-of-place add, by tensor size.

The device profile's ``elementwise`` curve times ``torch.add(a, b, out=c)`` and counts 3 bytes
moved per element byte; an out-of-place op also reads each line of ``c`` before writing it (a
write-allocating cache), which the count leaves out.  An in-place op (``x.div_(s)``: a read and a
write, 2 bytes; ``x.add_(y)``: 3) has no such read.  Prints per size the counted bytes/s of each
and their ratio to the out-of-place add's: what the profile's ``inplace`` curve (since session 86)
adds, and what torch's gradient scaling in ``pipeline`` and ``tessel`` is costed at.

Usage::

    python benchmarks/inplace_rate.py [--threads 1] [--min-time-s 0.05]
"""
from __future__ import annotations

import argparse

__all__ = ["main", "rates"]

#: Elements per tensor: from cache-resident to well past the last-level cache.
SIZES = (2 ** 18, 2 ** 20, 2 ** 22, 2 ** 24, 2 ** 26)


def rates(numel: int, min_time_s: float) -> tuple:
    """Counted bytes/s of ``add(a, b, out=c)``, ``a.div_(s)`` and ``a.add_(b)`` over ``numel``
    float32 elements each."""
    import torch

    from daydream.calibrate import time_call_ns

    cpu = torch.device("cpu")
    a, b, c = torch.randn(numel), torch.randn(numel), torch.empty(numel)
    nbytes = 4 * numel
    out = time_call_ns(lambda: torch.add(a, b, out=c), cpu, min_time_s)
    div = time_call_ns(lambda: a.div_(1.0001), cpu, min_time_s)
    add = time_call_ns(lambda: a.add_(b), cpu, min_time_s)
    return 3 * nbytes / out * 1e9, 2 * nbytes / div * 1e9, 3 * nbytes / add * 1e9


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--min-time-s", type=float, default=0.05)
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    print(f"{'MB a tensor':>11s} {'add out= GB/s':>14s} {'div_ GB/s':>10s} {'x':>5s} {'add_ GB/s':>10s} {'x':>5s}")
    for numel in SIZES:
        out, div, add = rates(numel, args.min_time_s)
        print(f"{4 * numel / 1e6:11.1f} {out / 1e9:14.1f} {div / 1e9:10.1f} {div / out:5.2f} {add / 1e9:10.1f} "
              f"{add / out:5.2f}")


if __name__ == "__main__":
    main()
