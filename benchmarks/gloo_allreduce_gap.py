"""gloo all-reduce between two pinned CPU processes, called as a training step calls it.

Three ways per size, ``--tries`` calls each (the first 5 dropped), idle CPUs polling:

* ``back-to-back``: one all-reduce after another (how ``daydream calibrate`` times them);
* ``after compute``: each rank computes ``--busy-ms`` (a Python spin), then all-reduces;
* ``async + compute``: each rank starts the all-reduce, computes 2 ms, then waits (DDP's overlap
  with backward, on the same core).

Prints median, mean and maximum in ms: the spread, not only the median, is what a data-parallel
prediction on a CPU misses (see benchmarks/README.md, issue 4).

Usage::

    python benchmarks/gloo_allreduce_gap.py --kb 64,1024,4096
"""
from __future__ import annotations

import argparse
import statistics
import time

__all__ = ["main"]

MODES = ("back-to-back", "after compute", "async + compute")


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _worker(rank, port, a, q):
    import torch
    import torch.distributed as dist

    from daydream.collect.runner import pin_rank

    pin_rank(rank, 2)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    out = {}
    for kb in a.kb:
        t = torch.zeros(kb * 256)
        for mode in MODES:
            ms = []
            for _ in range(a.tries + 5):
                if mode != "back-to-back":
                    _spin(a.busy_ms / 1e3)
                t0 = time.perf_counter_ns()
                if mode == "async + compute":
                    work = dist.all_reduce(t, async_op=True)
                    _spin(0.002)
                    work.wait()
                else:
                    dist.all_reduce(t)
                ms.append((time.perf_counter_ns() - t0) / 1e6)
            ms = ms[5:]
            out[(kb, mode)] = (statistics.median(ms), statistics.fmean(ms), max(ms))
    if rank == 0:
        q.put(out)
    dist.destroy_process_group()


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kb", type=lambda s: [int(x) for x in s.split(",")], default=[64, 1024, 4096],
                   help="all-reduce sizes in KiB, comma-separated")
    p.add_argument("--tries", type=int, default=35)
    p.add_argument("--busy-ms", type=float, default=5.0, help="compute before each call (the last two modes)")
    a = p.parse_args(argv)
    from daydream.calibrate_procs import first_result
    from daydream.cpuidle import polling_idle

    with polling_idle():
        out = first_result(_worker, 2, (a,), 600)
    print("gloo all-reduce, 2 pinned processes, idle CPUs polling:")
    for (kb, mode), (med, mean, mx) in out.items():
        print(f"  {kb:6d} KiB  {mode:16s} median {med:6.2f}  mean {mean:6.2f}  max {mx:6.2f} ms")


if __name__ == "__main__":
    main()
