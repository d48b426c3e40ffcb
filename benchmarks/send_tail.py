"""What a point-to-point send costs its sender's core after the post: the compute that follows it.

``p2p_post`` (the profile) is the time of the ``isend`` call; the data then leaves through gloo's
own threads, pinned to the sender's core like the rest of the process, and over the loopback
device the kernel's TCP work runs on that core too.  Where the sender computes next, the compute
pays for it; where it waits, nothing does.  The receiver's side (``p2p_land``) is calibrated; this
measures the sender's, the mirror of :func:`daydream.calibrate_p2p._p2p_land_pts`: two pinned
gloo processes, tries alternating with and without a message; in each, after a barrier, rank 1
posts its receive (a waiter thread waits on it, as the Hydra runtime's does) and waits; rank 0
posts the send (with a message) and then runs one forward and backward pass of a stack of
linear layers (the calibration's receiver work; one layer by default, a short compute keeping
the tries' noise small).  Printed per size: the
median over pairs (a quiet try, the next with a message) of the difference of rank 0's compute
times, and the median post.

Usage::

    python benchmarks/send_tail.py --tries 60
"""
from __future__ import annotations

import argparse
import os
import statistics
import threading
import time

__all__ = ["main"]

SIZES = (2 ** 14, 2 ** 17, 2 ** 19)


def _worker(rank: int, port: int, tries: int, layers: int, q) -> None:
    import torch
    import torch.distributed as dist

    from daydream.calibrate_p2p import P2P_LAND_FEATURES, P2P_LAND_ROWS

    os.sched_setaffinity(0, {rank})
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    net = torch.nn.Sequential(*[torch.nn.Linear(P2P_LAND_FEATURES, P2P_LAND_FEATURES) for _ in range(layers)])
    x = torch.randn(P2P_LAND_ROWS, P2P_LAND_FEATURES)

    def compute(passes):
        for _ in range(passes):
            net(x).sum().backward()

    compute(2)
    passes = 1
    rows = []
    for nbytes in SIZES:
        buf = torch.zeros(nbytes // 4)
        quiet, sent, posts = [], [], []
        for k in range(2 * tries + 2):
            with_msg = k % 2
            dist.barrier()
            if rank == 1:
                if with_msg:
                    work = dist.irecv(torch.empty_like(buf), 0)
                    waiter = threading.Thread(target=work.wait)
                    waiter.start()
                    waiter.join()
                continue
            work = None
            if with_msg:
                p0 = time.perf_counter_ns()
                work = dist.isend(buf, 1)
                posts.append(time.perf_counter_ns() - p0)
            start = time.perf_counter_ns()
            compute(passes)
            took = time.perf_counter_ns() - start
            if work is not None:
                work.wait()
            if k >= 2:
                (sent if with_msg else quiet).append(took)
        if rank == 0:
            diffs = [b - a for a, b in zip(quiet, sent)]
            rows.append((nbytes, statistics.median(quiet), statistics.median(diffs), statistics.median(posts)))
    dist.destroy_process_group()
    if rank == 0:
        q.put(rows)


def main(argv=None) -> None:
    import multiprocessing as mp
    import socket

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tries", type=int, default=60, help="pairs of tries per size")
    p.add_argument("--layers", type=int, default=1, help="linear layers (512 wide, 64 rows) of the sender's compute: "
                   "one forward and backward pass of them (1: about 4 ms on the Zen 1 host of 2026-12)")
    args = p.parse_args(argv)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, port, args.tries, args.layers, q)) for r in (0, 1)]
    for pr in procs:
        pr.start()
    rows = q.get()
    for pr in procs:
        pr.join()
    for nbytes, quiet, diff, post in rows:
        print(f"{nbytes // 1024:4d} KiB: compute {quiet / 1e6:.3f} ms quiet, +{diff / 1e3:.0f} us after a send "
              f"(median of paired differences); post {post / 1e3:.0f} us")


if __name__ == "__main__":
    main()
