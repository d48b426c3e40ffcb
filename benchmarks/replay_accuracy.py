"""Replay accuracy benchmark (issue: core pipeline goal <= 1% median, <= 3% worst).

Replays every timing trace in ../shared/traces/public and fresh CPU traces of
the bundled workloads recorded here with ``daydream trace``; prints one row per
trace and the median and worst error of the mean iteration time.

    .venv/bin/python benchmarks/replay_accuracy.py [--no-record] [--shared DIR]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from daydream.analysis import replay
from daydream.demo import _DEFAULT_SHARED, _public_traces
from daydream.validate import trace_workload


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", type=Path, default=_DEFAULT_SHARED)
    ap.add_argument("--no-record", action="store_true", help="skip recording CPU traces")
    ap.add_argument("--workloads", default="mlp,cnn,transformer")
    args = ap.parse_args()
    paths = _public_traces(args.shared)
    tmp = Path(tempfile.mkdtemp(prefix="daydream-bench-"))
    if not args.no_record:
        for w in args.workloads.split(","):
            print(f"recording {w} ...", file=sys.stderr)
            paths.append(trace_workload(w, tmp / f"{w}.trace.json.gz"))
    rows = []
    print(f"{'trace':<48} {'ranks':>5} {'iters':>5} {'measured ms':>12} {'simulated ms':>12} {'error %':>8} {'s':>5}")
    for p in paths:
        t0 = time.time()
        rep, res = replay(p)
        rows.append(rep.error_pct)
        print(f"{str(p.relative_to(p.parents[1]))[:48]:<48} {len(res.graph.ranks):>5} {len(rep.iterations):>5} "
              f"{rep.measured_ms:12.3f} {rep.simulated_ms:12.3f} {rep.error_pct:8.4f} {time.time() - t0:5.1f}")
    print(f"\n{len(rows)} traces: median error {statistics.median(rows):.4f}%, worst {max(rows):.4f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
