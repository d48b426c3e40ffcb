"""Benchmark (a): load + build the dependency graph from large Kineto traces.

Reports MB/s of JSON end to end (files on disk -> ``DependencyGraph``), the
time of each stage, and peak RSS (this process, and the largest loader
worker).  Each measurement runs in a fresh process, ``--runs`` times; medians.

Usage::

    python benchmarks/make_large_trace.py --ranks 8 --repeat 6 -o /tmp/daydream_large   # ~1 GB, ~5M events
    python benchmarks/bench_load.py /tmp/daydream_large --runs 3
    python benchmarks/bench_load.py /tmp/daydream_large --sequential   # load every rank, then build
    python benchmarks/bench_load.py /tmp/daydream_large/rank0.json --workers 1 --stages
    python benchmarks/bench_load.py /tmp/daydream_large --loader reference   # without daydream._kineto

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
    from daydream.graph import GraphBuilder, build_graph
    from daydream.loader import expand_paths, load_rank, load_trace, read_documents
    from daydream.loader import fast
    from daydream.loader.io import decode_document, inflate
    from daydream.loader.memory import json_bytes

    use_fast = fast.enabled()
    builder = None

    files = expand_paths(a.paths)
    mb = sum(json_bytes(p) for p in files) / 1e6
    res = {"files": len(files), "json_MB": mb, "loader": "fast" if use_fast else "reference"}
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    if a.stages:    # one process, stage by stage
        t_read = t_rank = 0.0
        ranks = []
        for i, p in enumerate(files):
            t = time.perf_counter()
            docs = list(read_documents([p], raw=True))
            if use_fast:     # read + gunzip; the scanner parses below
                docs = [(src, inflate(src, data)) for src, data in docs]
            else:            # read + gunzip + JSON to Python objects
                docs = [(src, decode_document(src, data)) for src, data in docs]
            t_read += time.perf_counter() - t
            t = time.perf_counter()
            if use_fast:
                ranks += [fast.load_rank_bytes(src, data, i, None) for src, data in docs]
            else:
                ranks += [load_rank(src, doc, i, None) for src, doc in docs]
            t_rank += time.perf_counter() - t
            del docs
        from daydream.model import Trace
        trace = Trace(sorted(ranks, key=lambda r: r.rank))
        res.update(read_decode_s=t_read, events_to_columns_s=t_rank)
    elif a.sequential:
        trace = load_trace(files, workers=a.workers)
    else:        # as `daydream replay` / `whatif` do: each rank is built as soon as it is loaded
        builder = GraphBuilder()
        trace = load_trace(files, workers=a.workers, on_rank=builder.add_rank)
    res["mode"] = "pipelined" if builder else "sequential"
    t1 = time.perf_counter()
    res.update(load_cpu_s=time.process_time() - cpu0)   # this process only (workers not counted)
    g = builder.finish() if builder else build_graph(trace)
    t2 = time.perf_counter()
    res.update(main_cpu_s=time.process_time() - cpu0)
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
    ap.add_argument("--sequential", action="store_true",
                    help="load every rank, then build (default: build each rank as it arrives, as replay does; "
                         "then load_s includes the building done meanwhile and build_s is the final pass)")
    ap.add_argument("--loader", choices=("auto", "fast", "reference"), default="auto",
                    help="fast: the compiled scanner (daydream._kineto); reference: DAYDREAM_FAST_LOADER=0")
    ap.add_argument("--once", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.loader != "auto":    # inherited by the fresh processes and their loader workers
        os.environ["DAYDREAM_FAST_LOADER"] = "1" if a.loader == "fast" else "0"
    if a.once:
        _once(a)
        return 0
    args = ([*a.paths] + (["--workers", str(a.workers)] if a.workers else []) + (["--stages"] if a.stages else [])
            + (["--sequential"] if a.sequential else []))
    med, runs = median_runs(os.path.abspath(__file__), args, a.runs)
    best = min(runs, key=lambda r: r["total_s"])
    print(f"load+build of {med['files']} file(s), {med['json_MB']:.0f} MB JSON, {med['events']:.0f} events, "
          f"{med['tasks']:.0f} tasks, {runs[0]['loader']} loader, {runs[0]['mode']} "
          f"(median of {a.runs} runs; best run):")
    for k in ("read_decode_s", "events_to_columns_s", "load_s", "build_s", "total_s", "load_cpu_s", "main_cpu_s"):
        if k in med:
            print(f"  {k:<22}{med[k]:10.2f}{best[k]:10.2f}")
    print(f"  {'MB/s end to end':<22}{med['MB_per_s']:10.1f}{best['MB_per_s']:10.1f}   (goal >= {GOAL_MB_S:.0f})")
    print(f"  {'peak RSS main, MB':<22}{med['peak_rss_MB']:10.0f}")
    print(f"  {'peak RSS worker, MB':<22}{med['worker_peak_rss_MB']:10.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
