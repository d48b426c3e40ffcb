"""The bundled MLP trained with pipeline parallelism on 2+ processes (torch.distributed.pipelining, gloo).

``python -m daydream.workloads.pipeline --schedule gpipe --microbatches 4``
starts ``--nproc`` processes itself (or joins the group that ``torchrun``
set up), splits :class:`daydream.workloads.mlp.MLP` into one stage per
process (``--split``: hidden blocks of stage 0, the rest evenly; the head on
the last stage), and trains with ``ScheduleGPipe``, ``Schedule1F1B`` or a
schedule read from a CSV of per-rank actions (``--schedule csv --csv FILE``,
run by ``_PipelineScheduleRuntime``, as :func:`optimizations._schedules.to_csv`
writes; the CSV may place several stages on a rank, e.g. a V: stages 0 and 3
on rank 0, 1 and 2 on rank 1, the model then cut into as many stages).  Each rank has the same synthetic data loader (rank 0 feeds the
inputs, the last rank the targets).  Rank 0 prints one JSON line with the
per-step times: ``{"schedule": ..., "step_ms": [...], "mean_ms": ..., "min_ms": ...}``
(over the steps after ``--warmup``).  Under ``DAYDREAM_TURNS`` (``daydream validate`` runs
a 1-stage job beside a traced baseline) the measured steps take turns with the other participants
(:mod:`daydream.collect.turns`), and the waits are left out of the steps.  ``--schedule none`` runs the whole model
in one process without the pipelining runtime, accumulating gradients over
the micro-batches (the reference for the runtime's own per-action cost).
``--schedule probe`` measures that cost in one process: ``ScheduleGPipe``
(one stage) and the plain loop, each at 1 and ``--microbatches``
micro-batches, interleaved step by step so that the machine's drift falls on
all four; it prints their median steps (``{"gpipe_1": ..., "gpipe_M": ...,
"plain_1": ..., "plain_M": ...}``, ms).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset

from ..calibrate_procs import free_port
from ..collect.runner import pin_rank
from ..collect.turns import Turns
from . import mlp
from .common import shut_down_distributed

__all__ = ["main", "stage_modules", "parse_args"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m daydream.workloads.pipeline", description=__doc__.split("\n")[0])
    p.add_argument("--schedule", choices=("gpipe", "1f1b", "csv", "none", "probe"), default="gpipe",
                   help="none: no pipelining runtime, one process accumulating gradients over the micro-batches")
    p.add_argument("--csv", help="per-rank action list (with --schedule csv)")
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--nproc", type=int, default=2, help="processes (= stages) to start when not under torchrun")
    p.add_argument("--split", type=int, default=0, help="hidden blocks on stage 0 (0: even split)")
    p.add_argument("--pin-cores", action="store_true", help="each started process on its own share of the cores")
    mlp.add_args(p)                      # the bundled MLP's model flags
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--dataset-batches", type=int, default=8)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=3, help="steps left out of the mean")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per process")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true",
                   help="accepted as by the other bundled workloads (this one prints only its summary line)")
    return p.parse_args(argv)


def stage_modules(args, world: int) -> list:
    """The MLP of ``daydream.workloads.mlp`` cut into ``world`` sequential stages (the head on the last)."""
    from .mlp import MLP

    torch.manual_seed(args.seed)
    model = MLP(args.in_features, args.hidden, args.layers, args.classes)
    blocks = list(model.blocks)
    first = args.split or max(1, round(len(blocks) / world))
    rest = blocks[first:]
    if world > 1 and len(rest) < world - 2:
        raise SystemExit(f"pipeline: {len(blocks)} blocks cannot fill {world} stages")
    cuts = [blocks[:first]]
    per = len(rest) / max(world - 1, 1)
    for s in range(world - 1):
        cuts.append(rest[round(s * per): round((s + 1) * per)])
    cuts[-1] = cuts[-1] + [model.head]
    return [nn.Sequential(*c) for c in cuts]


def _loss(out, y):
    return F.cross_entropy(out, y)


def _csv_stages(path: str) -> dict:
    """Stage -> rank of a per-rank action CSV (row r lists rank r's actions, e.g. ``0F0,1B0``)."""
    import re

    where = {}
    with open(path) as f:
        for r, line in enumerate(x for x in f if x.strip()):
            for a in line.split(","):
                m = re.match(r"\s*(\d+)[FBIW]", a)
                if m:
                    where.setdefault(int(m.group(1)), r)
    return where


def _make_schedule(args, stages, world):
    from torch.distributed.pipelining import Schedule1F1B, ScheduleGPipe
    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

    if args.schedule == "gpipe":
        return ScheduleGPipe(stages[0], args.microbatches, loss_fn=_loss)
    if args.schedule == "1f1b":
        return Schedule1F1B(stages[0], args.microbatches, loss_fn=_loss)
    sched = _PipelineScheduleRuntime(stages, args.microbatches, loss_fn=_loss)
    sched._load_csv(args.csv)
    return sched


def _batches(args):
    """Endless batches ``(x, y)`` of a synthetic data set, loaded as the bundled MLP's training
    loads them (:func:`daydream.workloads.common.make_loader`: a shuffled index per batch), in
    the same order on every rank (a seeded sampler): a baseline traced from that workload pays
    its data loading, and so does this job."""
    g = torch.Generator().manual_seed(args.seed)
    n = args.batch_size * args.dataset_batches
    data = TensorDataset(torch.randn(n, args.in_features, generator=g), torch.randint(0, args.classes, (n,), generator=g))
    loader = DataLoader(data, batch_size=None, sampler=BatchSampler(RandomSampler(data, generator=g), args.batch_size,
                                                                    drop_last=True))
    while True:
        yield from loader


def _plain(args) -> None:
    """``--schedule none``: the whole model in this process, gradients accumulated over micro-batches."""
    torch.set_num_threads(args.threads)
    (model,) = stage_modules(args, 1)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    batches = _batches(args)
    times, turns = [], Turns.from_env()
    for step in range(args.steps):
        _take_turn(turns, step, args.warmup)
        t0 = time.perf_counter()
        x, y = next(batches)
        opt.zero_grad(set_to_none=True)
        for xc, yc in zip(x.chunk(args.microbatches), y.chunk(args.microbatches)):
            _loss(model(xc), yc).backward()
        opt.step()
        times.append((time.perf_counter() - t0) * 1e3)
    _end_turns(turns, lambda: _summary(args, times, 1))


def _probe(args) -> None:
    """``--schedule probe``: the runtime's per-action cost, its configurations interleaved step by step."""
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    torch.set_num_threads(args.threads)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    (model,) = stage_modules(args, 1)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    g = torch.Generator().manual_seed(args.seed)
    x = torch.randn(args.batch_size, args.in_features, generator=g)
    y = torch.randint(0, args.classes, (args.batch_size,), generator=g)
    counts = {"1": 1, "M": args.microbatches}
    scheds = {k: ScheduleGPipe(PipelineStage(model, 0, 1, torch.device("cpu")), m, loss_fn=_loss)
              for k, m in counts.items()}

    def gpipe(k):
        scheds[k].step(x, target=y, losses=[])

    def plain(k):
        for xc, yc in zip(x.chunk(counts[k]), y.chunk(counts[k])):
            _loss(model(xc), yc).backward()

    runs = [(f"{name}_{k}", fn, k) for name, fn in (("gpipe", gpipe), ("plain", plain)) for k in counts]
    times = {key: [] for key, _, _ in runs}
    for step in range(args.steps):
        for key, fn, k in runs[step % len(runs):] + runs[:step % len(runs)]:
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            fn(k)
            opt.step()
            times[key].append((time.perf_counter() - t0) * 1e3)
    print(json.dumps({key: statistics.median(v[args.warmup:] or v) for key, v in times.items()}), flush=True)
    scheds.clear()
    shut_down_distributed()


def _summary(args, times, world) -> None:
    tail = times[args.warmup:] or times
    print(json.dumps({"schedule": args.schedule, "microbatches": args.microbatches, "world": world,
                      "step_ms": [round(t, 4) for t in times], "mean_ms": statistics.fmean(tail),
                      "min_ms": min(tail)}), flush=True)


def _worker(rank: int, world: int, args) -> None:
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage

    torch.set_num_threads(args.threads)
    if not dist.is_initialized():
        dist.init_process_group("gloo", rank=rank, world_size=world)
    if args.schedule == "csv" and not args.csv:
        raise SystemExit("pipeline: --schedule csv needs --csv FILE")
    where = _csv_stages(args.csv) if args.schedule == "csv" else {r: r for r in range(world)}
    n_stages = len(where)
    mods = stage_modules(args, n_stages)
    mine = sorted(s for s, r in where.items() if r == rank)
    stages = [PipelineStage(mods[s], s, n_stages, torch.device("cpu")) for s in mine]
    sched = _make_schedule(args, stages, world)
    opt = torch.optim.SGD([p for s in mine for p in mods[s].parameters()], lr=args.lr, momentum=args.momentum)
    first, last = 0 in mine, n_stages - 1 in mine
    batches = _batches(args)
    times = []
    turns = Turns.from_env()
    for step in range(args.steps):
        _take_turn(turns, step, args.warmup)       # a wait is not part of a step
        t0 = time.perf_counter()
        x, y = next(batches)
        opt.zero_grad(set_to_none=True)
        inputs = (x,) if first else ()
        if last:
            sched.step(*inputs, target=y, losses=[])
        else:
            sched.step(*inputs)
        opt.step()
        times.append((time.perf_counter() - t0) * 1e3)
    _end_turns(turns, lambda: rank == 0 and _summary(args, times, world))
    dist.barrier()
    del sched, stages, mods, opt
    shut_down_distributed()


def _take_turn(turns, step: int, warmup: int) -> None:
    """Before step ``step``: under ``DAYDREAM_TURNS`` (:mod:`daydream.collect.turns`, as
    ``daydream validate`` runs this job beside a traced baseline) join the turns at the first
    measured step, and later wait whenever the turn ends; the warm-up runs freely."""
    if turns is not None and (step == warmup or (step > warmup and turns.due())):
        turns.wait()


def _end_turns(turns, report) -> None:
    """Out of steps: idle until the other participants are too, ``report()``, leave the turns."""
    if turns is not None:
        turns.finish()
    report()
    if turns is not None:
        turns.leave()


def _spawned(rank, world, args, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if args.pin_cores:
        pin_rank(rank, world)
    _worker(rank, world, args)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.schedule == "none":
        _plain(args)
        return
    if args.schedule == "probe":
        _probe(args)
        return
    if "WORLD_SIZE" in os.environ and "RANK" in os.environ:
        if args.pin_cores:
            pin_rank(int(os.environ.get("LOCAL_RANK", os.environ["RANK"])),
                     int(os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"])))
        _worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
        return
    import torch.multiprocessing as mp

    mp.spawn(_spawned, args=(args.nproc, args, free_port()), nprocs=args.nproc, join=True)


if __name__ == "__main__":
    main(sys.argv[1:])
