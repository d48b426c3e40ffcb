"""K copies of the bundled MLP, each split into shards over D processes (Hydra).

Each process is one "device" (gloo, one intra-op thread) holding one shard
(a contiguous run of the MLP's layers) of every model.  Activations go
forward and gradients backward with ``torch.distributed`` ``isend``/``irecv``.
One *round* is a training step of every model: forward through the shards,
loss on the last, backward in reverse, each shard's SGD step after its
backward.  Two schedules are measured in alternating rounds:

* ``model-parallel``: one model at a time; each process runs its tasks in
  model order and waits for a transfer when it needs one;
* ``shard-parallel``: each process runs, whenever it is free, the ready task
  of the least advanced model (Hydra's longest-remaining-first for identical
  models; ties to the lower model index), so that the shards of different
  models overlap.  A task is ready when the receive it needs has arrived
  (waiter threads record arrivals: gloo's ``is_completed()`` stays false
  until ``wait()``); with none ready the process waits for the next arrival.

The makespan of a round is measured from the earliest process's start
(after a barrier) to the last process's end; the median over rounds is
printed as one JSON line.  ``--task-log DIR`` also writes, per process,
``DIR/hydra-rank{R}.json``: every task's and receive's time (see
:class:`TaskLog`), to set a prediction's schedule beside the real one.

Examples
--------
``python -m daydream.workloads.hydra --models 4 --devices 2 --shard0-layers 4 --threads 1``
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset

from ..calibrate_procs import free_port
from ..collect.runner import pin_rank
from . import mlp
from .common import shut_down_distributed
from .mlp import MLP

__all__ = ["SCHEDULES", "TaskLog", "Arrivals", "units_of", "task_priority", "main"]

SCHEDULES = ("model-parallel", "shard-parallel")
FORWARD, BACKWARD, STEP, DONE = range(4)
_TASK_NAMES = ("forward", "backward", "step")


class TaskLog:
    """Per process: ``[schedule, round, what, model, start_ns, end_ns]`` rows, ``what`` one of
    ``forward``, ``backward``, ``step`` (the task's run), parts of a task's run
    (``forward.prepare``: its input and ``zero_grad``; ``forward.compute``: the shard's
    layers and the loss; ``backward.compute``: the autograd call; the rest of the task posts
    its send), ``activation`` or ``gradient``
    (when the scheduler learnt that the model's receive had arrived: shard-parallel only;
    start = end) and ``round`` (model -1); times on the host's monotonic clock (``time.perf_counter_ns``), which all
    processes share."""

    def __init__(self):
        self.rows, self.schedule, self.round = [], "", 0

    def add(self, what: str, model: int, start_ns: int, end_ns: int) -> None:
        self.rows.append([self.schedule, self.round, what, model, start_ns, end_ns])

    def write(self, path) -> None:
        with open(path, "w") as f:
            json.dump({"columns": ["schedule", "round", "what", "model", "start_ns", "end_ns"],
                       "rows": self.rows}, f)


def units_of(model: MLP) -> list:
    """The MLP's layers (leaf modules) in forward order."""
    return [m for blk in model.blocks for m in blk] + [model.head]


def task_priority(state: int, shard: int, devices: int) -> int:
    """Position of a shard task in its model's chain (earlier = more work remaining).

    >>> [task_priority(s, 0, 2) for s in (FORWARD, BACKWARD, STEP)]
    [0, 6, 8]
    """
    if state == FORWARD:
        return 2 * shard
    if state == BACKWARD:
        return 2 * devices + 2 * (devices - 1 - shard)
    return 4 * devices


class _Shard:
    """One process's shard of every model, with its transfers."""

    def __init__(self, args, rank: int, world: int):
        import torch.distributed as dist

        self.dist, self.rank, self.world, self.args = dist, rank, world, args
        cuts = [0, *_cuts(args, world)]
        self.mods, self.opts, self.loaders, self.iters = [], [], [], []
        for k in range(args.models):
            torch.manual_seed(args.seed + k)
            model = MLP(args.in_features, args.hidden, args.layers, args.classes)
            units = units_of(model)
            with torch.no_grad():
                shapes = _shapes(units, args)
            mod = nn.Sequential(*units[cuts[rank]:cuts[rank + 1]])
            if rank > 0 and isinstance(mod[0], nn.ReLU):
                mod[0].inplace = False   # its input is the received leaf, which autograd may not overwrite
            self.mods.append(mod)
            self.opts.append(torch.optim.SGD(mod.parameters(), lr=args.lr, momentum=0.9))
            if rank == 0:
                data = torch.randn(args.batch_size * args.dataset_batches, args.in_features)
                sampler = BatchSampler(RandomSampler(TensorDataset(data)), args.batch_size, drop_last=True)
                self.loaders.append(DataLoader(TensorDataset(data), batch_size=None, sampler=sampler))
                self.iters.append(iter(self.loaders[-1]))
        self.log = TaskLog() if args.task_log else None
        self.in_shape = shapes[cuts[rank] - 1] if rank > 0 else None
        self.out_shape = shapes[cuts[rank + 1] - 1]
        self.labels = torch.Generator().manual_seed(args.seed)

    # --------------------------------------------------------------- tasks
    def _next_batch(self, k):
        try:
            return next(self.iters[k])[0]
        except StopIteration:
            self.iters[k] = iter(self.loaders[k])
            return next(self.iters[k])[0]

    def forward(self, k):
        t0 = time.perf_counter_ns()
        x = self._next_batch(k) if self.rank == 0 else self.act[k].requires_grad_()
        self.opts[k].zero_grad(set_to_none=True)
        t1 = time.perf_counter_ns()
        out = self.mods[k](x)
        if self.rank == self.world - 1:
            y = torch.randint(0, self.args.classes, (self.args.batch_size,), generator=self.labels)
            out = F.cross_entropy(out, y)
        self._part("forward.prepare", k, t0, t1)
        self._part("forward.compute", k, t1, time.perf_counter_ns())
        if self.rank < self.world - 1:
            self.sends.append(self.dist.isend(out.detach(), self.rank + 1, tag=k))
        self.saved[k] = (x, out)

    def backward(self, k):
        x, out = self.saved.pop(k)
        t0 = time.perf_counter_ns()
        if self.rank == self.world - 1:
            out.backward()
        else:
            out.backward(self.grad[k])
        self._part("backward.compute", k, t0, time.perf_counter_ns())
        if self.rank > 0:
            self.sends.append(self.dist.isend(x.grad, self.rank - 1, tag=self.args.models + k))

    def step(self, k):
        self.opts[k].step()

    def _part(self, what, k, start_ns, end_ns):
        """Log a part of a task (:class:`TaskLog`), where logging."""
        if self.log:
            self.log.add(what, k, start_ns, end_ns)

    # ------------------------------------------------------------ schedule
    def _waiting_on(self, k, state):
        """The receive a task needs (None if it needs none)."""
        if state == FORWARD and self.rank > 0:
            return self.act_req[k]
        if state == BACKWARD and self.rank < self.world - 1:
            return self.grad_req[k]
        return None

    def run_round(self, schedule: str) -> tuple:
        K, dist = self.args.models, self.dist
        self.sends, self.saved = [], {}
        self.act = [torch.empty(self.in_shape) for _ in range(K)] if self.rank > 0 else []
        self.grad = [torch.empty(self.out_shape) for _ in range(K)] if self.rank < self.world - 1 else []
        self.act_req = [dist.irecv(b, self.rank - 1, tag=k) for k, b in enumerate(self.act)]
        self.grad_req = [dist.irecv(b, self.rank + 1, tag=K + k) for k, b in enumerate(self.grad)]
        arrivals = None
        if schedule == "shard-parallel":
            n_act = len(self.act_req)     # receive i: model i's activation, then model i - n_act's gradient
            on_arrival = (lambda i: self.log.add("activation" if i < n_act else "gradient",
                                                 i if i < n_act else i - n_act, *[time.perf_counter_ns()] * 2)) \
                if self.log else None
            arrivals = Arrivals(self.act_req + self.grad_req, on_arrival)
        dist.barrier()
        t0 = time.perf_counter_ns()
        state = [FORWARD] * K
        run = {FORWARD: self.forward, BACKWARD: self.backward, STEP: self.step}

        def key(k):
            p = task_priority(state[k], self.rank, self.world)
            return (k, p) if schedule == "model-parallel" else (p, k)

        left = set(range(K))
        while left:
            order = sorted(left, key=key)
            if arrivals is None:   # one model at a time: wait for what the next task needs
                pick = order[0]
                if (w := self._waiting_on(pick, state[pick])) is not None:
                    w.wait()
            else:                  # the first task in priority order whose input is here
                pick = arrivals.first_ready(order, lambda k: self._waiting_on(k, state[k]))
            start = time.perf_counter_ns()
            run[state[pick]](pick)
            if self.log:
                self.log.add(_TASK_NAMES[state[pick]], pick, start, time.perf_counter_ns())
            state[pick] += 1
            if state[pick] == DONE:
                left.discard(pick)
        for s in self.sends:
            s.wait()
        return t0, time.perf_counter_ns()


class Arrivals:
    """Which posted receives have arrived, for a scheduler that must not block on one.

    gloo's receive work reports ``is_completed()`` only once ``wait()`` has
    returned, even after its data is in, so one waiter thread per receive
    blocks in ``wait()`` (which releases the GIL) and records the arrival.
    A gloo receive must be waited for once only: a second ``wait()`` waits
    for another message.
    """

    def __init__(self, requests, on_arrival=None):
        import threading

        self._cond = threading.Condition()
        self._arrived = set()
        self._on_arrival = on_arrival
        self._threads = [threading.Thread(target=self._wait, args=(r, i), daemon=True)
                         for i, r in enumerate(requests)]
        for t in self._threads:
            t.start()

    def _wait(self, req, i):
        req.wait()
        if self._on_arrival:
            self._on_arrival(i)
        with self._cond:
            self._arrived.add(id(req))
            self._cond.notify()

    def first_ready(self, order, needs):
        """The first of ``order`` whose receive (``needs(k)``, None for none) has arrived,
        waiting for the next arrival while none has."""
        with self._cond:
            while True:
                for k in order:
                    if (w := needs(k)) is None or id(w) in self._arrived:
                        return k
                self._cond.wait()


def _cuts(args, world):
    """Layer index where each shard after the first starts (equal split unless given)."""
    n = 2 * args.layers + 1
    if world == 1:
        return [n]
    if world == 2 and args.shard0_layers:
        if not 0 < args.shard0_layers < n:
            raise SystemExit(f"hydra: --shard0-layers must be between 1 and {n - 1}")
        return [args.shard0_layers, n]
    if world > n:
        raise SystemExit(f"hydra: {world} shards but the model has only {n} layers")
    return [round(n * (s + 1) / world) for s in range(world)]


def _shapes(units, args):
    x = torch.zeros(args.batch_size, args.in_features)
    out = []
    for u in units:
        x = u(x)
        out.append(tuple(x.shape))
    return out


def _worker(rank, args, port, world):
    import torch.distributed as dist

    if args.pin_cores:
        pin_rank(rank, world)
    torch.set_num_threads(args.threads)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    shard = _Shard(args, rank, world)
    times = {s: [] for s in SCHEDULES}
    for r in range(args.warmup + args.rounds):
        for sched in (SCHEDULES if r % 2 == 0 else SCHEDULES[::-1]):
            if shard.log:
                shard.log.schedule, shard.log.round = sched, r - args.warmup
            t0, t1 = shard.run_round(sched)
            if shard.log:
                shard.log.add("round", -1, t0, t1)
            span = torch.tensor([t0, t1], dtype=torch.int64)
            spans = [torch.zeros_like(span) for _ in range(world)]
            dist.all_gather(spans, span)
            if r >= args.warmup:
                times[sched].append((max(int(s[1]) for s in spans) - min(int(s[0]) for s in spans)) / 1e6)
    if rank == 0:
        print(json.dumps({"models": args.models, "devices": world,
                          **{f"{s}_ms": statistics.median(v) for s, v in times.items()},
                          **{f"{s}_rounds_ms": v for s, v in times.items()}}), flush=True)
    if shard.log:
        shard.log.write(os.path.join(args.task_log, f"hydra-rank{rank}.json"))
    del shard
    shut_down_distributed()


def main(argv=None):
    """Entry point: spawn one process per device, run the rounds, print the makespans."""
    p = argparse.ArgumentParser(prog="python -m daydream.workloads.hydra", description=__doc__.split("\n")[0])
    p.add_argument("--models", type=int, default=4, help="models trained together (K)")
    p.add_argument("--devices", type=int, default=2, help="processes, one shard of each model each (D)")
    p.add_argument("--shard0-layers", type=int, default=0, help="layers on the first of 2 shards (0: half)")
    mlp.add_args(p)                      # the bundled MLP's model flags
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--dataset-batches", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--rounds", type=int, default=6, help="measured rounds per schedule")
    p.add_argument("--warmup", type=int, default=2, help="unmeasured rounds per schedule")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per process")
    p.add_argument("--pin-cores", action="store_true", help="each process on its own share of the cores")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--task-log", metavar="DIR", default="",
                   help="write each process's task and arrival times to DIR/hydra-rank{R}.json (rounds < 0: warm-up)")
    args = p.parse_args(argv)
    if args.models < 1 or args.devices < 1:
        raise SystemExit("hydra: --models and --devices must be at least 1")
    _cuts(args, args.devices)
    if args.task_log:
        os.makedirs(args.task_log, exist_ok=True)
    import torch._dynamo  # noqa: F401  (optimizers import it lazily: once here, not in every child)
    import torch.multiprocessing as mp

    # fork where possible: the parent has run no torch op yet, and the children start at once
    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    mp.start_processes(_worker, args=(args, free_port(), args.devices), nprocs=args.devices, join=True,
                       start_method=method)


if __name__ == "__main__":
    main()
