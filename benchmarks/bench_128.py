"""Benchmark (d): a 128-rank job replayed with its collectives.

The job is built from the two sampled ranks of the public 128-rank trace
(``HolisticTraceAnalysis/sampled_rank-{0,1}.json.gz``): rank ``r`` is a copy of
sampled rank ``r % 2`` with ``distributedInfo.rank = r`` (see
``make_large_trace.py``), so every NCCL kernel has a part on all 128 ranks and
is joined into one collective.  Each run (fresh process) loads the 128 files
in parallel, builds the graph and simulates it; medians of ``--runs``.

Usage::

    python benchmarks/bench_128.py --runs 3          # generates /tmp/daydream_128 if absent

Goal: <= 60 s for the whole replay on this machine.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bench import children_peak_rss_bytes, emit, median_runs, peak_rss_bytes  # noqa: E402

GOAL_S = 60.0
HTA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "traces", "public",
                   "HolisticTraceAnalysis")


def _generate(out: str) -> None:
    import make_large_trace

    bases = ",".join(os.path.join(HTA, f"sampled_rank-{i}.json.gz") for i in (0, 1))
    make_large_trace.main(["--base", bases, "--ranks", "128", "--repeat", "1", "-o", out])


def _once(a) -> None:
    from daydream.graph import build_graph
    from daydream.loader import load_trace
    from daydream.sim import simulate

    t0 = time.perf_counter()
    trace = load_trace(a.dir, workers=a.workers)
    t1 = time.perf_counter()
    g = build_graph(trace)
    t2 = time.perf_counter()
    res = simulate(g)
    t3 = time.perf_counter()
    meas, sim = res.mean_iteration_ns()
    emit({"ranks": len(trace), "tasks": g.n_tasks, "edges": g.n_edges, "collectives": len(g.group_transfer_ns),
          "collective_parts": int((g.tasks["group"] >= 0).sum()), "load_s": t1 - t0, "build_s": t2 - t1,
          "sim_s": t3 - t2, "total_s": t3 - t0, "measured_ms": meas / 1e6, "simulated_ms": sim / 1e6,
          "error_pct": abs(sim - meas) / meas * 100, "peak_rss_MB": peak_rss_bytes() / 1e6,
          "worker_peak_rss_MB": children_peak_rss_bytes() / 1e6})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="/tmp/daydream_128")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--once", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.once:
        _once(a)
        return 0
    if not os.path.isdir(a.dir) or len(os.listdir(a.dir)) < 128:
        _generate(a.dir)
    med, _ = median_runs(os.path.abspath(__file__), ["--dir", a.dir] + (["--workers", str(a.workers)] if a.workers else []),
                         a.runs)
    print(f"128-rank replay (median of {a.runs} runs): {med['ranks']:.0f} ranks, {med['tasks']:.0f} tasks, "
          f"{med['collectives']:.0f} collectives ({med['collective_parts']:.0f} parts)")
    print(f"  load {med['load_s']:.1f} s, build {med['build_s']:.1f} s, simulate {med['sim_s']:.2f} s, "
          f"total {med['total_s']:.1f} s   (goal <= {GOAL_S:.0f} s)")
    print(f"  measured {med['measured_ms']:.3f} ms, simulated {med['simulated_ms']:.3f} ms, "
          f"error {med['error_pct']:.3f}%; peak RSS main {med['peak_rss_MB']:.0f} MB, "
          f"worker {med['worker_peak_rss_MB']:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
