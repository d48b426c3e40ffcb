"""The ``device`` what-if's op re-run against real training, in one process, block by block.

The ``device`` row of ``daydream validate`` predicts a bundled workload at 2 intra-op threads
from its 1-thread trace by re-running the traced iteration's ops at 1 and at 2 threads
(:func:`daydream.opbench.thread_time_ratios`, chained in sequence).  Where the real runs
slow down at 2 threads and the re-run does not, the row reads low.  This alternates, in one
process and the same minutes:

* real training of the workload (validation sizes) at 1 and then at 2 threads, a block of
  ``--steps`` profiled steps each: per op name, its 2-thread time over its 1-thread time;
* the what-if's own re-run of the trace's ops (the call it makes, captured once from
  :func:`daydream.whatif.predict` and repeated): per op name, its occurrences' median
  2-thread times summed over their 1-thread times;

with a core-to-core probe (:mod:`daydream.corelink`) before, between and after, taken with
the OpenMP worker idle (a spinning worker inflates the probe).  The summary counts, per op,
the blocks whose ratio exceeds ``--slow`` on each side.  Each block also sums, on both sides,
the time of every op the re-run covers (training: the self time of the op names it re-runs;
the re-run: each occurrence's median time at each thread count), and the summary gives that
2-thread over 1-thread ratio by the core placement of the block (far: a probe over
``--far-ns``): the row's prediction, op by op, against what training did.

Usage::

    python benchmarks/device_rerun_gap.py TRACE.json.gz PROFILE_1T.json PROFILE_2T.json --seconds 600
    python benchmarks/device_rerun_gap.py DIR/traces/mlp.dev1t.r0.json.gz ... --workload mlp

with a 1-thread trace and the two profiles of a ``daydream validate --opt device`` output
directory (``traces/transformer.dev1t.r0.json.gz``, ``device-cpu-1t-nocomm.json``,
``device-cpu-2t-nocomm.json``).  Needs two otherwise idle cores.
"""
from __future__ import annotations

import argparse
import functools
import json
import statistics
import time
from collections import defaultdict

__all__ = ["main", "OPS", "training", "op_times_us", "profiled_block", "rerun_times_us", "block_args",
           "covered_ratio", "training_times"]

#: Ops whose ratios are printed (the transformer's backward element-wise ops, and two controls).
OPS = ("aten::gelu_backward", "aten::add_", "aten::fill_", "aten::native_layer_norm_backward", "aten::mm",
       "aten::gelu")


def _probe() -> float:
    import torch

    from daydream.corelink import core_to_core_ns

    torch.set_num_threads(1)
    time.sleep(0.05)                      # let the OpenMP worker stop spinning
    return core_to_core_ns()


def training(workload: str):
    """The bundled ``workload`` built for training at the validation's sizes, on 1 thread."""
    import importlib

    from daydream.validate import WORKLOAD_ARGS
    from daydream.workloads.common import prepare

    mod = importlib.import_module(f"daydream.workloads.{workload}")
    args = list(WORKLOAD_ARGS[workload])
    k = args.index("--threads")
    args[k + 1] = "1"
    return prepare(workload, mod.build, [*args, "--quiet"], mod.add_args, mod.BATCH_SIZE)


def profiled_block(step, threads: int, steps: int, names=None) -> tuple:
    """``(wall us, {op name: self us})`` over ``steps`` profiled calls of ``step`` at ``threads``
    intra-op threads, after two calls that warm up; the ops those of ``names`` (every op where
    ``None``)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.set_num_threads(threads)
    step()
    step()
    with profile(activities=[ProfilerActivity.CPU]) as p:
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        wall = (time.perf_counter() - t0) * 1e6
    tot = defaultdict(float)
    for e in p.events():
        if names is None or e.name in names:
            tot[e.name] += e.self_cpu_time_total
    return wall, tot


def op_times_us(step, threads: int, steps: int, names=OPS) -> dict:
    """Per op name of ``names`` (every op where ``None``): its self time (us) over ``steps``
    profiled calls of ``step`` at ``threads`` intra-op threads (:func:`profiled_block`)."""
    return profiled_block(step, threads, steps, names)[1]


def _capture_rerun(trace: str, profile_1t: str, profile_2t: str):
    """The what-if's re-run call, captured from one prediction: a callable repeating it."""
    import daydream.optimizations.device as dev
    from daydream.whatif import predict

    cap, real = {}, dev.thread_time_ratios

    def spy(*a, **k):
        cap["call"] = (a, k)
        return real(*a, **k)

    dev.thread_time_ratios = spy
    try:
        predict(trace, [f"device:target={profile_2t}"], profile_path=profile_1t)
    finally:
        dev.thread_time_ratios = real
    if "call" not in cap:
        raise SystemExit(f"{trace}: the device what-if re-ran no ops (a trace without shapes?)")
    a, k = cap["call"]
    return lambda: real(*a, **k)


