"""Does taking turns change what the 1-stage pipeline row measures?  Runs alone against runs in turns.

Each round (order rotated) traces the pipeline validation's MLP baseline alone (10 iterations),
runs the real 1-stage job alone (torch's ``ScheduleGPipe``, ``--nproc 1``, 10 steps after 4), and
both in turns on one core (:func:`daydream.validation.pipeline.one_stage_in_turns`, as the
validation's 1-stage row measures since session 61).  ``--pin CORE`` runs the alone runs on that
core (``taskset``), as the runs in turns are; without it they run where the system puts them.
Prints per round each side's mean iteration alone and in turns and the job-over-trace ratio of
both ways, then the medians over the rounds: in turns over alone for each side (what turning
costs each) and the two ratios.

``--jobs-only`` instead runs only the real job, unpinned and on each core in turn (order
alternating), and prints their medians and spreads.

Usage::

    python benchmarks/onestage_alone_turns.py --rounds 8 --pin 1
    python benchmarks/onestage_alone_turns.py --rounds 6 --jobs-only
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
from pathlib import Path

from onestage_turns import iteration_ms

__all__ = ["main"]


def _job_ms(prefix=(), schedule: str = "gpipe", microbatches: int = 4) -> float:
    """Mean step of one untraced run of the pipeline workload on one process (``prefix``: e.g.
    ``taskset``): torch's 1-stage ``ScheduleGPipe`` by default, ``none`` the plain loop."""
    from daydream.validate import run_env
    from daydream.validation import pipeline as P

    cmd = P._cmd(schedule, ("--nproc", "1"), P.WARMUP_STEPS + P.STEPS, P.WARMUP_STEPS, microbatches)
    proc = subprocess.run([*prefix, *cmd], capture_output=True, text=True, env=run_env())
    return P._summary(schedule, proc.stdout, proc.stderr)["mean_ms"]


def _trace(path: Path, prefix=()) -> Path:
    """The pipeline validation's baseline traced into ``path`` (``prefix``: e.g. ``taskset``)."""
    from daydream.validate import _trace_cmd, run_env
    from daydream.validation import pipeline as P

    subprocess.run([*prefix, *_trace_cmd("mlp", path, P.MODEL_ARGS, 2, P.STEPS)], capture_output=True,
                   env=run_env(), check=True)
    return path


def _trace_ms(path: Path, prefix=()) -> float:
    return iteration_ms(_trace(path, prefix))


def _jobs_only(rounds: int) -> None:
    cores = sorted(os.sched_getaffinity(0))
    cfgs = {"free": (), **{f"core{c}": ("taskset", "-c", str(c)) for c in cores}}
    got = {k: [] for k in cfgs}
    for r in range(rounds):
        for name, prefix in (list(cfgs.items()) if r % 2 == 0 else list(cfgs.items())[::-1]):
            got[name].append(_job_ms(prefix))
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in got.items()) + " ms", flush=True)
    print(", ".join(f"{k} median {statistics.median(v):.1f} ms (sd {statistics.pstdev(v):.1f})" for k, v in got.items()))


def main(argv=None) -> None:
    from daydream.validation.pipeline import one_stage_in_turns

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--pin", type=int, default=None, help="run the alone runs on this core")
    p.add_argument("--jobs-only", action="store_true", help="only the real job: unpinned and on each core")
    args = p.parse_args(argv)
    if args.jobs_only:
        _jobs_only(args.rounds)
        return
    prefix = ("taskset", "-c", str(args.pin)) if args.pin is not None else ()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        for k in range(args.rounds):
            got = {}

            def pair(k=k):
                path, got["jp"] = one_stage_in_turns(d / f"t{k}.json.gz")
                got["bp"] = iteration_ms(path)

            steps = [lambda k=k: got.__setitem__("ba", _trace_ms(d / f"a{k}.json.gz", prefix)),
                     lambda: got.__setitem__("ja", _job_ms(prefix)), pair]
            for step in steps[k % 3:] + steps[:k % 3]:
                step()
            rows.append(got)
            print(f"round {k + 1}: alone trace {got['ba']:.1f} job {got['ja']:.1f} ms (x{got['ja'] / got['ba']:.3f}); "
                  f"in turns trace {got['bp']:.1f} job {got['jp']:.1f} ms (x{got['jp'] / got['bp']:.3f})", flush=True)
    med = statistics.median
    print(f"in turns over alone: trace x{med(r['bp'] / r['ba'] for r in rows):.3f}, job "
          f"x{med(r['jp'] / r['ja'] for r in rows):.3f}; job over trace: alone x{med(r['ja'] / r['ba'] for r in rows):.3f}, "
          f"in turns x{med(r['jp'] / r['bp'] for r in rows):.3f}")


if __name__ == "__main__":
    main()
