"""Does a process setting make the real 1-stage pipeline run's speed steadier?  A/B in alternation.

Runs the pipeline validation's 1-process job (``measure_pipeline("gpipe", ("--nproc", "1"))``:
torch's ``ScheduleGPipe``, 4 micro-batches, 10 steps after 4) ``--pairs`` times in each of two
settings, alternating (ABBA...), and prints each run and per setting the median, mean, range and
standard deviation.  Settings: ``--thp`` (torch's ``THP_MEM_ALLOC_ENABLE=1``: large tensors on
2 MB pages) or ``--no-aslr`` (the job under ``setarch -R``: no address-space randomisation),
each against the default.

Usage::

    python benchmarks/process_env_ab.py --thp --pairs 8
    python benchmarks/process_env_ab.py --no-aslr --pairs 8
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


def main(argv=None) -> None:
    from daydream.validation.pipeline import measure_pipeline

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--thp", action="store_true")
    which.add_argument("--no-aslr", action="store_true")
    p.add_argument("--pairs", type=int, default=8)
    args = p.parse_args(argv)
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        wrapper = Path(tmp) / "python-no-aslr"
        wrapper.write_text(f'#!/bin/sh\nexec {shutil.which("setarch")} {os.uname().machine} -R {py} "$@"\n')
        wrapper.chmod(0o755)

        def setting(on: bool) -> None:
            if args.thp:
                if on:
                    os.environ["THP_MEM_ALLOC_ENABLE"] = "1"
                else:
                    os.environ.pop("THP_MEM_ALLOC_ENABLE", None)
            else:
                sys.executable = str(wrapper) if on else py

        got = {False: [], True: []}
        try:
            for k in range(args.pairs):
                for on in ((False, True) if k % 2 == 0 else (True, False)):
                    setting(on)
                    got[on].append(measure_pipeline("gpipe", ("--nproc", "1")))
                    print(time.strftime("%T"), "on " if on else "off", f"{got[on][-1]:.1f} ms", flush=True)
        finally:
            setting(False)
    for on, v in got.items():
        print(f"{'on ' if on else 'off'}: median {statistics.median(v):.1f} mean {statistics.fmean(v):.1f} "
              f"min {min(v):.1f} max {max(v):.1f} sd {statistics.stdev(v) if len(v) > 1 else 0:.1f} ms")


if __name__ == "__main__":
    main()
