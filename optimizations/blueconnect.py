"""``blueconnect``: hierarchical all-reduce (BlueConnect, Cho et al., SysML 2019).

Model
-----
An all-reduce of ``B`` bytes over ``n = p x q`` workers (``p`` GPUs per node,
``q`` nodes) becomes reduce-scatter inside each node, all-reduce of the
``B / p`` shard across nodes, all-gather inside each node::

    hier = 2 (p-1)/p B / bw_intra + 2 (p-1) lat        # reduce-scatter + all-gather
         + 2 (q-1)/q (B/p) / bw_inter + 2 (q-1) lat    # across nodes

The flat ring it replaces crosses the network on every hop once the job
spans nodes: ``flat = 2 (n-1)/n B / bw + 2 (n-1) lat`` with ``bw = bw_intra``
inside one node and ``bw_inter`` across nodes.  Each all-reduce keeps its
measured duration scaled by ``hier(B, n_target) / flat(B, n_traced)``, so the
trace supplies the absolute time and the model the change; with one GPU per
node (or every worker in one node) the ratio is exactly 1.  All-reduces that
``data-parallel`` inserted into a single-process trace were modelled as flat
rings of the target size: there ``n_traced = n_target = workers``.

Assumptions: ``bw_intra`` defaults to the device profile's all-reduce bus
bandwidth (NVLink figures for published GPUs), ``bw_inter`` to 100 Gb/s per
node (one EDR/HDR InfiniBand or 100 GbE NIC; set ``inter_gbps`` to yours),
latency per ring step to the profile's collective latency.  Bandwidth-optimal
rings, no overlap between the three stages, no contention with other
traffic; NCCL's own tree algorithms are not modelled.
"""
from __future__ import annotations

import math

import numpy as np

from daydream.primitives import set_duration

from ._layers import require_allreduce, world_size
from .base import NotApplicable, Optimization, Param

__all__ = ["BlueConnect", "OPTIMIZATION", "ring_ns", "hierarchical_ns", "DEFAULT_INTER_GBPS"]

#: Network bandwidth per node when none is given: a 100 Gb/s NIC (EDR InfiniBand / 100 GbE),
#: the configuration of the BlueConnect paper's multi-node experiments.
DEFAULT_INTER_GBPS = 100.0


def ring_ns(nbytes: float, n: int, bw_bytes_per_s: float, lat_ns: float) -> float:
    """Ring all-reduce over ``n`` workers."""
    if n <= 1:
        return 0.0
    return 2 * (n - 1) / n * nbytes / bw_bytes_per_s * 1e9 + 2 * (n - 1) * lat_ns


def flat_ns(nbytes, n, per_node, intra, inter, lat_ns) -> float:
    """Flat ring: the network bounds every hop once the job spans more than one node."""
    return ring_ns(nbytes, n, intra if n <= per_node else inter, lat_ns)


def hierarchical_ns(nbytes, n, per_node, intra, inter, lat_ns) -> float:
    """Reduce-scatter in node + all-reduce across nodes + all-gather in node."""
    p = max(1, min(per_node, n))
    q = math.ceil(n / p)
    in_node = ring_ns(nbytes, p, intra, lat_ns)           # = reduce-scatter + all-gather
    return in_node + ring_ns(nbytes / p, q, inter, lat_ns)


class BlueConnect(Optimization):
    name = "blueconnect"
    summary = "hierarchical all-reduce: reduce-scatter in node, all-reduce across nodes, all-gather"
    params = (Param("gpus_per_node", 8, "GPUs per node sharing the fast intra-node link", int),
              Param("workers", 0, "workers to predict for (0: as traced)", int),
              Param("intra_gbs", 0.0, "intra-node all-reduce bandwidth, GB/s (0: the device profile's)"),
              Param("inter_gbps", DEFAULT_INTER_GBPS, "network bandwidth per node, Gb/s"),
              Param("latency_us", -1.0, "latency per ring step, us (-1: the device profile's)"))
    assumptions = __doc__

    def apply(self, ctx):
        g = ctx.graph
        ar = require_allreduce(g)
        n_traced = world_size(ctx)
        n = self.workers or n_traced
        if n <= 1:
            raise NotApplicable("blueconnect needs the number of workers and the trace is single-process; pass "
                                "workers=N (the workers given to data-parallel)")
        base_n = n_traced if n_traced > 1 else n   # inserted all-reduces were modelled at the target size
        intra, inter, lat = self._figures(ctx)
        T = g.tasks
        nbytes = T["bytes"][ar].astype(float)
        known = nbytes > 0
        if not known.any():
            raise NotApplicable("the all-reduces carry no byte counts; record with a profiler that "
                                "stores collective sizes (PyTorch >= 1.13 Kineto, record_shapes=True)")
        args = (self.gpus_per_node, intra, inter, lat)
        ratio = np.array([hierarchical_ns(b, n, *args) / flat_ns(b, base_n, *args) if b > 0 else 1.0
                          for b in nbytes])
        new = T["dur_ns"][ar] * ratio
        set_duration(g, ar, np.rint(new).astype(np.int64))
        for t, r in zip(ar.tolist(), ratio.tolist()):
            gid = int(T["group"][t])
            if gid >= 0:
                g.group_transfer_ns[gid] = int(round(g.group_transfer_ns[gid] * r))
        ctx.note(f"blueconnect: {int(known.sum())} all-reduces over {n} workers ({self.gpus_per_node}/node), "
                 f"intra {intra / 1e9:.0f} GB/s, inter {inter * 8 / 1e9:.0f} Gb/s; "
                 f"all-reduce time x{np.nanmean(ratio[known]):.3f} vs the trace on average, hierarchical/flat "
                 f"ring at {n} workers x{np.mean([hierarchical_ns(b, n, *args) / (flat_ns(b, n, *args) or math.nan) for b in nbytes[known]]):.3f}"
                 + (f" ({int((~known).sum())} without byte counts unchanged)" if (~known).any() else ""))

    def _figures(self, ctx):
        dev = ctx.device
        bw, lat_ns = next(iter(dev.collective.values())) if dev.collective else (0.0, 0.0)
        intra = self.intra_gbs * 1e9 if self.intra_gbs > 0 else bw
        if intra <= 0:
            raise NotApplicable(f"device profile {dev.name!r} has no all-reduce bandwidth; pass intra_gbs=GB/s "
                                "or run `daydream calibrate`")
        lat = self.latency_us * 1e3 if self.latency_us >= 0 else lat_ns
        return intra, self.inter_gbps * 1e9 / 8, lat


OPTIMIZATION = BlueConnect
