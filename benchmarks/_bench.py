"""Shared helpers of the performance benchmarks: fresh-process runs, medians, peak memory.

Every measurement runs in a fresh Python process (so peak RSS is its own and
caches are cold), a few times; the median is reported.  The machine is shared,
so single runs are noisy.
"""
from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys

__all__ = ["peak_rss_bytes", "children_peak_rss_bytes", "current_rss_bytes", "run_fresh", "median_runs",
           "emit", "with_steady_malloc"]

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far (Linux: ru_maxrss is KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def children_peak_rss_bytes() -> int:
    """Largest peak RSS among waited-for child processes (e.g. loader workers)."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024


def current_rss_bytes() -> int:
    """Resident set size now (from /proc/self/statm)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def with_steady_malloc() -> None:
    """Re-execute this script under validate's malloc settings where they are missing
    (:data:`daydream.heapmode.STEADY_MALLOC`: without them each fresh gradient of 1 MiB or more
    is a new mapping, page faults in every backward)."""
    from daydream.heapmode import STEADY_MALLOC

    if any(os.environ.get(k) != v for k, v in STEADY_MALLOC.items()):
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **STEADY_MALLOC})


def emit(result: dict) -> None:
    """Print one measurement as the last stdout line (read by :func:`run_fresh`)."""
    print("RESULT " + json.dumps(result), flush=True)


def run_fresh(script: str, args: list[str], timeout_s: float = 3600) -> dict:
    """Run ``script --once ARGS`` in a fresh interpreter; return its emitted result."""
    cmd = [sys.executable, script, "--once", *args]
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
    lines = [l for l in out.stdout.splitlines() if l.startswith("RESULT ")]
    return json.loads(lines[-1][7:])


def median_runs(script: str, args: list[str], runs: int) -> tuple[dict, list[dict]]:
    """Run a measurement ``runs`` times; the per-key median of numeric results, and all runs."""
    all_runs = []
    for i in range(runs):
        r = run_fresh(script, args)
        all_runs.append(r)
        print(f"  run {i + 1}/{runs}: " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                                   for k, v in r.items()), file=sys.stderr, flush=True)
    med = {}
    for k, v in all_runs[0].items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            med[k] = statistics.median(r[k] for r in all_runs)
        else:
            med[k] = v
    return med, all_runs
