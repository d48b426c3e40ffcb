"""gloo all-reduce after a matmul: ``dist.all_reduce`` against functional collectives (DTensor's path).

Two pinned processes, idle CPUs polling.  Per call each rank runs four ``addmm`` making a fresh
``[--rows, 256]`` float32 output, copies it and all-reduces it, then uses the result once (the
first use waits on the functional path); both paths make the same copy and the same first use.
Each call is timed from the later rank's start to the later end (one host clock); the paths take
turns, ``--rounds`` rounds of ``--calls`` calls.  Prints per path the mean and median in us:
what ``tensor-parallel`` (``api=torch``) finds when it measures its all-reduces in line
(``daydream.workloads.tensor_parallel.measure_api_overhead(allreduce_bytes=...)``).

Usage::

    python benchmarks/allreduce_paths.py [--rows 1024] [--rounds 8] [--calls 15]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

__all__ = ["main"]

PATHS = ("dist", "functional")


def _worker(rank, port, a, q):
    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    from daydream.collect.runner import pin_rank

    pin_rank(rank, 2)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    x, w, b = torch.randn(a.rows, 256), torch.randn(256, 256), torch.randn(256)

    def plain(y):
        y = y.clone()
        dist.all_reduce(y)
        return y

    ways = {"dist": plain, "functional": lambda y: funcol.all_reduce(y, "sum", dist.group.WORLD)}
    for way in ways.values():                   # warm-up
        way(torch.addmm(b, x, w)) + 1.0
    stamps = {k: [] for k in ways}
    for _ in range(a.rounds):
        for k, way in ways.items():
            for _ in range(a.calls):
                for _ in range(4):
                    y = torch.addmm(b, x, w)
                t0 = time.monotonic_ns()
                way(y) + 1.0                    # the first use waits
                stamps[k].append((t0, time.monotonic_ns()))
    every = [None, None]
    dist.all_gather_object(every, stamps)
    if rank == 0:
        q.put(every)
    dist.destroy_process_group()


def main(argv=None) -> None:
    import multiprocessing as mp

    from daydream.cpuidle import polling_idle

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=1024, help="rows of the all-reduced [rows, 256] float32 tensor")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--calls", type=int, default=15)
    a = p.parse_args(argv)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = 29000 + os.getpid() % 1000
    with polling_idle():
        procs = [ctx.Process(target=_worker, args=(r, port, a, q)) for r in range(2)]
        for proc in procs:
            proc.start()
        every = q.get()
        for proc in procs:
            proc.join()
    print(f"gloo all-reduce of {a.rows * 1024 / 2**20:.2f} MiB after a matmul, 2 pinned processes, idle CPUs polling:")
    for k in PATHS:
        late = [(max(e0, e1) - max(s0, s1)) / 1e3 for (s0, e0), (s1, e1) in zip(every[0][k], every[1][k])]
        print(f"  {k:10s} mean {statistics.fmean(late):7.0f}  median {statistics.median(late):7.0f} us  (n={len(late)})")


if __name__ == "__main__":
    main()
