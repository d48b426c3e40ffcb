"""GPU tracing overhead: daydream's CUPTI extension against torch.profiler's CUDA activity.

One process per workload on a CUDA device.  Rounds run three blocks of
iterations in rotating order: untraced, traced with kernels from
torch.profiler (``daydream.trace(..., use_cupti=False)``) and traced with
kernels from ``daydream.cupti`` (``use_cupti=True``); layer markers and shapes
as ``daydream trace`` records them.  Iteration time is the training loop's
step-to-step time (it synchronises the device every step).  In a traced block
the two warm-up iterations and the last one (which writes the file) are left
out.

    python benchmarks/gpu_overhead.py --workloads mlp,cnn,transformer --rounds 6 --block 10

Goal (issue 3): the extension's overhead against torch.profiler's, the
``cupti_vs_torch_pct`` column (median cupti-traced / median torch-traced - 1),
<= 2 %.  The last cupti-traced file of each workload is checked for kernels
(``kernels_in_cupti_trace``) so that a fast but empty recording cannot pass.
"""
from __future__ import annotations

import argparse
import gzip
import importlib
import json
import statistics
import sys
import tempfile
from pathlib import Path

from daydream.collect import trace
from daydream.workloads.common import prepare

__all__ = ["measure", "main"]

ARMS = ("untraced", "torch.profiler", "cupti")


def _kernels(path: Path) -> tuple:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        doc = json.load(fh)
    n = sum(1 for e in doc.get("traceEvents", []) if isinstance(e, dict) and e.get("cat") == "kernel")
    return n, doc.get("daydream", {}).get("activities", {})


def measure(name: str, rounds: int, block: int, extra: list, keep_dir: Path | None = None) -> dict:
    """Median step time (ms) of each arm of one workload, and the overheads."""
    mod = importlib.import_module(f"daydream.workloads.{name}")
    w = prepare(name, mod.build, ["--quiet", "--device", "cuda", *extra], mod.add_args, mod.BATCH_SIZE)
    w.train(5)
    times = {a: [] for a in ARMS}
    last = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            order = ARMS[r % 3:] + ARMS[:r % 3]
            for arm in order:
                if arm == "untraced":
                    times[arm] += w.train(block)[1:]
                    continue
                path = (keep_dir or Path(tmp)) / f"{name}.{arm.replace('.', '_')}.json.gz"
                path.unlink(missing_ok=True)
                with trace(path, warmup=2, iterations=block, use_cupti=arm == "cupti"):
                    t = w.train(block + 2)
                times[arm] += t[2:block + 1]
                last[arm] = path
        kernels, acts = _kernels(last["cupti"])
        torch_kernels, _ = _kernels(last["torch.profiler"])
    med = {a: statistics.median(v) * 1e3 for a, v in times.items()}
    return {
        "workload": name,
        **{f"{a}_median_ms": round(m, 4) for a, m in med.items()},
        "torch_overhead_pct": round((med["torch.profiler"] / med["untraced"] - 1) * 100, 2),
        "cupti_overhead_pct": round((med["cupti"] / med["untraced"] - 1) * 100, 2),
        "cupti_vs_torch_pct": round((med["cupti"] / med["torch.profiler"] - 1) * 100, 2),
        "kernels_in_cupti_trace": kernels,
        "kernels_in_torch_trace": torch_kernels,
        "cupti_source": acts.get("cuda_source"),
        "cupti_notes": acts.get("notes", []),
        "samples": [len(times[a]) for a in ARMS],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="mlp,cnn,transformer")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--block", type=int, default=10)
    ap.add_argument("--keep", type=Path, help="folder to keep the last trace of each arm in")
    ap.add_argument("extra", nargs="*", help="flags passed to every workload (after --)")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("gpu_overhead: no CUDA device here", file=sys.stderr)
        return 2
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    rows = []
    for n in args.workloads.split(","):
        rows.append(measure(n, args.rounds, args.block, args.extra, args.keep))
        print(json.dumps(rows[-1]), flush=True)
    print(f"{'workload':12s} {'untraced':>9s} {'torch':>9s} {'cupti':>9s} {'torch ovh':>9s} {'cupti ovh':>9s}"
          f" {'cupti/torch':>11s} {'kernels':>8s}")
    for r in rows:
        print(f"{r['workload']:12s} {r['untraced_median_ms']:9.3f} {r['torch.profiler_median_ms']:9.3f} "
              f"{r['cupti_median_ms']:9.3f} {r['torch_overhead_pct']:8.2f}% {r['cupti_overhead_pct']:8.2f}% "
              f"{r['cupti_vs_torch_pct']:10.2f}% {r['kernels_in_cupti_trace']:8d}")
    ok = all(r["cupti_vs_torch_pct"] <= 2.0 and r["kernels_in_cupti_trace"] > 0 for r in rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
