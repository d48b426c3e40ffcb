"""Point-to-point latency of gloo between two CPU processes (what a pipeline hand-over costs).

Two measurements, each over ``--tries`` transfers of ``--kb`` KiB after 5 warm-up ones:

* round trip: rank 0 sends, rank 1 sends back at once (``--busy-ms`` of computing on rank 0
  before each send);
* late receive: rank 0 posts an ``isend`` and computes for ``--busy-ms``; rank 1 posts its
  ``irecv`` ``--late-ms`` later and waits: the wait is the hand-over a pipeline stage sees
  when its predecessor ran ahead.

Prints median, 90th percentile, mean and maximum in ms.

Usage::

    python benchmarks/gloo_p2p.py --kb 64
    python benchmarks/gloo_p2p.py --kb 4096 --busy-ms 5
    python benchmarks/gloo_p2p.py --kb 64 --busy-ms 10 --pin   # a core per rank
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

__all__ = ["main"]


def _spin(ms: float) -> None:
    t = time.perf_counter()
    while time.perf_counter() - t < ms / 1e3:
        pass


def _worker(rank, a, q, port):
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if a.pin:
        from daydream.collect.runner import pin_rank

        pin_rank(rank, 2)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    x = torch.zeros(a.kb * 256)
    trip, late = [], []
    for i in range(a.tries + 5):
        if rank == 0:
            _spin(a.busy_ms)
            t = time.perf_counter()
            dist.send(x, 1)
            dist.recv(x, 1)
            trip.append((time.perf_counter() - t) * 1e3)
        else:
            dist.recv(x, 0)
            dist.send(x, 0)
    for i in range(a.tries + 5):
        dist.barrier()
        if rank == 0:
            w = dist.isend(x, 1)
            _spin(a.busy_ms)
            w.wait()
        else:
            time.sleep(a.late_ms / 1e3)
            t = time.perf_counter()
            dist.irecv(x, 0).wait()
            late.append((time.perf_counter() - t) * 1e3)
    q.put((rank, trip[5:] if rank == 0 else late[5:]))
    dist.destroy_process_group()


def _stats(xs) -> str:
    xs = sorted(xs)
    return (f"median {statistics.median(xs):.3f}  p90 {xs[int(0.9 * (len(xs) - 1))]:.3f}  "
            f"mean {statistics.fmean(xs):.3f}  max {xs[-1]:.3f} ms")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kb", type=int, default=64, help="message size, KiB")
    ap.add_argument("--tries", type=int, default=50)
    ap.add_argument("--busy-ms", type=float, default=0.0, help="sender computes this long around each send")
    ap.add_argument("--late-ms", type=float, default=3.0, help="receiver posts its receive this late")
    ap.add_argument("--port", type=int, default=29541)
    ap.add_argument("--pin", action="store_true", help="each rank on its own core (as validation runs do)")
    a = ap.parse_args(argv)
    import torch.multiprocessing as mp

    q = mp.get_context("spawn").SimpleQueue()
    mp.spawn(_worker, args=(a, q, a.port), nprocs=2, join=True)
    got = dict(q.get() for _ in range(2))
    print(f"gloo point-to-point, {a.kb} KiB, sender busy {a.busy_ms:g} ms{', ranks pinned' if a.pin else ''}:")
    print(f"  round trip                       {_stats(got[0])}")
    print(f"  receive posted {a.late_ms:g} ms after the send {_stats(got[1])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
