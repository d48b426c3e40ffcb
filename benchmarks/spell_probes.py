"""Which probe, taken at prediction time, follows a shared machine's slow spells?

Each pair (``--pairs``): trace the bundled MLP on one process (as ``daydream validate``'s
pipeline and Tessel rounds do), predict the Tessel V schedule ``--csv`` from it right away (its
co-run rate measured then: ``daydream.validate.predict_now``), time one sitting of the
calibration's GPipe-like hand-over exchange between two fresh pinned gloo processes
(``daydream.calibrate_procs.handover_sitting``: mean hand-over, share of stalls over 1 ms,
median send post), then run the schedule for real (2 processes, 10 steps, as validate does).
Prints one JSON line per pair with each CPU's steal time over it (``/proc/stat``, 10 ms
jiffies), then each probe's correlation with the real run's time.

``--runs N --steps S``: instead, N real runs of S steps each, every step's time printed, to
tell a slow start from a run slow for its whole life.

Usage (the schedule and profile from a ``daydream validate --opt tessel -o DIR`` run)::

    python benchmarks/spell_probes.py --csv DIR/tessel-v.csv --profile DIR/device-cpu-1t.json --pairs 40
    python benchmarks/spell_probes.py --csv DIR/tessel-v.csv --runs 10 --steps 34
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import tempfile
import time
from pathlib import Path

__all__ = ["main"]

V_SPEC = ("tessel:stages=2,microbatches=4,placement=0:1:1:0,partition=MLP.blocks.1:MLP.blocks.2:MLP.blocks.3,"
          "max_lag=3,budget=3000,action_overhead_us=132,schedule_csv={csv}")
PROBES = ("base_ms", "pred_ms", "corun", "handover_mean_us", "stall_share", "send_post_us")


def _steal() -> list:
    with open("/proc/stat") as f:
        return [int(ln.split()[8]) for ln in f if re.match(r"cpu\d", ln)]


def _pair(k: int, csv: str, profile: str, tdir: Path) -> dict:
    from daydream.calibrate_procs import handover_sitting
    from daydream.validate import predict_now, trace_workload
    from daydream.validation.pipeline import MODEL_ARGS, measure_pipeline

    spec = V_SPEC.format(csv=csv)
    steal0, t = _steal(), time.strftime("%H:%M:%S")
    path = trace_workload("mlp", tdir / f"t{k % 3}.json.gz", MODEL_ARGS, iterations=10)
    rep = predict_now(path, [spec], profile)[spec]
    rate = next((float(m.group(1)) for n in rep.notes for m in [re.search(r"at ([0-9.]+)x the speed", n)] if m), 1.0)
    sit = handover_sitting(60)
    h = sit.handovers_ns or (0,)
    real = measure_pipeline("csv", ("--csv", csv), steps=10)
    return {"t": t, "base_ms": round(rep.baseline_ms, 2), "pred_ms": round(rep.predicted_ms, 2), "corun": rate,
            "handover_mean_us": round(statistics.fmean(h) / 1e3), "stall_share": round(sum(x > 1e6 for x in h) / len(h), 3),
            "send_post_us": round(statistics.median(sit.send_posts_ns or (0,)) / 1e3), "real_ms": round(real, 2),
            "steal_jiffies": [b - a for a, b in zip(steal0, _steal())]}


def _correlations(got: list) -> None:
    import numpy as np

    real = np.array([g["real_ms"] for g in got])
    for key in PROBES:
        r = np.corrcoef(np.array([g[key] for g in got], float), real)[0, 1]
        print(f"{key}: correlation with the real run's time {r:+.2f} over {len(got)} pairs")
    err = [100 * (g["pred_ms"] / g["real_ms"] - 1) for g in got]
    print(f"per-pair error: median {statistics.median(err):+.1f} %, median absolute "
          f"{statistics.median(abs(e) for e in err):.1f} %")


def _runs(n: int, steps: int, csv: str) -> None:
    from daydream.validation.pipeline import _run

    for _ in range(n):
        s = _run("csv", ("--csv", csv), steps=steps, warmup=0)["step_ms"]
        print(time.strftime("%H:%M:%S"), " ".join(f"{x:.0f}" for x in s), f"| steps 4-13 mean {statistics.fmean(s[4:14]):.1f}"
              + (f", steps 14- mean {statistics.fmean(s[14:]):.1f}" if len(s) > 14 else ""), flush=True)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--csv", required=True, help="the Tessel V schedule (validate's OUTPUT/tessel-v.csv)")
    p.add_argument("--profile", help="device profile (validate's OUTPUT/device-cpu-1t.json); needed with --pairs")
    p.add_argument("--pairs", type=int, default=0, help="probe-and-run pairs")
    p.add_argument("--runs", type=int, default=0, help="real runs with every step's time")
    p.add_argument("--steps", type=int, default=34, help="steps of each of --runs")
    args = p.parse_args(argv)
    if args.pairs and not args.profile:
        p.error("--pairs needs --profile")
    if args.runs:
        _runs(args.runs, args.steps, args.csv)
    got = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.pairs):
            got.append(_pair(k, args.csv, args.profile, Path(tmp)))
            print(json.dumps(got[-1]), flush=True)
    if len(got) > 2:
        _correlations(got)


if __name__ == "__main__":     # the hand-over sitting spawns processes that re-import this file
    main()
