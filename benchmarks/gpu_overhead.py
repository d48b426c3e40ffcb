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
import contextlib
import gzip
import importlib
import json
import statistics
from collections import Counter
import sys
import tempfile
from pathlib import Path

from daydream import cupti
from daydream.collect import trace
from daydream.cupti import CuptiTracer
from daydream.workloads.common import prepare

__all__ = ["measure", "main"]

ARMS = ("untraced", "torch.profiler", "cupti")
#: Arms that take the overhead apart (``--arms``): the CPU side alone (torch.profiler, CPU
#: activity only), daydream's CUPTI tracer alone (no torch.profiler), and the extension
#: recording every runtime/driver call (no ``DEFAULT_SKIPPED_APIS``).
EXTRA_ARMS = ("cpu-only", "cupti-alone", "cupti-all")


@contextlib.contextmanager
def _arm(arm: str, path: Path, block: int):
    """The recording of one arm around ``block + 2`` iterations."""
    if arm == "cupti-alone":
        with CuptiTracer():
            yield
        return
    kw = {"activities": ("cpu",)} if arm == "cpu-only" else {"use_cupti": arm.startswith("cupti")}
    saved = cupti.DEFAULT_SKIPPED_APIS
    if arm == "cupti-all":
        cupti.DEFAULT_SKIPPED_APIS = ()
    try:
        with trace(path, warmup=2, iterations=block, **kw):
            yield
    finally:
        cupti.DEFAULT_SKIPPED_APIS = saved


def _kernels(path: Path) -> tuple:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        doc = json.load(fh)
    n = sum(1 for e in doc.get("traceEvents", []) if isinstance(e, dict) and e.get("cat") == "kernel")
    return n, doc.get("daydream", {}).get("activities", {})


def measure(name: str, rounds: int, block: int, extra: list, keep_dir: Path | None = None,
            arms=ARMS) -> dict:
    """Median step time (ms) of each arm of one workload, and the overheads."""
    mod = importlib.import_module(f"daydream.workloads.{name}")
    w = prepare(name, mod.build, ["--quiet", "--device", "cuda", *extra], mod.add_args, mod.BATCH_SIZE)
    w.train(5)
    times = {a: [] for a in arms}
    last = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            order = arms[r % len(arms):] + arms[:r % len(arms)]
            for arm in order:
                if arm == "untraced":
                    times[arm] += w.train(block)[1:]
                    continue
                path = (keep_dir or Path(tmp)) / f"{name}.{arm.replace('.', '_')}.json.gz"
                path.unlink(missing_ok=True)
                with _arm(arm, path, block):
                    t = w.train(block + 2)
                times[arm] += t[2:block + 1]
                last[arm] = path
        with CuptiTracer() as alone:  # which kinds arrive with no torch.profiler session around
            w.train(3)
        alone_kinds = Counter(cupti.ActivityKind(int(k)).name for k in alone.records.columns["kind"])
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
        "samples": [len(times[a]) for a in arms],
        "cupti_alone_rows_by_kind": dict(alone_kinds),
        "cupti_skipped_apis": acts.get("cupti_skipped_apis"),
        **{f"{a}_vs_untraced_pct": round((med[a] / med["untraced"] - 1) * 100, 2)
           for a in arms if a in EXTRA_ARMS},
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="mlp,cnn,transformer")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--block", type=int, default=10)
    ap.add_argument("--keep", type=Path, help="folder to keep the last trace of each arm in")
    ap.add_argument("--arms", default=",".join(ARMS),
                    help=f"arms to run; the first three are required, more from {', '.join(EXTRA_ARMS)}")
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
        arms = tuple(args.arms.split(","))
        if arms[:3] != ARMS or not set(arms) <= set(ARMS + EXTRA_ARMS):
            ap.error(f"--arms must start with {','.join(ARMS)} and add only {', '.join(EXTRA_ARMS)}")
        rows.append(measure(n, args.rounds, args.block, args.extra, args.keep, arms))
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
