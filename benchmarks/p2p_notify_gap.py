"""The notified hand-over gap (``p2p_notified - p2p_preposted``): as calibration times it, and
shaped like the Hydra runtime's round.

Two pinned gloo processes (as ``daydream calibrate`` starts them). By default they run
``daydream.calibrate_p2p._p2p_notified_ns`` once per size: preposted sends whose arrival the
receiver learns by waiting on the receive or through the Hydra runtime's waiter thread
(``daydream.workloads.hydra.Arrivals``), alternating in pairs; calibration times the smallest
size of ``GLOO_SIZES`` only. ``--waiters K`` instead shapes each try like a shard-parallel round:
the receiver posts K receives (the round's activations) before the barrier, rank 0 spins, posts
the first with ``isend`` and computes for ``--sender-busy-ms`` before sending the other K - 1;
the receiver learns of the first arrival by waiting on it, or through ``Arrivals`` over all K
(its ``first_ready``), in alternating pairs as calibration takes them. The Hydra validation's
messages are 128 KiB (hidden 512, batch 64, float32). Prints per size the two one-way figures
and their gap (median of paired differences), in us.

Usage::

    python benchmarks/p2p_notify_gap.py --sizes 16384,131072,524288
    python benchmarks/p2p_notify_gap.py --sizes 131072 --waiters 2 --sender-busy-ms 2
"""
from __future__ import annotations

import argparse
import statistics
import time

from daydream.calibrate_gloo import first_result, pinned_gloo_rank, spin
from daydream.calibrate_p2p import P2P_BUSY_S, _notify_gap_worker, notify_pairs, paired_gaps

#: Pairs of tries (one waited, one notified) per size.
PAIRS = 60


def _round_try(torch, dist, rank, t, k, busy_s, notified) -> int:
    """One try shaped like a round: ns stamp (rank 0: the first send's start; rank 1: its arrival noticed)."""
    from daydream.workloads.hydra import Arrivals

    bufs = [torch.empty_like(t) for _ in range(k)] if rank == 1 else []
    reqs = [dist.irecv(b, 0, tag=i) for i, b in enumerate(bufs)]
    arrivals = Arrivals(reqs) if notified and reqs else None
    dist.barrier()
    if rank == 0:
        spin(P2P_BUSY_S)
        stamp = time.perf_counter_ns()
        works = [dist.isend(t, 1, tag=0)]
        spin(busy_s)
        works += [dist.isend(t, 1, tag=i) for i in range(1, k)]
        for w in works:
            w.wait()
        return stamp
    if arrivals is not None:
        arrivals.first_ready(list(range(k)), lambda i: reqs[i])
    else:
        reqs[0].wait()
    stamp = time.perf_counter_ns()
    if arrivals is not None:                # a gloo receive is waited for once: by its waiter thread
        for i in range(k):
            arrivals.first_ready([i], lambda j: reqs[j])
    else:
        for r in reqs[1:]:
            r.wait()
    return stamp


def _round_worker(rank, port, sizes, k, busy_s, q):
    torch, dist = pinned_gloo_rank(rank, port)
    out, order = [], notify_pairs(PAIRS)
    for n in sizes:
        t = torch.zeros(n // 4)
        modes = [False] * 3 + [x for pair in order for x in pair]
        stamps = torch.tensor([_round_try(torch, dist, rank, t, k, busy_s, m) for m in modes], dtype=torch.int64)
        if rank == 1:
            dist.send(stamps, 0)
            continue
        peer = torch.zeros_like(stamps)
        dist.recv(peer, 1)
        one_way = (peer - stamps)[3:].tolist()
        waited, gaps = paired_gaps(one_way, order)
        base = statistics.median(waited)
        out.append((base, base + statistics.median(gaps)))
    if rank == 0:
        q.put(out)
    dist.destroy_process_group()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="16384,131072", help="message sizes in bytes, comma-separated")
    ap.add_argument("--waiters", type=int, default=0,
                    help="K > 0: tries shaped like a shard-parallel round with K receives posted (default: "
                         "calibration's own tries)")
    ap.add_argument("--sender-busy-ms", type=float, default=2.0,
                    help="with --waiters: the sender's compute between its first and its other sends")
    a = ap.parse_args(argv)
    sizes = [int(s) for s in a.sizes.split(",")]
    if a.waiters > 0:
        got = first_result(_round_worker, 2, (sizes, a.waiters, a.sender_busy_ms / 1e3))
        what = f"round-shaped, {a.waiters} receive(s) posted, sender busy {a.sender_busy_ms:g} ms after its isend; medians"
    else:
        got = first_result(_notify_gap_worker, 2, (sizes,))
        what = "calibration's tries (preposted: trimmed mean)"
    print(what)
    for nbytes, (preposted, notified) in zip(sizes, got):
        print(f"{nbytes:>8} B: waited {preposted / 1e3:7.1f} us, notified {notified / 1e3:7.1f} us, "
              f"gap {(notified - preposted) / 1e3:6.1f} us")


if __name__ == "__main__":
    main()
