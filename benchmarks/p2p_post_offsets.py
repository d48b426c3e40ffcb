"""The host time of posting a gloo send and a receive, by how far apart the two ranks post.

Two pinned processes (as ``daydream calibrate`` runs them), each running matmuls for
``P2P_BUSY_S`` before its post; rank 1 posts its receive ``offset`` ms after rank 0 posts its
send (negative: before).  Prints per offset the median and mean time of ``isend`` and of ``irecv``
until they return.  At offset 0 the posts collide: on the Zen 1 host of session 45 the means read
264-1092 us against 93-193 us with the posts 0.5 ms apart (``daydream.calibrate_p2p._p2p_post_ns``
times them apart for the handshake; in spells of that host nearly all of these barrier-started
posts took 2.5-5.2 ms, so ``p2p_post`` itself has been timed within a pipeline exchange since
session 46: ``pipeline_post_ns``).

Usage::

    python benchmarks/p2p_post_offsets.py [--offsets=0,0.5,-0.5,2,-2] [--kib 16] [--tries 60]
"""
from __future__ import annotations

import argparse
import statistics

from daydream.calibrate_gloo import busy_matmuls, first_result, pinned_gloo_rank
from daydream.calibrate_p2p import P2P_BUSY_S, timed_post

__all__ = ["main"]


def _worker(rank, port, offsets_s, nbytes, tries, q):
    torch, dist = pinned_gloo_rank(rank, port)
    t, compute, res = torch.zeros(nbytes // 4), busy_matmuls(torch), {}
    for off in offsets_s:
        took = [timed_post(dist, rank, t, compute, P2P_BUSY_S + max(off if rank == 1 else -off, 0.0))
                for _ in range(tries + 3)]
        mine = torch.tensor([statistics.median(took[3:]), statistics.fmean(took[3:])], dtype=torch.float64)
        if rank == 0:
            peer = torch.zeros_like(mine)
            dist.recv(peer, 1)
            res[off] = (mine.tolist(), peer.tolist())
        else:
            dist.send(mine, 0)
    if rank == 0:
        q.put(res)
    dist.destroy_process_group()


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--offsets", default="0,0.5,-0.5,2,-2", help="ms the receive is posted after the send")
    p.add_argument("--kib", type=int, default=16)
    p.add_argument("--tries", type=int, default=60)
    a = p.parse_args(argv)
    offsets = [float(x) / 1e3 for x in a.offsets.split(",")]
    got = first_result(_worker, 2, (offsets, a.kib * 1024, a.tries))
    for off, (send, recv) in got.items():
        print(f"receive posted {off * 1e3:+.1f} ms after the send: isend median {send[0] / 1e3:.0f} us, "
              f"mean {send[1] / 1e3:.0f} us; irecv median {recv[0] / 1e3:.0f} us, mean {recv[1] / 1e3:.0f} us")


if __name__ == "__main__":
    main()
