"""What a hand-over between cores costs an elementwise op, beside the core-to-core probe.

A 2-thread ``torch.add`` over ``--mib`` MiB of float32 (``out = x + 2``) is
timed (median of ``--reps`` calls) after four kinds of preparation:

* ``own``: ``x`` last written by a 2-thread op with the same partition (each
  thread reads what it wrote);
* ``input``: ``x`` last written by one thread (half of it lies in the other
  core's cache);
* ``output``: ``out`` last written by one thread (half of the stores need the
  other core's lines);
* ``both``: both.

Each round prints the probe (:func:`daydream.corelink.core_to_core_ns`)
before and after, so rounds in the near and the far placement of a VM's
cores can be told apart (``benchmarks/core_to_core.py``).

    python benchmarks/core_handover.py --rounds 50
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from daydream.corelink import core_to_core_ns

__all__ = ["main"]


def _median_us(prep, op, reps: int) -> float:
    times = []
    for _ in range(reps):
        prep()
        t0 = time.perf_counter_ns()
        op()
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times) / 1e3


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--mib", type=float, default=1.0)
    a = p.parse_args(argv)
    n = int(a.mib * 2**20 / 4)
    x, out, src = torch.randn(n), torch.empty(n), torch.randn(n)

    def threads(k):
        torch.set_num_threads(k)

    def write_x(k):
        threads(k)
        torch.add(src, 1.0, out=x)
        threads(2)

    def write_out_one():
        threads(1)
        out.fill_(0.0)
        threads(2)

    preps = {"own": lambda: write_x(2), "input": lambda: write_x(1),
             "output": lambda: (write_x(2), write_out_one()), "both": lambda: (write_x(1), write_out_one())}
    op = lambda: torch.add(x, 2.0, out=out)    # noqa: E731
    for _ in range(a.rounds):
        before = core_to_core_ns()
        us = {k: _median_us(prep, op, a.reps) for k, prep in preps.items()}
        after = core_to_core_ns()
        print(f"probe {before:4.0f} / {after:4.0f} ns | " + "  ".join(f"{k} {v:6.1f} us" for k, v in us.items()),
              flush=True)
        time.sleep(0.5)


if __name__ == "__main__":
    main()
