"""The heap reserve's top-up rule on a heap that starts growing by a whole iteration: page faults.

A traced training loop whose freed buffers the profiler's records split takes more and more of
its buffers from the heap's top, until every iteration takes all of them there (the 8-copy HFTA
MLP: 8 MiB an iteration, then 32; ``benchmarks/trace_faults.py`` prints the growth).  The heap
reserve (:mod:`daydream.collect.heap`) tops itself up between iterations; where the top-ups fall
behind the growth, the recorded iterations fault on fresh pages.

This traces the fused MLP (``daydream.workloads.hfta``, validation sizes) in fresh processes, in
turns rule by rule, with a reserve that starts small (``--start-mib``) so that every run depends
on its top-ups, under two rules: ``mean`` (the remaining iterations at the mean growth so far:
the rule until session 62) and ``last`` (at the last iteration's growth where that is more:
:func:`daydream.collect.heap.top_up_bytes`).  Per rule: runs, runs with over ``--faults`` minor
faults in their recorded iterations, the faults' median, top-ups and the recorded iterations'
mean over their median.

Usage::

    python benchmarks/heap_topups.py --rounds 6 --models 8 --start-mib 16
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from trace_faults import iterations_meta

__all__ = ["main", "SCRIPT"]

REPO = Path(__file__).resolve().parents[1]

#: One traced run in a fresh process: argv = rule, start MiB, trace path, models, iterations.
SCRIPT = r"""
import sys
from daydream.collect import heap, trace
from daydream.validate import WORKLOAD_ARGS
from daydream.workloads import hfta

rule, start_mib, path, models, iterations = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
if rule == "mean":
    def mean_rule(taken_bytes, reserved_bytes, iterations):
        done, taken = len(taken_bytes), taken_bytes[-1]
        ahead = taken / done * (iterations - done)
        resident = reserved_bytes - taken
        return 0 if ahead <= resident else max(int(ahead * heap.TOP_UP_MARGIN - resident), heap.CHUNK_BYTES)
    heap.top_up_bytes = mean_rule
start = heap.HeapReserve.start
heap.HeapReserve.start = lambda self, nbytes=None: start(self, start_mib << 20)
with trace(path, warmup=5, iterations=iterations):
    hfta.main(["--model", "mlp", "--models", models, *WORKLOAD_ARGS["mlp"], "--steps", str(iterations + 8)])
"""


def _run(rule: str, start_mib: int, path: Path, models: int, iterations: int) -> dict:
    from daydream.heapmode import STEADY_MALLOC

    env = {**os.environ, **STEADY_MALLOC, "PYTHONPATH": str(REPO)}
    res = subprocess.run([sys.executable, "-c", SCRIPT, rule, str(start_mib), str(path), str(models), str(iterations)],
                         env=env, capture_output=True, text=True, timeout=600)
    if res.returncode != 0:
        raise SystemExit(f"heap_topups: the {rule} run failed: {(res.stderr.strip().splitlines() or ['?'])[-1]}")
    its, heap = iterations_meta(path)
    walls = its["wall_ns"]
    return {"faults": sum(its["minor_faults"]), "top_ups": heap["top_ups"],
            "stretch": statistics.fmean(walls) / statistics.median(walls)}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--models", type=int, default=8, help="fused MLP copies")
    p.add_argument("--start-mib", type=int, default=16, help="the reserve made before recording")
    p.add_argument("--iterations", type=int, default=20, help="recorded iterations (validate's default)")
    p.add_argument("--faults", type=int, default=1000, help="a storm: more minor faults than this")
    args = p.parse_args(argv)
    got = {"mean": [], "last": []}
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.rounds):
            for rule in (got if k % 2 == 0 else reversed(list(got))):
                got[rule].append(_run(rule, args.start_mib, Path(tmp, f"{rule}{k}.json"), args.models,
                                      args.iterations))
                r = got[rule][-1]
                print(f"round {k} {rule}: {r['faults']} faults, {r['top_ups']} top-ups, "
                      f"mean iteration x{r['stretch']:.3f} its median", flush=True)
    for rule, runs in got.items():
        print(f"{rule}: {len(runs)} runs, {sum(r['faults'] > args.faults for r in runs)} with over {args.faults} "
              f"faults; faults median {statistics.median(r['faults'] for r in runs):.0f}, top-ups median "
              f"{statistics.median(r['top_ups'] for r in runs):.0f}, mean over median iteration "
              f"x{statistics.fmean(r['stretch'] for r in runs):.3f}")


if __name__ == "__main__":
    main()