def rerun_times_us(rerun) -> dict:
    """Run ``rerun`` (:func:`_capture_rerun`) once; per op name: the sums over its occurrences of
    their median times (us) at the trace's thread count and at the target's, as
    :func:`daydream.opseq.sequence_ratios` measured them."""
    import daydream.opseq as opseq

    got, real = {}, opseq._per_signature

    def spy(calls, rounds, by_time):
        got["x"] = (calls, rounds)
        return real(calls, rounds, by_time)

    opseq._per_signature = spy
    try:
        rerun()
    finally:
        opseq._per_signature = real
    tot = defaultdict(lambda: [0.0, 0.0])
    for (sig, _, _, _), rows in zip(*got["x"]):
        t = tot[json.loads(sig)[0]]
        t[0] += statistics.median(a for a, _ in rows) / 1e3
        t[1] += statistics.median(b for _, b in rows) / 1e3
    return tot


def training_times(one: dict, two: dict, names) -> dict:
    """``{name: [1t us, 2t us]}`` of training's op ``names`` from its blocks at 1 and 2 threads
    (``{name: self us}`` each; a name missing at 2 threads counts 0), as :func:`rerun_times_us` gives
    the re-run's.

    >>> training_times({"mm": 100.0, "add_": 10.0}, {"mm": 60.0}, ["mm", "add_"])
    {'mm': [100.0, 60.0], 'add_': [10.0, 0.0]}
    """
    return {n: [one[n], two.get(n, 0.0)] for n in names}


def covered_ratio(times: dict, names) -> float:
    """2-thread over 1-thread time of the op ``names`` in ``{name: [1t us, 2t us]}``.

    >>> covered_ratio({"mm": [100.0, 60.0], "add_": [10.0, 9.0], "gelu": [5.0, 5.0]}, ["mm", "add_"])
    0.6272727272727273
    """
    return sum(times[n][1] for n in names) / sum(times[n][0] for n in names)


def block_args(doc: str, workload: str, seconds: float) -> argparse.ArgumentParser:
    """The arguments of the benchmarks that time training against the re-run in blocks."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("trace", help="a 1-thread trace of the workload (device validation's dev1t)")
    ap.add_argument("profile_1t")
    ap.add_argument("profile_2t")
    ap.add_argument("--workload", default=workload, choices=("transformer", "mlp"))
    ap.add_argument("--seconds", type=float, default=seconds)
    ap.add_argument("--steps", type=int, default=6, help="profiled training steps per block and thread count")
    ap.add_argument("--far-ns", type=float, default=200.0, help="a block is far where a probe exceeds this")
    return ap


def main(argv=None) -> None:
    ap = block_args(__doc__, "transformer", 600.0)
    ap.add_argument("--slow", type=float, default=1.1, help="a block is slow where 2t / 1t exceeds this")
    a = ap.parse_args(argv)
    from daydream.heapmode import steady_heap

    with steady_heap():
        w = training(a.workload)
        step = functools.partial(w.train, 1)
        rerun = _capture_rerun(a.trace, a.profile_1t, a.profile_2t)
        rows, end = [], time.time() + a.seconds
        while time.time() < end:
            p0 = _probe()
            one, two = op_times_us(step, 1, a.steps, None), op_times_us(step, 2, a.steps, None)
            p1 = _probe()
            times = rerun_times_us(rerun)
            p2 = _probe()
            again = {n: b / t for n, (t, b) in times.items() if t}
            real = {n: two[n] / one[n] for n in OPS if one.get(n)}
            cov = [n for n in times if one.get(n)]
            covered = (covered_ratio(training_times(one, two, cov), cov), covered_ratio(times, cov))
            rows.append((real, again, covered, max(p0, p1, p2) > a.far_ns))
            print(f"{time.strftime('%H:%M:%S')} probes {p0:.0f} {p1:.0f} {p2:.0f} ns | covered ops "
                  f"{covered[0]:.3f}/{covered[1]:.3f} | training/re-run "
                  + " ".join(f"{n.split('::')[-1]} {real.get(n, float('nan')):.2f}/{again.get(n, float('nan')):.2f}"
                             for n in OPS), flush=True)
    print(f"{len(rows)} blocks; per op: blocks with 2t/1t above {a.slow} (training, re-run), mean ratio of each")
    for n in OPS:
        tr = [r[n] for r, *_ in rows if n in r]
        rr = [g[n] for _, g, *_ in rows if n in g]
        if tr and rr:
            print(f"  {n:36s} {sum(x > a.slow for x in tr):4d} {sum(x > a.slow for x in rr):4d}   "
                  f"{statistics.fmean(tr):.2f} {statistics.fmean(rr):.2f}")
    print("ops the re-run covers, 2t / 1t (mean over blocks: training, re-run):")
    for label, pick in (("near", False), ("far", True), ("all", None)):
        got = [c for *_, c, far in rows if pick is None or far == pick]
        if got:
            print(f"  {label:4s} {len(got):4d} blocks  {statistics.fmean(c[0] for c in got):.3f} "
                  f"{statistics.fmean(c[1] for c in got):.3f}")


if __name__ == "__main__":
    main()
