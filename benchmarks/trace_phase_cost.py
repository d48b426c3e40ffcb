"""What tracing adds to each part of a training step, part by part: traced against untraced, paired.

``hydra`` and ``pipeline`` cut a traced step into shards and phases and put the parts on
different devices, so a tracer that slows one part more than another (the layer markers run in
the forward only) would shift work between devices in the prediction.  This times the parts
of the validation's MLP step (``--hidden 512 --batch-size 64``, one thread, split at Hydra's cut
as the Hydra runtime splits it: shard 0's forward, shard 1's forward and loss, shard 1's
backward, shard 0's backward, the SGD step) with ``perf_counter_ns``, in blocks of ``--block``
steps under each condition in turn (the order reversed every round):

* ``plain``: untraced;
* ``kineto``: inside a torch.profiler session recording CPU ops with shapes (as ``daydream
  trace`` records);
* ``kineto+markers``: the same with daydream's layer markers enabled (``daydream trace``'s
  recording).

Per part and traced condition it prints the median over rounds of the block's median part time
over the plain block's of the same round (a shared machine's drift falls on both), and the plain
part's median time.  One process, pinned to ``--core``, under validate's malloc settings
(Kineto's own log lines go to stderr).

Usage::

    python benchmarks/trace_phase_cost.py --rounds 30
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import time

from _bench import split_mlp, with_steady_malloc

__all__ = ["main", "PARTS"]

#: The parts of a step, in the order they run.
PARTS = ("shard 0 forward", "shard 1 forward + loss", "shard 1 backward", "shard 0 backward", "step")


def _conditions():
    from torch.profiler import ProfilerActivity, profile

    from daydream.collect.hooks import LayerMarkers

    @contextlib.contextmanager
    def traced(with_markers: bool):
        m = LayerMarkers()
        if with_markers:
            m.install()
            m.enabled = True
        try:
            with profile(activities=[ProfilerActivity.CPU], record_shapes=True):
                yield
        finally:
            if with_markers:
                m.enabled = False
                m.remove()

    return {"plain": contextlib.nullcontext, "kineto": lambda: traced(False), "kineto+markers": lambda: traced(True)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--block", type=int, default=8, help="steps per condition per round (the first left out)")
    ap.add_argument("--cut", type=int, default=4, help="layers (leaf modules) on the first shard, as --shard0-layers")
    ap.add_argument("--core", type=int, default=1)
    args = ap.parse_args(argv)
    with_steady_malloc()

    import torch.nn.functional as F

    _, first, second, opt, data, y = split_mlp(args.cut, args.core)

    def step(got):
        stamps = [time.perf_counter_ns()]
        opt.zero_grad(set_to_none=True)
        a = first(data)
        x = a.detach().requires_grad_()
        stamps.append(time.perf_counter_ns())
        loss = F.cross_entropy(second(x), y)
        stamps.append(time.perf_counter_ns())
        loss.backward()
        stamps.append(time.perf_counter_ns())
        a.backward(x.grad)
        stamps.append(time.perf_counter_ns())
        opt.step()
        stamps.append(time.perf_counter_ns())
        for part, t0, t1 in zip(PARTS, stamps, stamps[1:]):
            got[part].append(t1 - t0)

    def block(make) -> dict:
        got = {p: [] for p in PARTS}
        with make():
            for _ in range(args.block + 1):
                step(got)
        return {p: statistics.median(v[1:]) for p, v in got.items()}

    conds = _conditions()
    for _ in range(3):
        block(conds["plain"])
    ratios = {(c, p): [] for c in conds if c != "plain" for p in PARTS}
    plain_ns = {p: [] for p in PARTS}
    for r in range(args.rounds):
        order = list(conds) if r % 2 == 0 else list(conds)[::-1]
        got = {c: block(conds[c]) for c in order}
        for p in PARTS:
            plain_ns[p].append(got["plain"][p])
            for c in conds:
                if c != "plain":
                    ratios[(c, p)].append(got[c][p] / got["plain"][p])
    print(f"{'part':24s} {'plain ms':>9s} " + " ".join(f"{c:>15s}" for c in conds if c != "plain"))
    for p in PARTS:
        print(f"{p:24s} {statistics.median(plain_ns[p]) / 1e6:9.3f} "
              + " ".join(f"{'x%.3f' % statistics.median(ratios[(c, p)]):>15s}" for c in conds if c != "plain"))


if __name__ == "__main__":
    main()
