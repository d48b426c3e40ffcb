"""Tracing overhead on the bundled workloads: median iteration time traced vs untraced.

Everything runs in one process per workload: rounds alternate an untraced
block of iterations with a traced block (``daydream.collect.trace`` around the
same loop, layer markers and shapes as ``daydream trace`` records them), in alternating order, so drift of a
shared machine hits both sides alike.  Iteration time is the training loop's own step-to-step
time.  In a traced block the two warm-up iterations (the first records op
shapes, the second prepares the profiler) and the last recorded one (whose
time includes writing the file) are left out.

Usage::

    python benchmarks/trace_overhead.py                      # all workloads, 1 thread
    python benchmarks/trace_overhead.py --workloads mlp --rounds 5 --block 10 --threads 2

By default glibc's mmap threshold is raised so that large activations are not
mapped and page-faulted afresh each iteration (noise on both sides;
``--default-malloc`` turns this off).

Goal: overhead (traced median / untraced median - 1) <= 5 %.  Caveat: the
blocks share one heap, already grown by earlier traced blocks, so the page
faults that the profiler's records cost a whole recording (see
``daydream/collect/heap.py``) are hidden here; ``trace_overhead_runs.py``
measures whole runs, what a user sees.  The CPU-time
columns (the training thread's ``time.thread_time``), the median over rounds
of traced/untraced block medians ("paired") and the ratio of the least
disturbed block medians ("best blk") are printed as well: on a machine
shared with other jobs they are steadier figures.
"""
from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from daydream.collect import trace
from daydream.workloads.common import prepare

__all__ = ["measure", "main"]


class _CpuClock:
    """Per-step CPU time of the training thread (less sensitive to other processes)."""

    def __init__(self):
        self.times: list[float] = []
        self._last = time.thread_time()

    def reset(self) -> None:
        self.times = []
        self._last = time.thread_time()

    def __call__(self, step, loss) -> None:
        now = time.thread_time()
        self.times.append(now - self._last)
        self._last = now


def measure(name: str, rounds: int, block: int, threads: int, shapes: bool, extra: list[str],
            every: bool = False) -> dict:
    """Untraced and traced iteration times (ms), wall and CPU, of one workload."""
    mod = importlib.import_module(f"daydream.workloads.{name}")
    argv = ["--quiet", "--threads", str(threads), *extra]
    w = prepare(name, mod.build, argv, mod.add_args, mod.BATCH_SIZE)
    w.train(3)  # allocator and caches warm
    cpu = _CpuClock()
    wall = {False: [], True: []}
    cpu_t = {False: [], True: []}
    paired = []  # per round: traced block median / untraced block median
    best_block = {False: float("inf"), True: float("inf")}  # least disturbed block
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            block_medians = {}
            for traced in ((False, True) if r % 2 == 0 else (True, False)):
                cpu.reset()
                if traced:
                    with trace(Path(tmp) / f"{name}.{r}.json", warmup=2, iterations=block, record_shapes=shapes,
                               shapes_every_iteration=every):
                        times = w.train(block + 2, on_step=cpu)
                    keep = slice(2, block + 1)  # not warm-up, not the step that writes the file
                else:
                    times = w.train(block, on_step=cpu)
                    keep = slice(1, None)
                wall[traced] += times[keep]
                cpu_t[traced] += cpu.times[keep]
                block_medians[traced] = statistics.median(times[keep])
                best_block[traced] = min(best_block[traced], block_medians[traced])
            paired.append(block_medians[True] / block_medians[False])

    def ms(xs):
        return statistics.median(xs) * 1e3

    return {
        "workload": name,
        "untraced_median_ms": round(ms(wall[False]), 3),
        "traced_median_ms": round(ms(wall[True]), 3),
        "overhead_pct": round((ms(wall[True]) / ms(wall[False]) - 1) * 100, 2),
        "untraced_cpu_median_ms": round(ms(cpu_t[False]), 3),
        "traced_cpu_median_ms": round(ms(cpu_t[True]), 3),
        "cpu_overhead_pct": round((ms(cpu_t[True]) / ms(cpu_t[False]) - 1) * 100, 2),
        "untraced_best_block_ms": round(best_block[False] * 1e3, 3),
        "traced_best_block_ms": round(best_block[True] * 1e3, 3),
        "best_block_overhead_pct": round((best_block[True] / best_block[False] - 1) * 100, 2),
        "paired_overhead_pct": round((statistics.median(paired) - 1) * 100, 2),
        "samples": [len(wall[False]), len(wall[True])],
        "threads": threads,
        "record_shapes": shapes,
        "shapes_every_iteration": every,
    }


def _stable_malloc() -> bool:
    """Keep freed buffers in glibc's heap (no mmap/munmap and page faults per iteration).

    Large activations are otherwise mapped fresh every iteration and their page
    faults add noise to both sides; returns whether it could be applied.
    """
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        return bool(libc.mallopt(m_mmap_threshold, 1 << 30) and libc.mallopt(m_trim_threshold, 1 << 30))
    except (OSError, AttributeError):
        return False


def main(argv=None) -> int:
    """Run the benchmark and print a table (and JSON with ``--json``)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="mlp,cnn,transformer")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--block", type=int, default=6, help="iterations per untraced/traced block")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-shapes", action="store_true")
    ap.add_argument("--shapes-every-iteration", action="store_true",
                    help="shapes recorded in the recorded iterations (default: in a warm-up iteration, copied)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--default-malloc", action="store_true",
                    help="leave glibc malloc's mmap threshold alone (noisier)")
    ap.add_argument("extra", nargs="*", help="flags passed to every workload (after --)")
    args = ap.parse_args(argv)
    if not args.default_malloc:
        _stable_malloc()
    rows = [measure(n, args.rounds, args.block, args.threads, not args.no_shapes, args.extra,
                    args.shapes_every_iteration)
            for n in args.workloads.split(",")]
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(f"{'workload':12s} {'untraced ms':>12s} {'traced ms':>10s} {'overhead':>9s}"
              f" {'cpu untraced':>13s} {'cpu traced':>11s} {'cpu ovh':>8s} {'paired':>7s} {'best blk':>8s}")
        for r in rows:
            print(f"{r['workload']:12s} {r['untraced_median_ms']:12.2f} {r['traced_median_ms']:10.2f} "
                  f"{r['overhead_pct']:8.2f}% {r['untraced_cpu_median_ms']:13.2f} "
                  f"{r['traced_cpu_median_ms']:11.2f} {r['cpu_overhead_pct']:7.2f}% {r['paired_overhead_pct']:6.2f}% "
                  f"{r['best_block_overhead_pct']:7.2f}%")
    return 0 if all(r["overhead_pct"] <= 5.0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
