"""Benchmark (c): a daydream command end to end on the largest trace (files -> answer).

Runs the CLI in a fresh process (``daydream replay --json PATHS``), ``--runs``
times, and reports the median wall time, MB/s of JSON and peak RSS (the CLI
process and its loader workers).  ``--whatif OPT`` (repeatable) benchmarks
``daydream whatif PATHS --opt OPT --json`` instead: the hook for the what-if
command once it lands; nothing else changes.

Usage::

    python benchmarks/bench_e2e.py /tmp/daydream_large --runs 3
    python benchmarks/bench_e2e.py /tmp/daydream_large --whatif fused-adam
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bench import REPO  # noqa: E402


def command(paths, whatif) -> list[str]:
    """argv of the benchmarked CLI command."""
    cli = [sys.executable, "-c", "import sys; from daydream.cli import main; sys.argv[0] = 'daydream'; main()"]
    if whatif:
        return cli + ["whatif", *paths, *sum((["--opt", o] for o in whatif), []), "--json"]
    return cli + ["replay", *paths, "--json"]


def run_once(cmd) -> dict:
    """Run ``cmd`` in a child process (via a wrapper, so its peak RSS is its own)."""
    wrapper = ("import resource, subprocess, sys, time, json\n"
               "t = time.perf_counter(); p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
               "dt = time.perf_counter() - t\n"
               "if p.returncode: sys.stderr.write(p.stderr); sys.exit(p.returncode)\n"
               "ru = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
               "print(json.dumps({'wall_s': dt, 'peak_rss_MB': ru.ru_maxrss / 1024, 'out': p.stdout}))\n")
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""), DAYDREAM_PROGRESS="0")
    p = subprocess.run([sys.executable, "-c", wrapper, *cmd], capture_output=True, text=True, env=env)
    if p.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--whatif", action="append", metavar="OPT", help="benchmark `daydream whatif --opt OPT`")
    a = ap.parse_args(argv)
    from daydream.loader import expand_paths
    from daydream.loader.memory import json_bytes

    mb = sum(json_bytes(p) for p in expand_paths(a.paths)) / 1e6
    cmd = command(a.paths, a.whatif)
    runs = []
    for i in range(a.runs):
        r = run_once(cmd)
        runs.append(r)
        print(f"  run {i + 1}/{a.runs}: {r['wall_s']:.1f} s, peak RSS {r['peak_rss_MB']:.0f} MB", file=sys.stderr)
    wall = statistics.median(r["wall_s"] for r in runs)
    rss = statistics.median(r["peak_rss_MB"] for r in runs)
    out = json.loads(runs[-1]["out"])
    what = "whatif " + " ".join(a.whatif) if a.whatif else "replay"
    print(f"daydream {what} end to end, {mb:.0f} MB of JSON (median of {a.runs} runs): {wall:.1f} s, "
          f"{mb / wall:.1f} MB/s, peak RSS (largest process) {rss:.0f} MB")
    keys = ("measured_ms", "simulated_ms", "error_pct", "baseline_ms", "predicted_ms", "speedup")
    print("  result: " + ", ".join(f"{k}={out[k]:.4g}" for k in keys if isinstance(out.get(k), (int, float))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
