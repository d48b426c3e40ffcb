"""Per op name: the ``device`` re-run's 2-thread over 1-thread time with and without ``recycle``, against real training's.

The ``device`` what-if's chained re-run along the recorded data flow
(:func:`daydream.opseq.flow_calls`) writes the outputs that training placed at
one address into one buffer (``recycle``, the default), so that each output
finds its memory as its previous occupant left it; ``device:recycle=false``
lets each call allocate its own.  This builds both re-runs of one round's
1-thread trace of a ``daydream validate --opt device`` run, times them in turns
(``--rerun`` rounds after a warm-up, each a pass at 1 thread and one at 2), and
prints per op name the summed median times at 1 and 2 threads and their ratio,
beside the round's real ratio (the op's summed time in the 2-thread trace over
the 1-thread trace's), and the totals.  The core-to-core probe after the
re-runs says which placement they ran in.

Usage::

    python benchmarks/device_recycle.py DIR --workload transformer --round 3 [--rerun 10] [--top 15]
"""
from __future__ import annotations

import argparse
import collections
import gzip
import json
import statistics

__all__ = ["real_by_name", "rerun_by_name", "main"]


def real_by_name(path: str) -> collections.Counter:
    """Summed us per CPU op name in the trace at ``path``."""
    with gzip.open(path) if path.endswith(".gz") else open(path) as f:
        ev = json.load(f)
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    got = collections.Counter()
    for e in ev:
        if e.get("ph") == "X" and e.get("cat") == "cpu_op":
            got[e["name"]] += float(e["dur"])
    return got


def rerun_by_name(trace_path: str, profile_path: str, rounds: int) -> dict:
    """``{recycle: {op name: [us at 1 thread, us at 2]}}``: each call's median over ``rounds``,
    summed per name, the two re-runs built as the what-if builds them and timed in turns."""
    import torch
    from chain_links import device_sequence

    from daydream import opseq
    from daydream.heapmode import steady_heap

    seq = device_sequence(trace_path, profile_path)
    with steady_heap():
        builds = {rec: opseq._side_calls([(s, k, g, fl, s) for s, k, g, fl in seq], True, rec)
                  for rec in (False, True)}
        got = {rec: [[] for _ in calls] for rec, calls in builds.items()}
        for r in range(rounds + 1):                        # the first round warms up
            for rec, calls in builds.items():
                row = []
                for side, threads in ((2, 1), (3, 2)):
                    torch.set_num_threads(threads)
                    row.append(opseq._pass_times([c[side] for c in calls]))
                if r:
                    for acc, a, b in zip(got[rec], *row):
                        acc.append((a, b))
    out = {}
    for rec, calls in builds.items():
        per = collections.defaultdict(lambda: [0.0, 0.0])
        for c, rows in zip(calls, got[rec]):
            name = json.loads(c[0])[0]
            per[name][0] += statistics.median(a for a, _ in rows) / 1e3
            per[name][1] += statistics.median(b for _, b in rows) / 1e3
        out[rec] = dict(per)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", help="a `daydream validate --opt device` output directory")
    ap.add_argument("--workload", default="transformer", choices=("mlp", "transformer"))
    ap.add_argument("--round", type=int, default=0, help="the round whose traces to take")
    ap.add_argument("--rerun", type=int, default=10, help="re-run rounds")
    ap.add_argument("--top", type=int, default=15, help="op names to print, by their 1-thread re-run time")
    a = ap.parse_args(argv)
    from daydream.corelink import try_probe

    base = f"{a.dir}/traces/{a.workload}.dev"
    got = rerun_by_name(f"{base}1t.r{a.round}.json.gz", f"{a.dir}/device-cpu-1t-nocomm.json", a.rerun)
    one, two = (real_by_name(f"{base}{t}t.r{a.round}.json.gz") for t in (1, 2))
    print(f"round {a.round}, {a.rerun} re-run rounds (cores {try_probe()} ns apart after them); "
          "us per pass at 1 and 2 threads and ratio: recycle=false | recycle (default) | real")
    names = sorted(got[False], key=lambda n: -got[False][n][0])
    for n in names[:a.top]:
        (a1, a2), (b1, b2) = got[False][n], got[True].get(n, (0.0, 0.0))
        real = f"{two[n] / one[n]:5.2f}" if one[n] else "  -  "
        print(f"  {n[:44]:<44} {a1:8.0f} {a2:8.0f} x{a2 / a1:4.2f} | {b1:8.0f} {b2:8.0f} x{b2 / max(b1, 1e-9):4.2f}"
              f" | x{real}")
    for rec in (False, True):
        t1, t2 = (sum(v[i] for v in got[rec].values()) for i in (0, 1))
        print(f"  total {'recycle' if rec else 'recycle=false':<14} x{t2 / t1:.3f}")
    r1, r2 = (sum(c[n] for n in names) for c in (one, two))
    print(f"  total real (those names)  x{r2 / r1:.3f}")


if __name__ == "__main__":
    main()
