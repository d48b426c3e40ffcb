"""Benchmark (b): simulate graphs of 1M and 10M tasks; tasks/s and peak bytes per task.

Graphs come from ``benchmarks/synthetic_graph.py`` (8 ranks of data-parallel
training: launches, stream syncs, cross-stream waits, all-reduces joined
across ranks).  Each size runs in a fresh process, ``--runs`` times; medians.

* ``tasks_per_s``: tasks / wall time of ``simulate_times`` (compiled core),
  ``tasks_per_cpu_s`` the same per CPU second (steadier on a shared machine).
* ``graph_B_per_task``: resident memory of the graph (columns, edges,
  ``lane_tasks``) per task.
* ``peak_B_per_task``: peak resident memory while simulating (graph + the
  simulator's state + the result) per task, above the interpreter's baseline.

Usage::

    python benchmarks/bench_sim.py                       # 1M and 10M tasks, 3 runs each
    python benchmarks/bench_sim.py --sizes 1000000 --reference

Goals: >= 2M tasks/s; <= 300 bytes per task at peak.
"""
from __future__ import annotations

import argparse
import ctypes
import gc
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bench import current_rss_bytes, emit, median_runs  # noqa: E402

GOAL_TASKS_S = 2e6
GOAL_B_TASK = 300


def _trim():
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def _once(a) -> None:
    import numpy as np  # noqa: F401
    from daydream.sim.core import fast_core_available, simulate_times
    from daydream.sim.reference import simulate_reference
    from synthetic_graph import synthetic_graph

    _trim()
    base = current_rss_bytes()
    g = synthetic_graph(a.size, ranks=8)
    _trim()
    graph = current_rss_bytes() - base
    n = g.n_tasks
    exact = _reset_peak()
    c0, t0 = time.process_time(), time.perf_counter()
    tl = simulate_times(g)
    t1, c1 = time.perf_counter(), time.process_time()
    peak = (_peak_rss() if exact else current_rss_bytes()) - base
    res = {"tasks": n, "edges": g.n_edges, "compiled": fast_core_available(), "sim_s": t1 - t0,
           "tasks_per_s": n / (t1 - t0), "tasks_per_cpu_s": n / max(c1 - c0, 1e-9),
           "graph_B_per_task": graph / n, "peak_B_per_task": peak / n, "makespan_ms": int(tl.end_ns.max()) / 1e6}
    if a.reference:
        del tl
        t0 = time.perf_counter()
        simulate_reference(g)
        res["reference_tasks_per_s"] = n / (time.perf_counter() - t0)
    emit(res)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1000000,10000000", help="comma-separated task counts")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--reference", action="store_true", help="also time the pure-Python reference simulator")
    ap.add_argument("--size", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--once", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.once:
        _once(a)
        return 0
    rows = []
    for size in (int(s) for s in a.sizes.split(",")):
        print(f"{size} tasks:", file=sys.stderr)
        med, _ = median_runs(os.path.abspath(__file__), ["--size", str(size)] + (["--reference"] if a.reference else []),
                             a.runs)
        rows.append(med)
    print(f"simulation (median of {a.runs} runs; compiled core: {rows[0]['compiled']}):")
    print(f"  {'tasks':>10} {'edges':>10} {'sim s':>7} {'tasks/s':>10} {'tasks/CPU s':>12} "
          f"{'graph B/task':>13} {'peak B/task':>12}" + (f" {'reference tasks/s':>18}" if a.reference else ""))
    for r in rows:
        print(f"  {r['tasks']:>10.0f} {r['edges']:>10.0f} {r['sim_s']:>7.2f} {r['tasks_per_s']:>10.3g} "
              f"{r['tasks_per_cpu_s']:>12.3g} {r['graph_B_per_task']:>13.0f} {r['peak_B_per_task']:>12.0f}"
              + (f" {r['reference_tasks_per_s']:>18.3g}" if a.reference else ""))
    print(f"  goals: >= {GOAL_TASKS_S:.0e} tasks/s, <= {GOAL_B_TASK} bytes per task at peak")
    return 0


if __name__ == "__main__":
    sys.exit(main())
