"""What the ``device`` what-if keeps as it is: training's time outside the ops it re-runs, at 1 and 2 threads.

The ``device`` row predicts a bundled workload at 2 intra-op threads from its 1-thread trace:
each op the re-run covers (:func:`daydream.opbench.thread_time_ratios`) takes its measured
ratio, and the rest of the iteration -- Python, dispatch, autograd's bookkeeping, ops whose
signature the loader does not keep -- stays as traced.  This trains the workload (validation
sizes) in one process, in blocks of ``--steps`` profiled steps at 1 and then at 2 threads, and
splits each step's wall time into the self time of the op names the re-run covers and the
rest.  Per core placement of the block (far: a core-to-core probe over ``--far-ns``) it
prints the means and the 2-thread over 1-thread ratio the what-if would give with the rest
unchanged, against the real one; then, over ``--blocks`` more blocks, the uncovered names whose
time moved most.

Usage::

    python benchmarks/device_rest.py DIR/traces/mlp.dev1t.r0.json.gz DIR/device-cpu-1t-nocomm.json \\
        DIR/device-cpu-2t-nocomm.json --workload mlp --seconds 90

with the files of a ``daydream validate --opt device`` output directory ``DIR``.  Needs two
otherwise idle cores.
"""
from __future__ import annotations

import functools
import statistics
import time
from collections import defaultdict

from device_rerun_gap import _capture_rerun, _probe, block_args, profiled_block, rerun_times_us, training

__all__ = ["main", "block_us"]


def block_us(step, threads: int, steps: int) -> tuple:
    """``(wall us a step, {op name: self us a step})`` over ``steps`` profiled calls of ``step`` at
    ``threads`` intra-op threads (:func:`device_rerun_gap.profiled_block`)."""
    wall, tot = profiled_block(step, threads, steps)
    return wall / steps, {k: v / steps for k, v in tot.items()}


def _summary(label: str, rows) -> None:
    m = [statistics.fmean(r[i] for r in rows) for i in range(4)]
    wall1, wall2, cov1, cov2 = m
    print(f"{label}: {len(rows)} blocks: step {wall1:.0f} -> {wall2:.0f} us; covered ops {cov1:.0f} -> {cov2:.0f}; "
          f"rest {wall1 - cov1:.0f} -> {wall2 - cov2:.0f} (x{(wall2 - cov2) / (wall1 - cov1):.3f}); 2t / 1t "
          f"with the rest unchanged {(cov2 + wall1 - cov1) / wall1:.3f}, real {wall2 / wall1:.3f}")


def main(argv=None) -> None:
    ap = block_args(__doc__, "mlp", 90.0)
    ap.add_argument("--blocks", type=int, default=20, help="blocks for the per-name breakdown")
    a = ap.parse_args(argv)
    from daydream.heapmode import steady_heap

    with steady_heap():
        covered = set(rerun_times_us(_capture_rerun(a.trace, a.profile_1t, a.profile_2t)))
        step = functools.partial(training(a.workload).train, 1)
        rows, end = [], time.time() + a.seconds
        while time.time() < end:
            p0 = _probe()
            (w1, o1), (w2, o2) = block_us(step, 1, a.steps), block_us(step, 2, a.steps)
            p1 = _probe()
            c1, c2 = (sum(v for k, v in o.items() if k in covered) for o in (o1, o2))
            rows.append((w1, w2, c1, c2, max(p0, p1) > a.far_ns))
        for label, far in (("near", False), ("far", True)):
            got = [r for r in rows if r[4] == far]
            if got:
                _summary(label, got)
        moved = defaultdict(lambda: [0.0, 0.0])
        for _ in range(a.blocks):
            for i, th in enumerate((1, 2)):
                for k, v in block_us(step, th, a.steps)[1].items():
                    if k not in covered:
                        moved[k][i] += v / a.blocks
    print(f"uncovered names, us a step at 1 -> 2 threads (mean over {a.blocks} blocks), most moved first:")
    for k, (one, two) in sorted(moved.items(), key=lambda kv: kv[1][1] - kv[1][0])[:10]:
        print(f"  {k[:64]:64s} {one:7.1f} -> {two:7.1f}")


if __name__ == "__main__":
    main()
