"""Heap growth and page faults per recorded iteration, with and without daydream's heap reserve.

One process per condition (a fresh heap each): the workload trains a few
steps untraced, then ``daydream.collect.trace`` records ``--iterations``
steps; after each step the process's minor page faults (``getrusage``) and
glibc's heap size (``mallinfo2``) are read.  Untraced steps of a warm
training loop fault almost never; the profiler's records make the heap grow
and the recorded steps fault (see ``daydream/collect/heap.py``).

Usage::

    python benchmarks/heap_growth.py --workload cnn -- --batch-size 16
    python benchmarks/heap_growth.py --malloc default   # glibc's own trim threshold: the reserve turns off
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

__all__ = ["one", "main"]


def one(workload: str, iterations: int, reserve: bool, extra: list[str]) -> dict:
    """In this process: per recorded step, page faults and heap MiB; the trace's reserve metadata."""
    import importlib
    import resource
    import statistics

    from daydream.collect import heap, trace
    from daydream.workloads.common import prepare

    mod = importlib.import_module(f"daydream.workloads.{workload}")
    w = prepare(workload, mod.build, ["--quiet", "--threads", "1", *extra], mod.add_args, mod.BATCH_SIZE)
    w.train(3)
    marks = []
    on_step = lambda s, loss: marks.append((resource.getrusage(resource.RUSAGE_SELF).ru_minflt,  # noqa: E731
                                            (heap.heap_bytes() or 0) / 2**20))
    w.train(iterations, on_step=on_step)
    untraced = statistics.median(b[0] - a[0] for a, b in zip(marks, marks[1:]))
    marks.clear()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "t.json")
        with trace(path, warmup=1, iterations=iterations, heap_reserve=reserve):
            times = w.train(iterations + 1, on_step=on_step)
        with open(path, encoding="utf-8") as fh:
            meta = json.load(fh)["daydream"].get("heap_reserve")
    rec = marks[1:-1]   # steps 2..N: recorded, and not the one that writes the file
    faults = [b[0] - a[0] for a, b in zip(rec, rec[1:])]
    return {"reserve": reserve, "untraced_median_faults": untraced, "faults_per_step": faults, "median_faults": statistics.median(faults),
            "heap_growth_mib_per_step": round((rec[-1][1] - rec[0][1]) / (len(rec) - 1), 2),
            "median_step_ms": round(statistics.median(times[2:-1]) * 1e3, 2), "heap_reserve": meta}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", default="cnn")
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--malloc", choices=("steady", "default"), default="steady",
                    help="daydream validate's STEADY_MALLOC (default) or glibc's own settings")
    ap.add_argument("--one", choices=("on", "off"), help=argparse.SUPPRESS)
    ap.add_argument("extra", nargs="*", help="workload flags (after --)")
    a = ap.parse_args(argv)
    if a.one:
        print(json.dumps(one(a.workload, a.iterations, a.one == "on", a.extra)))
        return 0
    env = dict(os.environ)
    if a.malloc == "steady":
        from daydream.validate import STEADY_MALLOC

        env.update(STEADY_MALLOC)
    for cond in ("off", "on"):
        out = subprocess.run([sys.executable, __file__, "--workload", a.workload, "--iterations", str(a.iterations),
                              "--one", cond, "--", *a.extra], env=env, capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{a.workload} reserve {cond:3s} (malloc {a.malloc}): median {r['median_faults']:.0f} page faults "
              f"a recorded step (untraced {r['untraced_median_faults']:.0f}), "
              f"heap +{r['heap_growth_mib_per_step']} MiB a step, median step {r['median_step_ms']} ms; "
              f"{r['heap_reserve']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
