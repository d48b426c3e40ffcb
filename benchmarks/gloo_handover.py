"""gloo hand-over between two pinned processes, by when the receive is posted relative to the send.

Both ranks compute (spin) before posting, as pipeline stages do; rank 1 posts its receive
``offset`` ms after rank 0 posts its send (negative: before) and waits; rank 0 computes
``--after-ms`` more after posting, then waits for its send. Printed per offset: the median time
from the end of the send's post to the receive's completion (both ranks read one host clock), and
the share of tries over 1 ms. Two runs, 2026-11-23, 64 KiB: with ``--after-ms 2`` 0.006-0.008 ms
at -2 / -1 / -0.6 / -0.3 ms (20-28 % of tries over 1 ms), 2.069 ms at 0 (85 %: the data left when
rank 0 stopped computing), 0.348 ms at +0.3; with ``--after-ms 0.5`` 0.011-0.161 ms, 0.619 ms at
0 (42 %), 0.346 ms at +0.3. The means carry a tail the medians hide (2026-11-23 21:20-21:30,
``--after-ms 0 / 2 / 6 --offsets=-2,-0.6,-0.15,0.15,1``): 0.19-0.38 / 0.15-0.82 / 0.35-0.69 ms
after the send's post at the offsets before +1 (5-28 % of tries over 1 ms).

Usage::

    python benchmarks/gloo_handover.py
    python benchmarks/gloo_handover.py --kb 64 --after-ms 2 --tries 40 --offsets=-2,-1,-0.6,-0.3,0,0.3
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

__all__ = ["main"]


def _spin(seconds: float, work=None) -> None:
    """Keep this thread busy for ``seconds``: a Python loop, or ``work()`` (torch ops) repeated."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        if work is not None:
            work()


def _worker(rank, port, args, q):
    import torch
    import torch.distributed as dist

    os.sched_setaffinity(0, {rank})
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    t = torch.zeros(args.kb * 256)
    a, b = torch.randn(64, 512), torch.randn(512, 512)
    compute = (lambda: torch.mm(a, b)) if args.compute == "mm" else None
    offsets = [float(x) for x in args.offsets.split(",")]
    got = {o: [] for o in offsets}
    before = 0.003
    for _ in range(args.tries):
        for o in offsets:
            dist.barrier()
            if rank == 0:
                _spin(before, compute)
                work = dist.isend(t, 1)
                posted = time.perf_counter_ns()
                _spin(args.after_ms / 1e3, compute)
                work.wait()
                dist.send(torch.tensor([posted], dtype=torch.int64), 1)
            else:
                _spin(max(before + o / 1e3, 0.0), compute)
                dist.irecv(t, 0).wait()
                arrived = time.perf_counter_ns()
                stamp = torch.zeros(1, dtype=torch.int64)
                dist.recv(stamp, 0)
                got[o].append((arrived - int(stamp[0])) / 1e6)
    if rank == 1:
        q.put({o: (statistics.median(v), statistics.fmean(v), sum(x > 1 for x in v) / len(v)) for o, v in got.items()})
    dist.destroy_process_group()


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kb", type=int, default=64)
    p.add_argument("--after-ms", type=float, default=2.0, help="rank 0 computes this long after posting its send")
    p.add_argument("--tries", type=int, default=40)
    p.add_argument("--compute", choices=("spin", "mm"), default="spin",
                   help="what the ranks compute: a Python loop, or torch matmuls (64x512 by 512x512, ~0.1 ms each)")
    p.add_argument("--offsets", default="-2,-1,-0.6,-0.3,0,0.3", help="receive post - send post, ms")
    args = p.parse_args(argv)

    from daydream.calibrate_procs import first_result
    from daydream.cpuidle import polling_idle

    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("gloo_handover: needs two cores")
    with polling_idle() as held:
        out = first_result(_worker, 2, (args,), 600)
    print(f"{args.kb} KiB, rank 0 computing ({args.compute}) {args.after_ms} ms after its post; idle CPUs polling: {held}")
    for o, (med, mean, slow) in out.items():
        print(f"receive posted {o:+.2f} ms from the send: arrival {med:.3f} ms after the send's post (median), "
              f"mean {mean:.3f} ms, {slow * 100:.0f} % of tries over 1 ms")


if __name__ == "__main__":
    main()
