"""The Hydra runtime's shard tasks beside each other, without any transfer: their co-run rate.

Two processes pinned as ``daydream.workloads.hydra --pin-cores`` pins them, each holding its
shard of K copies of the validation MLP (the same modules, optimizers and data as the
runtime), run a shard-parallel-like task stream per round (every model's forward, then every
model's backward and step) with no transfer and no other thread: rank 1's forwards start from
a fixed activation, rank 0's backwards from a fixed gradient.  Rounds alternate between each
rank alone (the other waits on a barrier) and both at once.  Printed per rank and task kind:
the median duration alone, beside, and their ratio, next to the real runtime's (from
``benchmarks/hydra_timeline.py``) and the prediction's ``corun`` rate: where these tasks keep
their speed beside each other and the runtime's do not, the runtime's own activity
(transfers, waiter threads) is what slows them.

Usage (the validation's sizes)::

    python benchmarks/hydra_corun_probe.py --models 2 --rounds 12
"""
from __future__ import annotations

import argparse
import statistics
import time

__all__ = ["main"]

_KINDS = ("forward", "backward", "step")
_MODES = ("alone", "beside")


def _worker(rank, args, barrier, q):
    import torch
    import torch.nn.functional as F
    from torch import nn

    from daydream.collect.runner import pin_rank
    from daydream.validate import WORKLOAD_ARGS
    from daydream.workloads import hydra, mlp
    from daydream.workloads.mlp import MLP

    p = argparse.ArgumentParser()
    mlp.add_args(p)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--dataset-batches", type=int, default=8)
    m = p.parse_args(list(WORKLOAD_ARGS["mlp"]))
    pin_rank(rank, 2)
    torch.set_num_threads(m.threads)
    n_layers = 2 * m.layers + 1
    cuts = [0, args.shard0_layers, n_layers]
    mods, opts = [], []
    for k in range(args.models):
        torch.manual_seed(k)
        units = hydra.units_of(MLP(m.in_features, m.hidden, m.layers, m.classes))
        mod = nn.Sequential(*units[cuts[rank]:cuts[rank + 1]])
        if rank > 0 and isinstance(mod[0], nn.ReLU):
            mod[0].inplace = False
        mods.append(mod)
        opts.append(torch.optim.SGD(mod.parameters(), lr=1e-3, momentum=0.9))
    x0 = torch.randn(m.batch_size, m.in_features)
    with torch.no_grad():
        act = nn.Sequential(*hydra.units_of(MLP(m.in_features, m.hidden, m.layers, m.classes))[:cuts[1]])(x0)
    grad = torch.randn_like(act)
    labels = torch.randint(0, m.classes, (m.batch_size,))
    saved = {}

    def forward(k):
        x = x0.clone() if rank == 0 else act.clone().requires_grad_()
        opts[k].zero_grad(set_to_none=True)
        out = mods[k](x)
        saved[k] = F.cross_entropy(out, labels) if rank == 1 else out

    def backward(k):
        out = saved.pop(k)
        out.backward() if rank == 1 else out.backward(grad)

    def step(k):
        opts[k].step()

    tasks = {"forward": forward, "backward": backward, "step": step}
    times = {(mode, kind): [] for mode in _MODES for kind in _KINDS}

    def stream(keep):
        for kind, ks in (("forward", range(args.models)), ("backward/step", range(args.models))):
            for k in ks:
                for name in kind.split("/"):
                    t = time.perf_counter_ns()
                    tasks[name](k)
                    if keep is not None:
                        times[(keep, name)].append(time.perf_counter_ns() - t)

    for _ in range(2):
        stream(None)
    for r in range(args.rounds):
        plan = ["alone0", "alone1", "beside"]
        plan = plan[r % 3:] + plan[:r % 3]
        for mode in plan:
            barrier.wait()
            if mode == "beside":
                stream("beside")
            elif mode == f"alone{rank}":
                stream("alone")
            barrier.wait()
    q.put((rank, {key: statistics.median(v) for key, v in times.items()}))


def main(argv=None) -> None:
    import multiprocessing as mp
    import os

    from daydream.validate import run_env

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", type=int, default=2)
    p.add_argument("--shard0-layers", type=int, default=4, help="layers on the first shard (the validation's split)")
    p.add_argument("--rounds", type=int, default=12, help="rounds of each mode")
    args = p.parse_args(argv)
    os.environ.update(run_env())      # the validation's malloc settings, inherited by the children
    ctx = mp.get_context("spawn")
    barrier, q = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, args, barrier, q)) for r in (0, 1)]
    for pr in procs:
        pr.start()
    results = sorted(q.get() for _ in procs)
    for pr in procs:
        pr.join()
    print(f"{args.models} models, {args.rounds} rounds of each mode: median task ms alone / beside (ratio)")
    for rank, med in results:
        cells = [f"{kind} {med[('alone', kind)] / 1e6:.3f} / {med[('beside', kind)] / 1e6:.3f} "
                 f"(x{med[('alone', kind)] / med[('beside', kind)]:.3f})" for kind in _KINDS]
        print(f"rank {rank}: " + "; ".join(cells))


if __name__ == "__main__":
    main()
