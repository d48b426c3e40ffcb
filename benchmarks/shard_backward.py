"""The validation MLP's backward in one call against split at Hydra's cut into two calls, one process.

The Hydra runtime runs each shard's backward as its own ``backward()`` call
(``daydream.workloads.hydra``: the last shard from its loss, the first from the
gradient received for its output, a detached leaf between them), while
``hydra``'s shard costs come from a 1-process trace whose backward is one call.
Here both run in one process on one core, untimed by any profiler, in
alternating iterations (the runtime's SGD with momentum, ``zero_grad`` to
``None``): the whole model's forward and backward, and each shard's forward
and backward at the cut.  Runs under validate's malloc settings (re-executing
itself with them where they are missing: without them each fresh 1 MiB gradient
is a new mapping, page faults in every backward).

    python benchmarks/shard_backward.py --iterations 300 --cut 4 --core 1
"""
from __future__ import annotations

import argparse
import statistics
import time

from _bench import split_mlp, with_steady_malloc  # noqa: E402

__all__ = ["main"]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--cut", type=int, default=4, help="layers (leaf modules) on the first shard, as --shard0-layers")
    ap.add_argument("--core", type=int, default=1)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--polling", action="store_true",
                    help="idle CPUs poll meanwhile (daydream.cpuidle.polling_idle), as validate runs its jobs")
    args = ap.parse_args(argv)
    with_steady_malloc()

    model, first, second, opt, data, y = split_mlp(args.cut, args.core, args.hidden, args.batch_size)
    got = {k: [] for k in ("whole forward", "whole backward", "shard 0 forward", "shard 1 forward + loss",
                           "shard 1 backward", "shard 0 backward")}

    def stamp(key, t0):
        t = time.perf_counter_ns()
        got[key].append(t - t0)
        return t

    from daydream.cpuidle import polling_idle

    with polling_idle(args.polling) as held:
        _iterate(args.iterations, model, first, second, opt, data, y, stamp)
    skip = args.iterations // 10
    med = {k: statistics.median(v[skip:]) / 1e6 for k, v in got.items()}
    print(f"idle CPUs polling: {held}")
    for k, v in med.items():
        print(f"{k:24s} {v:.3f} ms (median of {len(got[k]) - skip})")
    split = med["shard 1 backward"] + med["shard 0 backward"]
    print(f"backward split at the cut: {split:.3f} ms against {med['whole backward']:.3f} in one call "
          f"(x{split / med['whole backward']:.3f})")


def _iterate(iterations, model, first, second, opt, data, y, stamp) -> None:
    import torch.nn.functional as F

    for it in range(iterations):
        opt.zero_grad(set_to_none=True)
        t = time.perf_counter_ns()
        if it % 2 == 0:
            loss = F.cross_entropy(model(data), y)
            t = stamp("whole forward", t)
            loss.backward()
            stamp("whole backward", t)
        else:
            a = first(data)
            x = a.detach().requires_grad_()
            t = stamp("shard 0 forward", t)
            loss = F.cross_entropy(second(x), y)
            t = stamp("shard 1 forward + loss", t)
            loss.backward()
            t = stamp("shard 1 backward", t)
            a.backward(x.grad)
            stamp("shard 0 backward", t)
        opt.step()


if __name__ == "__main__":
    main()
