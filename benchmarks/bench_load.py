"""Benchmark (a): load + build the dependency graph from large Kineto traces.

Reports MB/s of JSON end to end (files on disk -> ``DependencyGraph``), the
time of each stage, and peak RSS (this process, and the largest loader
worker).  Each measurement runs in a fresh process, ``--runs`` times; medians.

Usage::

    python benchmarks/make_large_trace.py --ranks 8 --repeat 6 -o /tmp/daydream_large   # ~1 GB, ~5M events
    python benchmarks/bench_load.py /tmp/daydream_large --runs 3
    python benchmarks/bench_load.py /tmp/daydream_large/rank0.json --workers 1 --stages

Goal: >= 100 MB/s of JSON end to end.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bench import children_peak_rss_bytes, emit, median_runs, peak_rss_bytes  # noqa: E402

GOAL_MB_S = 100.0


def _once(a) -> None:
    from daydream.graph import build_graph
    from daydream.loader import expand_paths, load_rank, load_trace, read_documents
    from daydream.loader.memory import json_bytes

    files = expand_paths(a.paths)
    mb = sum(json_bytes(p) for p in files) / 1e6
    res = {"files": len(files), "json_MB": mb}
    t0 = time.perf_counter()
    if a.stages:    # one process, stage by stage
        t_read = t_rank = 0.0
        ranks = []
        for i, p in enumerate(files):
            t = time.perf_counter()
            docs = list(read_documents([p]))
            t_read += time.perf_counter() - t
            t = time.perf_counter()
            ranks += [load_rank(src, doc, i, None) for src, doc in docs]
            t_rank += time.perf_counter() - t
            del docs
        from daydream.model import Trace
        trace = Trace(sorted(ranks, key=lambda r: r.rank))
        res.update(read_decode_s=t_read, events_to_columns_s=t_rank)
    else:
        trace = load_trace(files, workers=a.workers)
    t1 = time.perf_counter()
    g = build_graph(trace)
    t2 = time.perf_counter()
    res.update(events=sum(len(r) for r in trace), tasks=g.n_tasks, edges=g.n_edges,
               load_s=t1 - t0, build_s=t2 - t1, total_s=t2 - t0, MB_per_s=mb / (t2 - t0),
               peak_rss_MB=peak_rss_bytes() / 1e6, worker_peak_rss_MB=children_peak_rss_bytes() / 1e6)
    emit(res)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="+", help="trace files or folders (e.g. /tmp/daydream_large)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workers", type=int, default=None, help="loader processes (default: automatic)")
    ap.add_argument("--stages", action="store_true", help="one process, time read/decode, columns, build")
    ap.add_argument("--once", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.once:
        _once(a)
        return 0
    args = [*a.paths] + (["--workers", str(a.workers)] if a.workers else []) + (["--stages"] if a.stages else [])
    med, _ = median_runs(os.path.abspath(__file__), args, a.runs)
    print(f"load+build of {med['files']} file(s), {med['json_MB']:.0f} MB JSON, {med['events']:.0f} events, "
          f"{med['tasks']:.0f} tasks (median of {a.runs} runs):")
    for k in ("read_decode_s", "events_to_columns_s", "load_s", "build_s", "total_s"):
        if k in med:
            print(f"  {k:<22}{med[k]:10.2f}")
    print(f"  {'MB/s end to end':<22}{med['MB_per_s']:10.1f}   (goal >= {GOAL_MB_S:.0f})")
    print(f"  {'peak RSS main, MB':<22}{med['peak_rss_MB']:10.0f}")
    print(f"  {'peak RSS worker, MB':<22}{med['worker_peak_rss_MB']:10.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
