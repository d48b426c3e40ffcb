"""How a timed gloo send is started decides whether it stalls (session 29).

Two processes pinned to a core each, idle CPUs polling (as ``daydream calibrate`` and
``daydream validate`` run them).  Each try rank 0 sends a small tensor to rank 1, which is
already waiting in ``recv``; the one-way time runs from the send's start on rank 0 to the
receive's return on rank 1 (one monotonic clock).  Tries start in one of these ways:

* ``barrier``: ``dist.barrier()``, then rank 0 computes (spins) ``--busy-ms`` first (what
  ``calibrate_p2p._p2p_one_way_ns`` does);
* ``posted-barrier``: the same, rank 1 posting its receive (``irecv``) before the barrier
  rather than after it (as the Hydra runtime posts a round's receives before its barrier);
* ``token``: rank 1 sends a 1-element token that rank 0 receives, then the same;
* ``token-mm``: the same, rank 0 computing ``torch.mm`` instead of spinning.

Prints, per start, the median and mean one-way time and the share of tries over 0.5 ms.
``--demote``: each rank first lowers gloo's socket thread (``gloo_tcp_loop``) to nice 19, so
that the rank's main thread, pinned to the same core, runs whenever it is ready.

Usage::

    python benchmarks/p2p_start.py [--tries 200] [--busy-ms 1] [--kib 1] [--demote]
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch.multiprocessing as mp

from daydream.calibrate_gloo import free_port, spin
from daydream.cpuidle import polling_idle

__all__ = ["main"]

STARTS = ("barrier", "posted-barrier", "token", "token-mm")


def _demote_gloo_threads() -> None:
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/comm") as f:
            if f.read().startswith("gloo_tcp_loop"):
                os.setpriority(os.PRIO_PROCESS, int(tid), 19)


def _worker(rank, port, q, start, tries, busy_s, nbytes, demote):
    import torch
    import torch.distributed as dist

    from daydream.collect.runner import pin_rank

    pin_rank(rank, 2)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    if demote:
        _demote_gloo_threads()
    t, token = torch.zeros(max(nbytes // 4, 1)), torch.zeros(1)
    a, b = torch.randn(64, 512), torch.randn(512, 512)
    work = (lambda: torch.mm(a, b)) if start == "token-mm" else None
    stamps = torch.zeros(tries + 3, dtype=torch.int64)
    for i in range(len(stamps)):
        posted = dist.irecv(t, 0) if rank == 1 and start == "posted-barrier" else None
        if start.endswith("barrier"):
            dist.barrier()
        elif rank == 0:
            dist.recv(token, 1)
        else:
            dist.send(token, 0)
        if rank == 0:
            spin(busy_s, work)
            stamps[i] = time.perf_counter_ns()
            dist.send(t, 1)
        else:
            (posted or dist.irecv(t, 0)).wait()
            stamps[i] = time.perf_counter_ns()
    if rank == 0:
        peer = torch.zeros_like(stamps)
        dist.recv(peer, 1)
        q.put(((peer - stamps)[3:].double() / 1e3).tolist())
    else:
        dist.send(stamps, 0)
    dist.destroy_process_group()


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tries", type=int, default=200)
    p.add_argument("--busy-ms", type=float, default=1.0, help="rank 0 computes this long before each send")
    p.add_argument("--kib", type=int, default=1, help="size of the tensor sent")
    p.add_argument("--demote", action="store_true", help="gloo's socket thread at nice 19 in each rank")
    args = p.parse_args(argv)
    ctx = mp.get_context("spawn")
    with polling_idle() as held:
        print(f"idle CPUs polling: {held}")
        for start in STARTS:
            q, port = ctx.Queue(), free_port()
            procs = [ctx.Process(target=_worker, args=(r, port, q, start, args.tries, args.busy_ms / 1e3,
                                                       args.kib * 1024, args.demote)) for r in range(2)]
            for proc in procs:
                proc.start()
            us = np.array(q.get())
            for proc in procs:
                proc.join()
            print(f"{start:14s} one-way median {np.median(us):6.0f} us, mean {us.mean():6.0f} us, "
                  f"over 0.5 ms {100 * (us > 500).mean():4.1f} % of {len(us)}", flush=True)


if __name__ == "__main__":
    main()
