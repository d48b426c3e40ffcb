"""``dataloader``: load batches in N DataLoader worker processes instead of the training loop.

Model
-----
The DataLoader tasks of each iteration (``enumerate(DataLoader)#...`` ranges,
phase ``dataloader``) leave the training thread.  Loading the batch moves to
one of ``workers`` new worker lanes, lasting what it took in the trace (its
ops and the Python time between them); worker ``k mod N`` loads batch ``k``.
The training thread instead *fetches* the batch: a task lasting the
calibrated hand-over cost (queue, unpickling, shared memory;
``daydream calibrate`` measures it on this machine) for the batch's bytes,
which waits for the batch's load to end.  Workers start staggered by ``L/N``
(steady state) and may run at most ``prefetch_factor * N`` batches ahead.
The simulator then resolves whether the loop waits (loader bound) or not.

Assumptions: workers have cores of their own (no contention with the
training process); a worker loads a batch as fast as the training thread
did; the batch handed over is what the model's root modules took as input
(``input_shapes`` of the module table, 4 bytes per element), else the
largest input of the loading ops in the trace (a collate's samples; an
index into an in-memory dataset would count the whole dataset);
steady state: the start of an epoch (a new iterator, the workers' queues
empty until they catch up) is not modelled -- with a dataset of 8 batches
the bundled MLP waited 2.5-4.6 ms per step in ``__next__``, 1.5 ms with 64.
"""
from __future__ import annotations

import numpy as np

from daydream.graph import EdgeKind
from daydream.model import Lane, LaneKind, Phase
from daydream.primitives import insert, remove, select

from ._common import by_rank_iteration
from .base import NotApplicable, Optimization, Param

__all__ = ["DataLoaderWorkers", "OPTIMIZATION", "batch_bytes"]


def batch_bytes(modules) -> int:
    """Bytes of the batch the model takes: root modules' ``input_shapes`` at 4 bytes an element (0 if unknown).

    >>> batch_bytes([{"path": "MLP", "input_shapes": [[64, 256]]}, {"path": "MLP.fc"}])
    65536
    """
    return sum(4 * int(np.prod(shape)) for m in modules for shape in (m.get("input_shapes") or []))


class DataLoaderWorkers(Optimization):
    name = "dataloader"
    summary = "DataLoader worker processes (num_workers) hide input loading"
    params = (Param("workers", 4, "DataLoader num_workers", int),
              Param("prefetch_factor", 2, "batches loaded in advance per worker", int))
    assumptions = __doc__

    def apply(self, ctx):
        if self.workers < 1:
            raise NotApplicable("workers must be at least 1 (0 is the traced situation)")
        g, dev = ctx.graph, ctx.device
        loads = select(g, phase="dataloader", lane="cpu_thread")
        loads = loads[g.tasks["iteration"][loads] >= 0]
        if not len(loads):
            raise NotApplicable("the trace has no DataLoader work inside its iterations "
                                "(enumerate(DataLoader)#... ranges); iterate a torch DataLoader in the traced loop")
        if not dev.loader_fetch[0] and not dev.loader_fetch[1]:
            ctx.note("dataloader: the device profile has no hand-over cost; run `daydream calibrate`")
        groups = by_rank_iteration(g, loads)
        batch = batch_bytes(ctx.meta().get("modules") or [])
        for rank in sorted({r for r, _ in groups}):
            self._rank(g, dev, rank, {it: ts for (r, it), ts in groups.items() if r == rank}, batch)
        remove(g, loads)
        ctx.note(f"dataloader: {self.workers} workers, prefetch {self.prefetch_factor}")

    def _rank(self, g, dev, rank, per_iter, batch: int = 0):
        T = g.tasks
        n = self.workers
        its = sorted(per_iter)
        cost = {it: int(T["dur_ns"][ts].sum() + T["gap_ns"][ts[1:]].sum()) for it, ts in per_iter.items()}
        mean_load = float(np.mean(list(cost.values())))
        lanes = [g.add_lane(Lane(rank, LaneKind.CPU_THREAD, f"rank {rank} DataLoader", f"worker {w}",
                                 f"DataLoader worker {w}")) for w in range(n)]
        first_start = int(T["traced_start_ns"][per_iter[its[0]][0]])
        fetches = []
        for k, it in enumerate(its):
            ts = per_iter[it]
            lane = lanes[k % n]
            gap = max(first_start - int(mean_load) + int((k + 1) * mean_load / n), 0) if k < n else 0
            load = insert(g, lane, dur_ns=cost[it], name="DataLoader worker: load batch", gap_ns=gap,
                          phase=Phase.DATALOADER, iteration=it)
            nbytes = float(batch or T["bytes"][ts].max())
            fetch = insert(g, int(T["lane"][ts[0]]), dur_ns=int(dev.loader_fetch_ns(nbytes)),
                           name="DataLoader: fetch batch from worker", before=ts[0],
                           gap_ns=int(T["gap_ns"][ts[0]]), phase=Phase.DATALOADER, iteration=it, deps=[load])
            ahead = k - self.prefetch_factor * n
            if ahead >= 0:
                g.add_edges(fetches[ahead], load, EdgeKind.DATA)
            fetches.append(fetch)


OPTIMIZATION = DataLoaderWorkers
