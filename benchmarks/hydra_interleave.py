"""Task times of one Hydra shard when K models take turns on a core, against one model alone.

``hydra`` takes each shard task's time from a one-model trace.  On a device that runs the
shards of K models in turn, a task finds its model's weights, gradients, optimizer state and
saved activations pushed out of the caches by the other models' tasks since its last one.
This benchmark measures that in one process pinned to one core (no second process, no
transfers): the last shard of K bundled MLPs (the layers after ``--shard0-layers``, loss
included) run forward, backward and SGD step

* ``single``: one model, ``F B S`` over and over;
* ``interleaved``: the order the real shard-parallel runtime's last process runs with K models
  (``benchmarks/hydra_timeline.py``): ``F0 B0 F1 .. F(K-1) B1 .. B(K-1) S0 .. S(K-1)``,

alternating blocks of each, and prints per task kind the median time in each and their ratio.

Usage (the validation's sizes)::

    python benchmarks/hydra_interleave.py --models 4 --hidden 512 --layers 4 --shard0-layers 4
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

__all__ = ["main"]


def _shards(args):
    import torch
    from torch import nn

    from daydream.workloads.hydra import units_of
    from daydream.workloads.mlp import MLP

    mods, opts = [], []
    for k in range(args.models):
        torch.manual_seed(k)
        mod = nn.Sequential(*units_of(MLP(args.in_features, args.hidden, args.layers, args.classes))
                            [args.shard0_layers:])
        if isinstance(mod[0], nn.ReLU):
            mod[0].inplace = False      # its input is a leaf, as the received activation is
        mods.append(mod)
        opts.append(torch.optim.SGD(mod.parameters(), lr=0.01, momentum=0.9))
    return mods, opts


def _tasks(args):
    import torch
    import torch.nn.functional as F

    mods, opts = _shards(args)
    width = mods[0][0].in_features if hasattr(mods[0][0], "in_features") else args.hidden
    xs = [torch.randn(args.batch_size, width) for _ in mods]
    y = torch.randint(0, args.classes, (args.batch_size,))
    saved = {}

    def forward(k):
        opts[k].zero_grad(set_to_none=True)
        saved[k] = F.cross_entropy(mods[k](xs[k].clone().requires_grad_()), y)

    return {"F": forward, "B": lambda k: saved.pop(k).backward(), "S": lambda k: opts[k].step()}


def _orders(models: int) -> dict:
    rest = range(1, models)
    return {"single": [("F", 0), ("B", 0), ("S", 0)],
            "interleaved": [("F", 0), ("B", 0), *[("F", k) for k in rest], *[("B", k) for k in rest],
                            *[("S", k) for k in range(models)]]}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", type=int, default=4)
    p.add_argument("--in-features", type=int, default=512)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--shard0-layers", type=int, default=4, help="units (Linear, ReLU, head) on the first shard")
    p.add_argument("--blocks", type=int, default=4, help="alternating blocks of each order")
    p.add_argument("--rounds", type=int, default=40, help="rounds of an order per block (after 5 warm-up)")
    p.add_argument("--core", type=int, default=1)
    args = p.parse_args(argv)
    import torch

    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.core})
    torch.set_num_threads(1)
    run = _tasks(args)
    times = {}
    for b in range(args.blocks):
        for name, order in _orders(args.models).items():
            for r in range(5 + args.rounds):
                for what, k in order:
                    t0 = time.perf_counter()
                    run[what](k)
                    if r >= 5:
                        times.setdefault((name, what), []).append((time.perf_counter() - t0) * 1e3)
    out = {}
    for what in "FBS":
        one, many = (statistics.median(times[(n, what)]) for n in ("single", "interleaved"))
        out[what] = (one, many)
        print(f"{what}: single {one:.3f} ms, interleaved x{args.models} {many:.3f} ms, ratio {many / one:.2f}")
    return out


if __name__ == "__main__":
    main()
