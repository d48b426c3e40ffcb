"""The ``device`` re-run with and without a warm pass per thread count, against real training.

The ``device`` what-if re-runs one traced iteration's ops at 1 and at 2 intra-op threads in turns
(:func:`daydream.opseq.sequence_ratios`).  Without ``warm`` each thread count's timed pass follows
the other's, so the 2-thread pass starts with its worker's caches cold; with it (the default since
session 74) each follows an untimed pass of its own, as a training iteration follows the one
before.  In blocks, in one process: real training at 1 and then 2 threads (``--steps`` profiled
steps each), then the what-if's re-run both ways; per block and over the blocks, the 2-thread over
1-thread time of the ops the re-run covers (training: their self time), with a core-to-core probe.

Usage::

    python benchmarks/device_warm.py DIR/traces/transformer.dev1t.r0.json.gz \\
        DIR/device-cpu-1t-nocomm.json DIR/device-cpu-2t-nocomm.json --seconds 150

with the files of a ``daydream validate --opt device`` output directory ``DIR``.  Needs two
otherwise idle cores.
"""
from __future__ import annotations

import functools
import statistics
import time

from device_rerun_gap import (_capture_rerun, _probe, block_args, covered_ratio, op_times_us, rerun_times_us,
                              training, training_times)

__all__ = ["main"]

#: The re-runs compared: label -> the ``device`` spec's extra options.
MODES = {"cold": ",warm=false", "warm": ""}


def main(argv=None) -> None:
    a = block_args(__doc__, "transformer", 150.0).parse_args(argv)
    from daydream.heapmode import steady_heap

    with steady_heap():
        step = functools.partial(training(a.workload).train, 1)
        reruns = {m: _capture_rerun(a.trace, a.profile_1t, a.profile_2t + extra) for m, extra in MODES.items()}
        got, end = {k: [] for k in ("training", *MODES)}, time.time() + a.seconds
        while time.time() < end:
            probe = _probe()
            one, two = op_times_us(step, 1, a.steps, None), op_times_us(step, 2, a.steps, None)
            times = {m: rerun_times_us(r) for m, r in reruns.items()}
            names = [n for n in times["warm"] if one.get(n) and all(n in t for t in times.values())]
            got["training"].append(covered_ratio(training_times(one, two, names), names))
            for m, t in times.items():
                got[m].append(covered_ratio(t, names))
            print(f"{time.strftime('%H:%M:%S')} probe {probe:.0f} ns | "
                  + "  ".join(f"{k} {v[-1]:.3f}" for k, v in got.items()), flush=True)
    print(f"{len(got['training'])} blocks; the covered ops' 2t / 1t, mean (median):")
    for k, v in got.items():
        print(f"  {k:9s} {statistics.fmean(v):.3f} ({statistics.median(v):.3f})")


if __name__ == "__main__":
    main()
