"""How often a gloo collective's profiler range ends after the training thread went on.

Two pinned gloo processes; in each round a profiler session starts, rank r
all-reduces a small tensor and waits on the work's *future* (as DDP does),
opens a marker range at once (the point where a traced run's iteration
boundary could stop the session), optionally settles
(:func:`daydream.collect.settle.settle_threads`) and opens a second marker,
then stops the session.  Printed per rank: rounds in which the
``gloo:all_reduce`` range ended after the first marker (the worker thread
closed it while the training thread was running again: a stop at that
point races the late end), and after the second (what is left once
settled).

Usage::

    python benchmarks/late_range_end.py --rounds 300
"""
from __future__ import annotations

import argparse
import os

__all__ = ["main"]


def _worker(rank: int, port: int, rounds: int, q) -> None:
    import torch
    import torch.distributed as dist

    from daydream.collect.settle import settle_threads

    os.sched_setaffinity(0, {rank % os.cpu_count()})
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    t = torch.ones(64)
    counts = {"after_wait": 0, "after_settle": 0, "rounds": 0, "unsettled": 0}
    for _ in range(rounds):
        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        prof.start()
        dist.all_reduce(t, async_op=True).get_future().wait()
        with torch.profiler.record_function("after_wait"):
            pass
        counts["unsettled"] += not settle_threads()
        with torch.profiler.record_function("after_settle"):
            pass
        prof.stop()
        ev = {e.name: e for e in prof.events()}
        g = ev.get("gloo:all_reduce")
        if g is None or "after_wait" not in ev:
            continue
        counts["rounds"] += 1
        counts["after_wait"] += g.time_range.end > ev["after_wait"].time_range.start
        counts["after_settle"] += g.time_range.end > ev["after_settle"].time_range.start
    dist.destroy_process_group()
    q.put((rank, counts))


def main(argv=None) -> None:
    import multiprocessing as mp

    from daydream.calibrate_procs import free_port

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=300, help="profiler sessions per rank")
    args = p.parse_args(argv)
    port, ctx = free_port(), mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, port, args.rounds, q)) for r in (0, 1)]
    for pr in procs:
        pr.start()
    results = sorted(q.get() for _ in procs)
    for pr in procs:
        pr.join()
    for rank, c in results:
        print(f"rank {rank}: range ended after the training thread went on in {c['after_wait']} of {c['rounds']} "
              f"rounds; after settling in {c['after_settle']} (settling timed out in {c['unsettled']})")


if __name__ == "__main__":
    main()
