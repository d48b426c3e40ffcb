"""Per-task times of the real Hydra runtime for several K, in alternating runs, with placements.

Runs ``daydream.workloads.hydra`` (the validation's sizes, idle CPUs polling, the validation's
malloc settings) for each K of ``--models`` in turn, ``--reps`` times, probing the core-to-core
round trip before and after each run, and prints per run the model-parallel and shard-parallel
makespan per model and, for each schedule, each rank's median forward / backward / step time.
A device's K shards in turn cost what ``hydra``'s ``cycle`` factor says only if these medians
grow with K (session 42, the AMD host: they did not, at 80-100 ns or at 330 ns apart; session 90,
the Intel host: with ``--models 1,2,4 --reps 2`` each rank's sum at K = 4 read x1.09-1.23 of K = 1's).

Usage::

    python benchmarks/hydra_k_tasks.py --models 1,4 --reps 6
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hydra_timeline import load  # noqa: E402

__all__ = ["main", "task_medians"]

SCHEDULES = ("model-parallel", "shard-parallel")


def task_medians(log_dir, schedule: str = "model-parallel") -> dict:
    """``{rank: {"f"|"b"|"s": median ms}}`` of the measured rounds' tasks in ``log_dir``
    (:func:`hydra_timeline.load`)."""
    out = {}
    for rank, rows in load(log_dir).items():
        by = collections.defaultdict(list)
        for row in rows:
            if row["schedule"] == schedule and row["what"] in ("forward", "backward", "step"):
                by[row["what"][0]].append((row["end_ns"] - row["start_ns"]) / 1e6)
        out[rank] = {k: statistics.median(v) for k, v in sorted(by.items())}
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="1,2,4", help="numbers of models, comma-separated")
    p.add_argument("--reps", type=int, default=3, help="times each K runs, in turn")
    p.add_argument("--rounds", type=int, default=4, help="measured rounds per run and schedule")
    args = p.parse_args(argv)
    from daydream.corelink import try_probe
    from daydream.cpuidle import polling_idle
    from daydream.validate import run_env
    from daydream.validation.hydra import SIZES

    for rep in range(args.reps):
        for k in (int(x) for x in args.models.split(",")):
            with tempfile.TemporaryDirectory() as tmp, polling_idle():
                before = try_probe()
                proc = subprocess.run([sys.executable, "-m", "daydream.workloads.hydra", "--models", str(k),
                                       "--devices", "2", "--shard0-layers", "4", "--rounds", str(args.rounds),
                                       "--warmup", "1", "--pin-cores", *SIZES,
                                       "--task-log", tmp], capture_output=True, text=True, env=run_env())
                after = try_probe()
                if proc.returncode:
                    raise SystemExit(f"hydra_k_tasks: K={k} failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
                res = json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1])
                med = {s: task_medians(tmp, s) for s in SCHEDULES}
            cores = "/".join(f"{c:.0f}" for c in (*before, *after)) or "-"
            print(f"rep {rep + 1} K={k} cores {cores} ns  per model: "
                  + "  ".join(f"{s} {res[s + '_ms'] / k:.2f} ms ("
                              + "; ".join(f"rank {r}: " + " ".join(f"{w}{v:.2f}" for w, v in m.items())
                                          for r, m in med[s].items()) + ")" for s in SCHEDULES), flush=True)


if __name__ == "__main__":
    main()
