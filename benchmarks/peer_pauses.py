"""A ``daydream validate`` run's multi-rank rounds measured with and without the other ranks' pauses.

A rank that pauses between iterations (a heap top-up of the tracer) holds the other ranks in
their next collective; :func:`daydream.validate.replay_rank0` cuts those pauses from rank 0's
timeline (:func:`daydream.loader.pauses.cut_peer_pauses`).  Per round of the run's traces
``DIR/traces/PREFIX.rK.rank0.json.gz`` (default ``tp.t2``, the tensor-parallel row), prints
rank 0's mean iteration (after the first) measured from its own file alone and with the other
ranks' pauses cut, and the pauses cut; then the means over the rounds.

Usage::

    python benchmarks/peer_pauses.py DIR [--prefix tp.t2] [--ranks 2]
"""
from __future__ import annotations

import argparse
import statistics
from pathlib import Path

__all__ = ["main"]


def main(argv=None) -> None:
    from daydream.analysis import replay
    from daydream.loader import load_trace
    from daydream.loader.pauses import PEER_PAUSES_KEY
    from daydream.validate import rank_files, replay_rank0

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir", type=Path, help="output directory of daydream validate")
    p.add_argument("--prefix", default="tp.t2", help="the rounds' trace names before .rK (default tp.t2)")
    p.add_argument("--ranks", type=int, default=2)
    args = p.parse_args(argv)
    files = sorted(args.dir.glob(f"traces/{args.prefix}.r*.rank0.json.gz"),
                   key=lambda f: int(f.name[len(args.prefix) + 2:].split(".")[0]))
    if not files:
        raise SystemExit(f"{args.dir}: no traces/{args.prefix}.rK.rank0.json.gz")
    alone, cut = [], []
    for f in files:
        alone.append(replay(f)[0].measured_ms)
        cut.append(replay_rank0(f, args.ranks)[0].measured_ms)
        spans = load_trace(rank_files(f, args.ranks)).ranks[0].meta.get(PEER_PAUSES_KEY, [])
        print(f"{f.name}: {alone[-1]:.1f} ms alone, {cut[-1]:.1f} ms with the peers' pauses cut "
              f"({len(spans)} cut, {sum(e - s for s, e in spans) / 1e6:.0f} ms)", flush=True)
    print(f"mean over {len(files)} rounds: {statistics.fmean(alone):.2f} ms alone, {statistics.fmean(cut):.2f} ms cut")


if __name__ == "__main__":
    main()
