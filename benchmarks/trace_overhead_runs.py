"""Tracing overhead of whole runs: ``daydream trace`` around a workload, against its untraced steps.

Each round runs the workload untraced and under ``daydream trace`` (``--variant
FLAGS`` adds ``daydream trace FLAGS`` runs, e.g. ``--variant=--no-heap-reserve``),
in rotating order, each in a fresh process, ``--warmup`` untraced steps, then
``--iterations`` recorded ones, then ``--after`` untraced ones (``--step-times``
gives every step).  Three figures per traced condition, medians over rounds:

* **in one run** (the goal's figure): the traced run's median recorded step
  over its own median untraced step (before and after recording).  Same
  process, same heap, same minutes: what tracing adds to an iteration.
* **in one run, against the steps before recording**: the same, with only the
  untraced steps before the recording as the reference.  Under glibc's default
  malloc settings the steps after a recording can run faster than any step of
  an untraced run (the freed records leave a heap that no longer page-faults:
  the CNN at its default size, 1 thread, 2026-11-24: 88-93 ms after, 108-124 ms
  in untraced runs), which makes the figure above read high.
* **against an untraced run**: the same steps of the untraced run of the same
  round.  What a user comparing two runs sees; on this shared VM separate
  runs of the same command differ by up to 30 %, so it moves +-5 points.

Unlike ``trace_overhead.py`` (traced and untraced blocks alternating in one
process) this sees what the profiler's records do to the heap over a whole
recording: in one process the blocks share a heap already grown by earlier
blocks, and the page faults that growth costs are hidden (see
``daydream/collect/heap.py``).

Usage::

    python benchmarks/trace_overhead_runs.py --workloads cnn --rounds 6 --malloc steady \
        --variant=--no-heap-reserve --variant=--no-shapes -- --batch-size 16 --dataset-batches 64
    python benchmarks/trace_overhead_runs.py --malloc steady      # validate's malloc settings
    python benchmarks/trace_overhead_runs.py --malloc steady --core 1 --workloads mlp -- \
        --hidden 512 --batch-size 64 --dataset-batches 64     # every run on core 1

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

__all__ = ["run_step_ms", "spans", "measure", "main"]

_STEPS = re.compile(r"^step times ms: (.*)$", re.M)


def run_step_ms(cmd: list[str], env: dict, core: int | None = None) -> list[float]:
    """Run one command (on one ``core`` if given); the workload's step times (ms), from its
    ``--step-times`` line."""
    pin = None if core is None else (lambda: os.sched_setaffinity(0, {core}))
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False, preexec_fn=pin)
    m = _STEPS.search(out.stdout)
    if out.returncode != 0 or m is None:
        sys.exit(f"error: {' '.join(cmd)} failed (exit {out.returncode}): {out.stderr.strip()[-300:]}")
    return [float(t) for t in m.group(1).split()]


def spans(warmup: int, iterations: int, steps: int) -> dict:
    """Step indices (0-based, as the workload prints them) of each part of a traced run.

    Under ``daydream trace`` iteration ``k`` is step ``k`` (the span before step 0's
    optimizer step is setup), so the recorded ones are steps ``warmup + 1`` on.  Left out:
    the first two steps (allocator warm-up); step ``warmup - 2``, whose optimizer step starts
    the shape session; step ``warmup - 1``, the shape iteration, whose optimizer step stops
    it and prepares the profiler and the heap reserve; step ``warmup``, which starts
    recording; the last recorded step (writes the trace in its optimizer step) and the
    step after it.

    >>> {k: list(v) for k, v in spans(6, 3, 14).items()}
    {'before': [2, 3], 'traced': [7, 8], 'after': [11, 12, 13]}
    """
    first, last = warmup + 1, warmup + iterations
    return {"before": range(2, warmup - 2), "traced": range(first, last),
            "after": range(last + 2, steps)}


def measure(name: str, rounds: int, warmup: int, iterations: int, after: int, extra: list[str],
            env: dict, variants: list[str] = (), core: int | None = None) -> dict:
    """Per traced condition: overhead (%) in one run and against an untraced run.

    In one run: the median traced step over the median untraced step before and after
    recording, in the same process.  Whole runs: the median traced step over the
    median of the same steps of an untraced run of the same round.  Both are medians
    over rounds.
    """
    py = sys.executable
    steps = warmup + iterations + after
    part = spans(warmup, iterations, steps)
    work = [py, "-m", f"daydream.workloads.{name}", "--quiet", "--step-times", "--threads", "1",
            "--steps", str(steps), *extra]
    med = statistics.median
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
                got[k].append(run_step_ms(conds[k], env, core))
            print(f"  {name} round {r + 1}/{rounds}: " + ", ".join(
                f"{k} {med(v[-1][i] for i in part['traced']):.1f}" for k, v in got.items()),
                file=sys.stderr, flush=True)
    def steps_of(run, *names):
        return [run[i] for p in names for i in part[p]]

    base = [med(steps_of(t, "traced")) for t in got["untraced"]]
    row = {"workload": name, "untraced_median_ms": round(med(base), 3)}
    for k, runs in got.items():
        if k != "untraced":
            traced = [med(steps_of(t, "traced")) for t in runs]
            quiet = [med(steps_of(t, "before", "after")) for t in runs]
            before = [med(steps_of(t, "before")) for t in runs]
            row[f"{k} in-run_pct"] = round(100 * (med(a / q for a, q in zip(traced, quiet)) - 1), 2)
            row[f"{k} in-run-before_pct"] = round(100 * (med(a / q for a, q in zip(traced, before)) - 1), 2)
            row[f"{k} vs-untraced-run_pct"] = round(100 * (med(a / b for a, b in zip(traced, base)) - 1), 2)
    row["runs_ms"] = got
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="mlp,cnn,transformer")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=10, help="untraced steps before recording (>= 5)")
    ap.add_argument("--iterations", type=int, default=20, help="recorded steps")
    ap.add_argument("--after", type=int, default=12, help="untraced steps after recording (>= 4)")
    ap.add_argument("--malloc", choices=("default", "steady"), default="default",
                    help="glibc's defaults, or daydream validate's STEADY_MALLOC settings")
    ap.add_argument("--variant", action="append", default=[], metavar="FLAGS",
                    help="also trace with these daydream trace flags (repeatable): --variant=--no-heap-reserve")
    ap.add_argument("--core", type=int, default=None,
                    help="run every process on this one core: separate runs then differ less (the "
                         "cores of a VM differ in speed for seconds at a time)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("extra", nargs="*", help="flags passed to every workload (after --)")
    a = ap.parse_args(argv)
    env = dict(os.environ)
    if a.malloc == "steady":
        from daydream.validate import STEADY_MALLOC

        env.update(STEADY_MALLOC)
    rows = [measure(n, a.rounds, a.warmup, a.iterations, a.after, a.extra, env, a.variant, a.core)
            for n in a.workloads.split(",")]
    if a.json:
        print(json.dumps(rows, indent=1))
    for r in rows:
        cols = "  ".join(f"{k[:-4]} {v:+.2f} %" for k, v in r.items() if k.endswith("_pct"))
        print(f"{r['workload']:12s} untraced {r['untraced_median_ms']:8.2f} ms  {cols}  (malloc {a.malloc})")
    return 0 if all(r["traced in-run_pct"] <= 5.0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
