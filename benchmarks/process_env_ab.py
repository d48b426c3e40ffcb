"""Does a process setting make a real validation job's speed steadier?  A/B in alternation.

Runs one of the validation's real jobs ``--pairs`` times in each of two settings, alternating
(ABBA...), each run in fresh processes, and prints each run and per setting the median, mean,
range and standard deviation.  Jobs (``--job``): ``pipeline`` (default), the pipeline
validation's 1-process job (``measure_pipeline("gpipe", ("--nproc", "1"))``: torch's
``ScheduleGPipe``, 4 micro-batches, 10 steps after 4); ``hydra``, the Hydra validation's
2-process job at K = 2 (``validation.hydra.run_real(2, 4)``: the model-parallel and the
shard-parallel makespan, each a median over 6 rounds).  Settings: ``--thp`` (torch's
``THP_MEM_ALLOC_ENABLE=1``: large tensors on 2 MB pages), ``--glibc-thp`` (glibc's heap
advised for transparent huge pages, ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1``: every tensor
the heap holds, under the validation's ``STEADY_MALLOC``) or ``--no-aslr`` (the job under
``setarch -R``: no address-space randomisation), each against the default.

Usage::

    python benchmarks/process_env_ab.py --thp --pairs 8
    python benchmarks/process_env_ab.py --no-aslr --pairs 8
    python benchmarks/process_env_ab.py --glibc-thp --job hydra --pairs 8
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["main"]


#: The environment variable and value of each environment setting.
ENV_SETTINGS = {"thp": ("THP_MEM_ALLOC_ENABLE", "1"), "glibc_thp": ("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1")}


def measure(job: str) -> dict:
    """One run of ``job`` in fresh processes: ``{figure: ms}``."""
    if job == "hydra":
        from daydream.validation.hydra import run_real
        return run_real(2, 4)
    from daydream.validation.pipeline import measure_pipeline
    return {"1-stage": measure_pipeline("gpipe", ("--nproc", "1"))}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--thp", action="store_true")
    which.add_argument("--glibc-thp", action="store_true")
    which.add_argument("--no-aslr", action="store_true")
    p.add_argument("--job", choices=("pipeline", "hydra"), default="pipeline")
    p.add_argument("--pairs", type=int, default=8)
    args = p.parse_args(argv)
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        wrapper = Path(tmp) / "python-no-aslr"
        wrapper.write_text(f'#!/bin/sh\nexec {shutil.which("setarch")} {os.uname().machine} -R {py} "$@"\n')
        wrapper.chmod(0o755)

        env = next((ENV_SETTINGS[k] for k in ENV_SETTINGS if getattr(args, k)), None)

        def setting(on: bool) -> None:
            if env is None:
                sys.executable = str(wrapper) if on else py
            elif on:
                os.environ[env[0]] = env[1]
            else:
                os.environ.pop(env[0], None)

        got = {False: [], True: []}
        try:
            for k in range(args.pairs):
                for on in ((False, True) if k % 2 == 0 else (True, False)):
                    setting(on)
                    got[on].append(measure(args.job))
                    print(time.strftime("%T"), "on " if on else "off",
                          " ".join(f"{name} {ms:.2f} ms" for name, ms in got[on][-1].items()), flush=True)
        finally:
            setting(False)
    for on, runs in got.items():
        for name in runs[0]:
            v = [run[name] for run in runs]
            print(f"{'on ' if on else 'off'} {name}: median {statistics.median(v):.2f} mean {statistics.fmean(v):.2f} "
                  f"min {min(v):.2f} max {max(v):.2f} sd {statistics.stdev(v) if len(v) > 1 else 0:.2f} ms")


if __name__ == "__main__":
    main()
