"""GPU tracing overhead: daydream's CUPTI extension against torch.profiler's CUDA activity.

One process per workload on a CUDA device.  Rounds run one block of
iterations per arm in rotating order: untraced, traced with kernels from
torch.profiler (``daydream.trace(..., use_cupti=False)``) and traced with
kernels from ``daydream.cupti`` (``use_cupti=True``), plus any diagnostic
arms; layer markers and shapes as ``daydream trace`` records them.  Iteration
time is the training loop's step-to-step time (it synchronises the device
every step).  In a traced block the two warm-up iterations and the last one
(which writes the file) are left out.

Every block starts after ``--settle-s`` seconds of untraced steps: writing a
trace leaves the GPU idle for a second, and an idle GPU drops its clocks, so
without it the block after a traced one starts slow whatever its arm.  Give
``--rounds`` as a multiple of the number of arms, so that every arm takes every
place in the rotation equally often.

    python benchmarks/gpu_overhead.py --workloads mlp,cnn,transformer --rounds 10 --block 10
    python benchmarks/gpu_overhead.py --workloads mlp --rounds 2 --device cpu   # the plumbing, here

Goal (issue 3): the extension's overhead against torch.profiler's, <= 2 %.
Two estimates: ``cupti_vs_torch_pct`` (median of every cupti-traced step over
the median of every torch-traced one, - 1) and ``cupti_vs_torch_paired_pct``
(the median over rounds of the ratio of the two arms' block medians in the
same round, - 1, with its range over rounds), which cancels drift between
rounds.  The last cupti-traced file of each workload is checked for kernels
(``kernels_in_cupti_trace``) so that a fast but empty recording cannot pass.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import gzip
import importlib
import json
import statistics
from collections import Counter
import sys
import tempfile
import time
from pathlib import Path

from daydream import cupti, cupti_export
from daydream.collect import trace
from daydream.cupti import CuptiTracer
from daydream.workloads.common import prepare

__all__ = ["measure", "main"]

ARMS = ("untraced", "torch.profiler", "cupti")
#: Arms that take the overhead apart (``--arms``): the CPU side alone (torch.profiler, CPU
#: activity only), daydream's CUPTI tracer alone (no torch.profiler), the extension
#: recording every runtime/driver call (no ``DEFAULT_SKIPPED_APIS``), and the extension
#: without synchronisation records (torch.profiler records none by default).
EXTRA_ARMS = ("cpu-only", "cupti-alone", "cupti-all", "cupti-nosync")


@contextlib.contextmanager
def _arm(arm: str, path: Path, block: int):
    """The recording of one arm around ``block + 2`` iterations."""
    if arm == "cupti-alone":
        with CuptiTracer():
            yield
        return
    kw = {"activities": ("cpu",)} if arm == "cpu-only" else {"use_cupti": arm.startswith("cupti")}
    saved = cupti.DEFAULT_SKIPPED_APIS, cupti_export.CuptiTracer
    if arm == "cupti-all":
        cupti.DEFAULT_SKIPPED_APIS = ()
    if arm == "cupti-nosync":
        kinds = tuple(k for k in cupti.DEFAULT_KINDS if k != cupti.ActivityKind.SYNCHRONIZATION)
        cupti_export.CuptiTracer = functools.partial(CuptiTracer, kinds=kinds)
    try:
        with trace(path, warmup=2, iterations=block, **kw):
            yield
    finally:
        cupti.DEFAULT_SKIPPED_APIS, cupti_export.CuptiTracer = saved


def _kernels(path: Path) -> tuple:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        doc = json.load(fh)
    n = sum(1 for e in doc.get("traceEvents", []) if isinstance(e, dict) and e.get("cat") == "kernel")
    return n, doc.get("daydream", {}).get("activities", {})


def _settle(w, seconds: float) -> None:
    """Untraced steps for ``seconds``: the GPU back at its clocks before a block."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        w.train(1)


def _paired(blocks: dict, a: str, b: str) -> dict:
    """Median over rounds of (block median of ``a`` / block median of ``b`` - 1), in %, and its range."""
    pct = sorted((statistics.median(x) / statistics.median(y) - 1) * 100 for x, y in zip(blocks[a], blocks[b]))
    return {"median": round(statistics.median(pct), 2), "min": round(pct[0], 2), "max": round(pct[-1], 2)}


