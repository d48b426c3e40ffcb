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
           "emit", "with_steady_malloc", "split_mlp"]

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


def split_mlp(cut: int, core: int, hidden: int = 512, batch_size: int = 64):
    """The validation MLP on one thread pinned to ``core``, split at Hydra's cut into two
    ``nn.Sequential`` shards of its layers (``cut`` on the first), with the Hydra runtime's SGD
    (momentum 0.9) and one batch: ``(model, first, second, optimizer, data, labels)``."""
    import torch
    from torch import nn

    from daydream.workloads.hydra import units_of
    from daydream.workloads.mlp import MLP

    torch.set_num_threads(1)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {core})
    torch.manual_seed(0)
    model = MLP(512, hidden, 4, 10)
    units = units_of(model)
    first, second = nn.Sequential(*units[:cut]), nn.Sequential(*units[cut:])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    return model, first, second, opt, torch.randn(batch_size, 512), torch.randint(0, 10, (batch_size,))


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
