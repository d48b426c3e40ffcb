"""Tracing overhead of whole runs: ``daydream trace`` around a workload vs the same command untraced.

What a user sees: each round runs the untraced command and ``daydream trace``
around it (``--variant FLAGS`` adds ``daydream trace FLAGS`` runs, e.g.
``--variant=--no-heap-reserve``), in rotating order, each in a fresh
process; the figure per condition is the
median over rounds of (the run's median step time / the same round's
untraced median step).  Pairs within a round cancel the slow drift of a
shared machine.  The traced runs record every step after ``--warmup``
(``--steps = warmup + iterations + 1``: under ``daydream trace`` the span
before the first step is setup), so their median step is a traced step.

Unlike ``trace_overhead.py`` (traced and untraced blocks alternating in one
process) this sees what the profiler's records do to the heap over a whole
recording: in one process the blocks share a heap already grown by earlier
blocks, and the page faults that growth costs are hidden (see
``daydream/collect/heap.py``).

Usage::

    python benchmarks/trace_overhead_runs.py --workloads cnn --rounds 6 --malloc steady \
        --variant=--no-heap-reserve --variant=--no-shapes -- --batch-size 16 --dataset-batches 64
    python benchmarks/trace_overhead_runs.py --malloc steady      # validate's malloc settings

Goal: overhead <= 5 %.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["run_median_ms", "measure", "main"]

_MEDIAN = re.compile(r"median step ([0-9.]+) ms")


def run_median_ms(cmd: list[str], env: dict) -> float:
    """Run one command; the workload's printed median step time (ms)."""
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    m = _MEDIAN.search(out.stdout)
    if out.returncode != 0 or m is None:
        sys.exit(f"error: {' '.join(cmd)} failed (exit {out.returncode}): {out.stderr.strip()[-300:]}")
    return float(m.group(1))


def measure(name: str, rounds: int, warmup: int, iterations: int, extra: list[str], env: dict,
            variants: list[str] = ()) -> dict:
    """Per condition: median over rounds of run median / untraced run median, in percent."""
    py = sys.executable
    work = [py, "-m", f"daydream.workloads.{name}", "--quiet", "--threads", "1",
            "--steps", str(warmup + iterations + 1), *extra]   # + the setup span before step 1
    with tempfile.TemporaryDirectory() as tmp:
        trace = [py, "-m", "daydream", "trace", "-o", str(Path(tmp) / "t.json.gz"), "--force",
                 "--warmup", str(warmup), "--iterations", str(iterations)]
        conds = {"untraced": work, "traced": [*trace, "--", *work]}
        for v in variants:
            conds[f"traced {v}"] = [*trace, *v.split(), "--", *work]
        got = {k: [] for k in conds}
        for r in range(rounds):
            keys = list(conds)
            keys = keys[r % len(keys):] + keys[:r % len(keys)]   # rotate the order
            for k in keys:
                got[k].append(run_median_ms(conds[k], env))
            print(f"  {name} round {r + 1}/{rounds}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in got.items()),
                  file=sys.stderr, flush=True)
    base = got["untraced"]
    return {"workload": name, "untraced_median_ms": statistics.median(base),
            **{f"{k} overhead_pct": round(100 * (statistics.median(a / b for a, b in zip(v, base)) - 1), 2)
               for k, v in got.items() if k != "untraced"},
            "runs": got}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="mlp,cnn,transformer")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--iterations", type=int, default=40)
    ap.add_argument("--malloc", choices=("default", "steady"), default="default",
                    help="glibc's defaults, or daydream validate's STEADY_MALLOC settings")
    ap.add_argument("--variant", action="append", default=[], metavar="FLAGS",
                    help="also trace with these daydream trace flags (repeatable): --variant=--no-heap-reserve")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("extra", nargs="*", help="flags passed to every workload (after --)")
    a = ap.parse_args(argv)
    env = dict(os.environ)
    if a.malloc == "steady":
        from daydream.validate import STEADY_MALLOC

        env.update(STEADY_MALLOC)
    rows = [measure(n, a.rounds, a.warmup, a.iterations, a.extra, env, a.variant) for n in a.workloads.split(",")]
    if a.json:
        print(json.dumps(rows, indent=1))
    for r in rows:
        cols = "  ".join(f"{k} {v:+.2f} %" for k, v in r.items() if k.endswith("overhead_pct"))
        print(f"{r['workload']:12s} untraced {r['untraced_median_ms']:8.2f} ms  {cols}  (malloc {a.malloc})")
    return 0 if all(r["traced overhead_pct"] <= 5.0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
