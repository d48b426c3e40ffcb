"""Large synthetic dependency graphs shaped like data-parallel training traces.

Per rank: one CPU thread issuing runtime calls, a compute stream and a
communication stream.  Every CPU call launches one kernel (launch edge from the
call's start); one kernel in ``comm_every`` is an all-reduce on the
communication stream, joined across ranks into a collective group; one call
in ``sync_every`` is a ``cudaStreamSynchronize`` of the compute stream
(dynamic wait); the compute stream waits for the communication stream every
``wait_every`` kernels (cross-stream edge).  Built vectorised, straight into
the final columns, so generating 10M tasks takes seconds.
"""
from __future__ import annotations

import numpy as np

from daydream.graph.graph import Anchor, DependencyGraph, EdgeKind, WaitKind
from daydream.model import EventKind, Lane, LaneKind

__all__ = ["synthetic_graph"]


def _rank_tasks(n_calls, rng, comm_every, sync_every):
    is_sync = (np.arange(n_calls) % sync_every) == sync_every - 1
    launches = ~is_sync
    n_k = int(launches.sum())
    is_comm = (np.arange(n_k) % comm_every) == comm_every - 1
    return is_sync, launches, n_k, is_comm


def synthetic_graph(n_tasks: int, ranks: int = 8, comm_every: int = 50, sync_every: int = 400,
                    wait_every: int = 100, seed: int = 0) -> DependencyGraph:
    """A graph of about ``n_tasks`` tasks over ``ranks`` ranks (see module doc)."""
    rng = np.random.default_rng(seed)
    g = DependencyGraph()
    per_rank = max(4, n_tasks // ranks)
    n_calls = per_rank // 2 + per_rank // (2 * sync_every)
    is_sync, launches, n_k, is_comm = _rank_tasks(n_calls, rng, comm_every, sync_every)
    n_r = n_calls + n_k
    n = n_r * ranks
    T = {k: np.zeros(n, v) for k, v in g.tasks.items() for v in [v.dtype]}
    T["layer"][:] = -1; T["iteration"][:] = -1; T["event"][:] = -1; T["traced_start_ns"][:] = -1
    T["wait_lane"][:] = -1; T["group"][:] = -1; T["phase"][:] = 4
    name_call, name_sync = g.names.intern("cudaLaunchKernel"), g.names.intern("cudaStreamSynchronize")
    name_k, name_ar = g.names.intern("volta_sgemm_128x64_nn"), g.names.intern("ncclKernel_AllReduce")
    src_l, dst_l, kind_l, anchor_l, lag_l = [], [], [], [], []
    lane_tasks = []
    n_groups = int(is_comm.sum())
    for r in range(ranks):
        base = r * n_r
        cpu = g.add_lane(Lane(r, LaneKind.CPU_THREAD, r, 1, "main thread"))
        comp = g.add_lane(Lane(r, LaneKind.GPU_STREAM, r, 7, f"GPU {r} stream 7", r))
        comm = g.add_lane(Lane(r, LaneKind.GPU_STREAM, r, 13, f"GPU {r} stream 13", r))
        calls = np.arange(base, base + n_calls)
        kern = np.arange(base + n_calls, base + n_r)
        T["lane"][calls] = cpu; T["kind"][calls] = EventKind.RUNTIME; T["name"][calls] = name_call
        T["dur_ns"][calls] = rng.integers(3_000, 12_000, n_calls); T["gap_ns"][calls] = rng.integers(0, 4_000, n_calls)
        sync = calls[is_sync]
        T["kind"][sync] = EventKind.SYNC; T["name"][sync] = name_sync
        T["wait_kind"][sync] = WaitKind.STREAM; T["wait_lane"][sync] = comp; T["wait_lag_ns"][sync] = 2_000
        T["lane"][kern] = np.where(is_comm, comm, comp); T["kind"][kern] = np.where(is_comm, EventKind.COLLECTIVE, EventKind.KERNEL)
        T["name"][kern] = np.where(is_comm, name_ar, name_k)
        T["dur_ns"][kern] = rng.integers(5_000, 80_000, n_k)
        T["group"][kern[is_comm]] = np.arange(n_groups)
        T["rank"][base:base + n_r] = r
        src_l.append(calls[launches]); dst_l.append(kern); kind_l.append(np.full(n_k, EdgeKind.LAUNCH, np.int8))
        anchor_l.append(np.full(n_k, Anchor.START, np.int8)); lag_l.append(np.full(n_k, 5_000, np.int64))
        ck, mk = kern[~is_comm], kern[is_comm]
        w = mk[:: max(1, wait_every // comm_every)]
        after = np.searchsorted(ck, w + 1)
        ok = after < len(ck)
        src_l.append(w[ok]); dst_l.append(ck[after[ok]]); kind_l.append(np.full(int(ok.sum()), EdgeKind.WAIT, np.int8))
        anchor_l.append(np.full(int(ok.sum()), Anchor.END, np.int8)); lag_l.append(np.zeros(int(ok.sum()), np.int64))
        lane_tasks += [calls.tolist(), ck.tolist(), mk.tolist()]
        g.markers[r] = [int(calls[0]), int(calls[-1])]
        g.measured_boundaries_ns[r] = np.zeros(2, np.int64)
    g.tasks = T
    m = sum(len(s) for s in src_l)
    g.edges = {"src": np.concatenate(src_l).astype(np.int32), "dst": np.concatenate(dst_l).astype(np.int32),
               "kind": np.concatenate(kind_l), "anchor": np.concatenate(anchor_l),
               "target": np.zeros(m, np.int8), "lag_ns": np.concatenate(lag_l)}
    g.lane_tasks = lane_tasks
    g.group_transfer_ns = rng.integers(10_000, 200_000, n_groups).astype(np.int64)
    return g
