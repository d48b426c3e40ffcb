"""Where does the host put this VM's cores?  The core-to-core probe over time, and beside runs.

``daydream.corelink.core_to_core_ns`` times a cache line's round trip between
the first two CPUs.  Two modes:

* sampling (default): one probe every ``--interval`` s for ``--seconds``;
  prints the samples, splits them at their widest gap into a low and a high
  group (no threshold is assumed), says how many fall in each, how far
  apart their medians are, and how long a spell in one group lasts;
* ``--runs N``: N runs of a bundled workload (untraced, ``--step-times``,
  validate's malloc settings), each with a probe just before and just after;
  prints each run's median step time beside its two probes, so a run's speed
  can be set against where the cores were.

Usage::

    python benchmarks/core_to_core.py --seconds 40
    python benchmarks/core_to_core.py --runs 8 --workload transformer -- --threads 2 --batch-size 8
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from daydream.corelink import core_to_core_ns
from daydream.validate import run_env

__all__ = ["main", "split_at_widest_gap", "spells"]


def split_at_widest_gap(values) -> float:
    """The midpoint of the widest gap between sorted ``values`` (at least two).

    >>> split_at_widest_gap([330, 55, 340, 60, 52])
    195.0
    """
    v = sorted(values)
    i = max(range(len(v) - 1), key=lambda k: v[k + 1] - v[k])
    return (v[i] + v[i + 1]) / 2


def spells(flags) -> list:
    """Lengths of the runs of equal consecutive ``flags``.

    >>> spells([True, True, False, True, True, True])
    [2, 1, 3]
    """
    out = []
    for k, f in enumerate(flags):
        if k and f == flags[k - 1]:
            out[-1] += 1
        else:
            out.append(1)
    return out


def sample(seconds: float, interval: float) -> None:
    values = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        values.append(core_to_core_ns())
        time.sleep(interval)
    print("samples (ns):", " ".join(f"{x:.0f}" for x in values))
    if len(values) < 2:
        return
    cut = split_at_widest_gap(values)
    high = [x > cut for x in values]
    lo, hi = [x for x in values if x <= cut], [x for x in values if x > cut]
    m_lo, m_hi = statistics.median(lo), statistics.median(hi)
    print(f"split at {cut:.0f} ns: {len(lo)} low (median {m_lo:.0f} ns), {len(hi)} high (median {m_hi:.0f} ns), "
          f"medians {m_hi / m_lo:.1f}x apart (two placements when several-fold, noise when near 1)")
    print(f"spells (samples, {interval:g} s apart): {spells(high)}")


def runs(n: int, workload: str, args: list) -> None:
    cmd = [sys.executable, "-m", f"daydream.workloads.{workload}", "--step-times", "--quiet", *args]
    for k in range(n):
        before = core_to_core_ns()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=run_env())
        after = core_to_core_ns()
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("step times ms:")]
        if proc.returncode != 0 or not lines:
            sys.exit(f"core_to_core: {workload} failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
        steps = [float(x) for x in lines[-1].split(":", 1)[1].split()]
        print(f"run {k + 1}: probe before {before:.0f} ns, after {after:.0f} ns; median step "
              f"{statistics.median(steps[len(steps) // 4:]):.1f} ms over the last {len(steps) - len(steps) // 4}",
              flush=True)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--seconds", type=float, default=40.0)
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--runs", type=int, default=0, help="runs of --workload, each between two probes")
    p.add_argument("--workload", default="transformer")
    p.add_argument("args", nargs="*", help="after --: the workload's flags")
    a = p.parse_args(argv)
    if a.runs:
        runs(a.runs, a.workload, a.args)
    else:
        sample(a.seconds, a.interval)


if __name__ == "__main__":
    main()