def measure(name: str, rounds: int, block: int, extra: list, keep_dir: Path | None = None,
            arms=ARMS, settle_s: float = 0.3, device: str = "cuda") -> dict:
    """Median step time (ms) of each arm of one workload, and the overheads."""
    mod = importlib.import_module(f"daydream.workloads.{name}")
    w = prepare(name, mod.build, ["--quiet", "--device", device, *extra], mod.add_args, mod.BATCH_SIZE)
    _settle(w, 2.0)
    blocks = {a: [] for a in arms}  # per round, the block's step times (s)
    last = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            order = arms[r % len(arms):] + arms[:r % len(arms)]
            for arm in order:
                _settle(w, settle_s)
                if arm == "untraced":
                    blocks[arm].append(w.train(block)[1:])
                    continue
                path = (keep_dir or Path(tmp)) / f"{name}.{arm.replace('.', '_')}.json.gz"
                path.unlink(missing_ok=True)
                with _arm(arm, path, block):
                    t = w.train(block + 2)
                blocks[arm].append(t[2:block + 1])
                last[arm] = path
        alone_kinds = {}
        if device == "cuda":
            with CuptiTracer() as alone:  # which kinds arrive with no torch.profiler session around
                w.train(3)
            alone_kinds = Counter(cupti.ActivityKind(int(k)).name for k in alone.records.columns["kind"])
        kernels, acts = _kernels(last["cupti"])
        torch_kernels, _ = _kernels(last["torch.profiler"])
    med = {a: statistics.median([t for b in v for t in b]) * 1e3 for a, v in blocks.items()}
    return {
        "workload": name,
        **{f"{a}_median_ms": round(m, 4) for a, m in med.items()},
        "torch_overhead_pct": round((med["torch.profiler"] / med["untraced"] - 1) * 100, 2),
        "cupti_overhead_pct": round((med["cupti"] / med["untraced"] - 1) * 100, 2),
        "cupti_vs_torch_pct": round((med["cupti"] / med["torch.profiler"] - 1) * 100, 2),
        "cupti_vs_torch_paired_pct": _paired(blocks, "cupti", "torch.profiler"),
        "torch_vs_untraced_paired_pct": _paired(blocks, "torch.profiler", "untraced"),
        **{f"{a}_vs_torch_paired_pct": _paired(blocks, a, "torch.profiler") for a in arms if a in EXTRA_ARMS},
        "block_medians_ms": {a: [round(statistics.median(b) * 1e3, 4) for b in v] for a, v in blocks.items()},
        "step_in_block_medians_ms": {a: [round(statistics.median(s) * 1e3, 4) for s in zip(*v)]
                                     for a, v in blocks.items()},
        "kernels_in_cupti_trace": kernels,
        "kernels_in_torch_trace": torch_kernels,
        "cupti_source": acts.get("cuda_source"),
        "cupti_notes": acts.get("notes", []),
        "samples": [sum(map(len, blocks[a])) for a in arms],
        "settle_s": settle_s,
        "cupti_alone_rows_by_kind": dict(alone_kinds),
        "cupti_skipped_apis": acts.get("cupti_skipped_apis"),
        **{f"{a}_vs_untraced_pct": round((med[a] / med["untraced"] - 1) * 100, 2)
           for a in arms if a in EXTRA_ARMS},
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="mlp,cnn,transformer")
    ap.add_argument("--rounds", type=int, default=10, help="a multiple of the number of arms")
    ap.add_argument("--block", type=int, default=10)
    ap.add_argument("--keep", type=Path, help="folder to keep the last trace of each arm in")
    ap.add_argument("--arms", default=",".join(ARMS),
                    help=f"arms to run; the first three are required, more from {', '.join(EXTRA_ARMS)}")
    ap.add_argument("--settle-s", type=float, default=0.3, help="untraced steps before every block (s)")
    ap.add_argument("--device", default="cuda", help="cuda; cpu only to check the script itself")
    ap.add_argument("extra", nargs="*", help="flags passed to every workload (after --)")
    args = ap.parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_overhead: no CUDA device here", file=sys.stderr)
        return 2
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    rows = []
    for n in args.workloads.split(","):
        arms = tuple(args.arms.split(","))
        if arms[:3] != ARMS or not set(arms) <= set(ARMS + EXTRA_ARMS):
            ap.error(f"--arms must start with {','.join(ARMS)} and add only {', '.join(EXTRA_ARMS)}")
        rows.append(measure(n, args.rounds, args.block, args.extra, args.keep, arms, args.settle_s, args.device))
        print(json.dumps(rows[-1]), flush=True)
    print(f"{'workload':12s} {'untraced':>9s} {'torch':>9s} {'cupti':>9s} {'torch ovh':>9s} {'cupti ovh':>9s}"
          f" {'cupti/torch':>11s} {'paired':>8s} {'kernels':>8s}")
    for r in rows:
        print(f"{r['workload']:12s} {r['untraced_median_ms']:9.3f} {r['torch.profiler_median_ms']:9.3f} "
              f"{r['cupti_median_ms']:9.3f} {r['torch_overhead_pct']:8.2f}% {r['cupti_overhead_pct']:8.2f}% "
              f"{r['cupti_vs_torch_pct']:10.2f}% {r['cupti_vs_torch_paired_pct']['median']:7.2f}% "
              f"{r['kernels_in_cupti_trace']:8d}")
    ok = all(r["cupti_vs_torch_pct"] <= 2.0 and r["kernels_in_cupti_trace"] > 0 for r in rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
