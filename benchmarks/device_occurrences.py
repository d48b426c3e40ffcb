"""Per call of one iteration: its time at 1 and 2 threads in real training and in the ``device`` re-run.

The ``device`` what-if's chained re-run (:func:`daydream.opseq.sequence_ratios`) scales each op
by its 2-thread over 1-thread time, re-run here; a signature's ratio weighs its occurrences.
This prints, per occurrence of the calls it re-runs that take at least ``--min-us`` on either
side, the median time at 1 and at 2 threads and their ratio: in the real runs (the 1- and
2-thread traces of ``daydream validate --opt device``, rounds paired by number, the ops of the
optimizer step of each trace's second recorded iteration, matched in order) and in a re-run of
the first round's 1-thread trace built as the what-if builds it (``--rerun`` rounds, each a pass
at 1 thread and one at 2).  Which occurrence a re-run gets wrong, and on which side: session 65
found the update of each MLP weight re-run at 30 us at 1 thread against 46-53 traced (it read
the weight itself as its gradient), x7.9-9.6 at 2 threads against x3.5-5.4 real.

Usage::

    python benchmarks/device_occurrences.py DIR [--workload mlp] [--rounds 0,1,2] [--rerun 15]

with ``DIR`` a ``daydream validate --opt device`` output directory.  The core-to-core probe
after the re-run says which placement it ran in.
"""
from __future__ import annotations

import argparse
import gzip
import json
import statistics

__all__ = ["real_step_ops", "rerun_occurrences", "main"]

_UPDATE_OPS = ("aten::add_", "aten::mul_", "aten::addcmul_", "aten::addcdiv_", "aten::lerp_", "aten::copy_")


def real_step_ops(path: str) -> list:
    """``[(op name, first input's dims, us), ...]``: the in-place ops of the second optimizer step
    recorded in the trace at ``path`` (the first if only one), in order."""
    with gzip.open(path) if path.endswith(".gz") else open(path) as f:
        ev = json.load(f)
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    steps = sorted((e for e in ev if e.get("ph") == "X" and "Optimizer.step" in e.get("name", "")),
                   key=lambda e: e["ts"])
    if not steps:
        raise SystemExit(f"{path}: no optimizer step recorded")
    st = steps[min(1, len(steps) - 1)]
    ops = sorted((e for e in ev if e.get("ph") == "X" and e.get("cat") == "cpu_op" and e["name"] in _UPDATE_OPS
                  and st["ts"] <= e["ts"] < st["ts"] + st["dur"]), key=lambda e: e["ts"])
    return [(e["name"], (e.get("args", {}).get("Input Dims") or [[]])[0], float(e["dur"])) for e in ops]


def rerun_occurrences(trace_path: str, profile_path: str, rounds: int) -> list:
    """``[(op name, first input's dims, median us at 1 thread, at 2), ...]`` per call of the
    ``device`` what-if's chained re-run of ``trace_path``'s iteration, in order."""
    import torch
    from chain_links import device_sequence

    from daydream import opseq
    from daydream.heapmode import steady_heap

    seq = device_sequence(trace_path, profile_path)
    with steady_heap():
        calls = opseq._side_calls([(s, k, gr, fl, s) for s, k, gr, fl in seq], True)
        got = [[] for _ in calls]
        for r in range(rounds + 1):                       # the first round warms up
            row = []
            for side, threads in ((2, 1), (3, 2)):
                torch.set_num_threads(threads)
                row.append(opseq._pass_times([c[side] for c in calls]))
            if r:
                for acc, a, b in zip(got, *row):
                    acc.append((a, b))
    out = []
    for c, rows in zip(calls, got):
        name, dims = json.loads(c[0])[:2]
        out.append((name, (dims or [[]])[0], statistics.median(a for a, _ in rows) / 1e3,
                    statistics.median(b for _, b in rows) / 1e3))
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", help="a `daydream validate --opt device` output directory")
    ap.add_argument("--workload", default="mlp")
    ap.add_argument("--rounds", default="0,1,2,3,4", help="real rounds to take the medians over")
    ap.add_argument("--rerun", type=int, default=15, help="re-run rounds (0: real runs only)")
    ap.add_argument("--min-us", type=float, default=3.0, help="leave out calls faster than this on both sides")
    a = ap.parse_args(argv)
    rounds = [int(k) for k in a.rounds.split(",")]
    base = f"{a.dir}/traces/{a.workload}.dev"
    pairs = [(real_step_ops(f"{base}1t.r{k}.json.gz"), real_step_ops(f"{base}2t.r{k}.json.gz")) for k in rounds]
    print(f"real runs, optimizer step, rounds {a.rounds}: us at 1 thread, at 2, ratio (medians)")
    for i, (name, dims, _) in enumerate(pairs[0][0]):
        both = [(p[0][i][2], p[1][i][2]) for p in pairs if i < min(len(p[0]), len(p[1]))]
        one, two = (statistics.median(x) for x in zip(*both)) if both else (0.0, 0.0)
        if max(one, two) >= a.min_us:
            print(f"  {i:3d} {name:<14} {str(dims):<12} {one:8.1f} {two:8.1f}"
                  f"   x{statistics.median(y / x for x, y in both):.2f}")
    if a.rerun <= 0:
        return
    from daydream.corelink import try_probe

    occ = rerun_occurrences(f"{base}1t.r{rounds[0]}.json.gz", f"{a.dir}/device-cpu-1t-nocomm.json", a.rerun)
    print(f"re-run of round {rounds[0]}'s iteration, {a.rerun} rounds (cores {try_probe()} ns apart after it), "
          "its in-place calls of those names (the optimizer's, and any in forward or backward): "
          "us at 1 thread, at 2, ratio")
    for j, (name, dims, one, two) in enumerate(occ):
        if name in _UPDATE_OPS and max(one, two) >= a.min_us:
            print(f"  {j:3d} {name:<14} {str(dims):<12} {one:8.1f} {two:8.1f}   x{two / max(one, 1e-9):.2f}")


if __name__ == "__main__":
    main()
