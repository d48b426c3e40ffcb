"""gloo all-reduce between two CPU processes, each on a core of its own: idle, and with a thread
of the same process computing on that core (as in data-parallel training with a rank per core).

What ``data-parallel`` on a CPU must account for when ranks have no spare core: gloo's threads
then time-share the training thread's core, and each hand-over around the ring waits for the
scheduler to run them.  Each size: median over ``--tries`` all-reduces, each after a barrier.

Usage::

    python benchmarks/gloo_busy_core.py --mb 1,3.2
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time

__all__ = ["main"]


def _compute(torch, stop: threading.Event) -> None:
    """Keep this core busy with matmuls (they release the GIL) until ``stop``."""
    a, w = torch.randn(64, 512), torch.randn(512, 512)
    while not stop.is_set():
        torch.mm(a, w)


def _worker(rank: int, port: int, sizes_mb, tries: int, q) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cores[rank % len(cores)]})          # before gloo starts its threads
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    out = {}
    for busy in (False, True):
        stop = threading.Event()
        if busy:
            threading.Thread(target=_compute, args=(torch, stop), daemon=True).start()
        for mb in sizes_mb:
            t = torch.randn(int(mb * 2 ** 20 / 4))
            ts = []
            for _ in range(tries + 5):
                dist.barrier()
                t0 = time.perf_counter()
                dist.all_reduce(t)
                ts.append(time.perf_counter() - t0)
            out[(busy, mb)] = statistics.median(ts[5:]) * 1e3
        stop.set()
    if rank == 0:
        q.put(out)
    dist.destroy_process_group()


def main(argv=None) -> int:
    import socket

    import torch.multiprocessing as mp

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", default="1,3.2", help="all-reduce sizes in MiB, comma-separated")
    ap.add_argument("--tries", type=int, default=20)
    a = ap.parse_args(argv)
    sizes = [float(x) for x in a.mb.split(",")]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, port, sizes, a.tries, q)) for r in range(2)]
    for p in procs:
        p.start()
    out = q.get(timeout=600)
    for p in procs:
        p.join(timeout=30)
    for mb in sizes:
        print(f"{mb:6.2f} MiB: idle cores {out[(False, mb)]:7.2f} ms, busy cores {out[(True, mb)]:7.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
