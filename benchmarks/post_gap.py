"""Work resumed after a gap: a shard's backward and optimizer step right after its forward, and
after the thread slept or did other work for a while (as a pipeline or Hydra rank waits for its
peer between its tasks).

One process pinned to core 0, one intra-op thread, idle CPUs polling (as ``daydream validate``
measures): a shard of ``--blocks`` Linear(``--hidden``)+ReLU blocks at batch ``--batch-size``;
each try runs the forward, then the gap (none, a sleep of G ms, or G ms of another shard's
forward), then times the backward and the momentum-SGD step. Gaps are shuffled per try; the
median per gap is printed.

Usage::

    python benchmarks/post_gap.py
    python benchmarks/post_gap.py --gaps 0,1,3.5,8 --tries 80 --hidden 512 --blocks 2
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import time

__all__ = ["main"]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--gaps", default="0,1,3.5,8", help="gaps in ms, comma-separated")
    p.add_argument("--tries", type=int, default=80)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    args = p.parse_args(argv)

    import torch
    from torch import nn

    from daydream.cpuidle import polling_idle

    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {0})
    torch.set_num_threads(1)
    h = args.hidden

    def shard():
        return nn.Sequential(*[m for _ in range(args.blocks) for m in (nn.Linear(h, h), nn.ReLU())])

    mine, other = shard(), shard()
    opt = torch.optim.SGD(mine.parameters(), lr=1e-3, momentum=0.9)
    x, grad = torch.randn(args.batch_size, h), torch.randn(args.batch_size, h)

    def busy(ms):
        end = time.perf_counter() + ms / 1e3
        with torch.no_grad():
            while time.perf_counter() < end:
                other(x)

    def one(mode, gap_ms):
        out = mine(x)
        if mode == "sleep":
            time.sleep(gap_ms / 1e3)
        elif mode == "other":
            busy(gap_ms)
        t0 = time.perf_counter_ns()
        out.backward(grad)
        t1 = time.perf_counter_ns()
        opt.step()
        opt.zero_grad()
        return (t1 - t0) / 1e6, (time.perf_counter_ns() - t1) / 1e6

    gaps = [float(g) for g in args.gaps.split(",")]
    modes = [("none", 0.0)] + [(m, g) for g in gaps if g > 0 for m in ("sleep", "other")]
    with polling_idle() as held:
        for _ in range(30):
            one("none", 0.0)
        got = {m: [] for m in modes}
        for _ in range(args.tries):
            for m in random.sample(modes, len(modes)):
                got[m].append(one(*m))
    print(f"shard of {args.blocks} x Linear({h}), batch {args.batch_size}; idle CPUs polling: {held}")
    b0 = statistics.median(v[0] for v in got[modes[0]])
    s0 = statistics.median(v[1] for v in got[modes[0]])
    for m in modes:
        b = statistics.median(v[0] for v in got[m])
        s = statistics.median(v[1] for v in got[m])
        print(f"{m[0]:>5} {m[1]:4.1f} ms before: backward {b:.3f} ms ({b / b0:.2f}x), step {s:.3f} ms ({s / s0:.2f}x)")


if __name__ == "__main__":
    main()
