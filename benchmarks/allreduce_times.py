"""Per all-reduce of a real multi-rank CPU run: how long it took once both ranks had called it.

Reads the two ranks' traces of one run (``PREFIX.rank0.json.gz``, ``PREFIX.rank1.json.gz``, as
``daydream validate`` writes the tensor-parallel runs: ``tp.t2.rK``), pairs the ranks'
``c10d::allreduce_`` calls in order, and per call takes the skew of the two starts and the
time from the later start to the later end of the ``wait_tensor`` that follows (the collective
itself, the ranks' skew left out; both processes stamp one host clock).  Prints per position in
the iteration (``--per-iteration``, default 8: the bundled transformer's four pairs, forward and
backward) the median skew and the mean and median duration, then the mean over all: what
``tensor-parallel`` predicts each in-line all-reduce from (``DeviceProfile.allreduce_ns``).

Usage::

    python benchmarks/allreduce_times.py DIR/traces/tp.t2.r1 [--per-iteration 8]
"""
from __future__ import annotations

import argparse
import gzip
import json
import statistics

__all__ = ["calls", "main"]

ISSUE = "c10d::allreduce_"
WAIT = "_c10d_functional::wait_tensor"


def calls(path: str) -> list:
    """``[(start_us, end_us), ...]``: each all-reduce's issue start and its wait's end, in order."""
    with gzip.open(path, "rt") if path.endswith(".gz") else open(path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    issue = sorted((e for e in events if e["name"] == ISSUE), key=lambda e: e["ts"])
    waits = sorted((e for e in events if e["name"] == WAIT), key=lambda e: e["ts"])
    return [(a["ts"], w["ts"] + w["dur"]) for a, w in zip(issue, waits)]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("prefix", help="PREFIX of PREFIX.rank0.json.gz and PREFIX.rank1.json.gz")
    p.add_argument("--per-iteration", type=int, default=8, help="all-reduces per iteration")
    a = p.parse_args(argv)
    r0, r1 = (calls(f"{a.prefix}.rank{r}.json.gz") for r in (0, 1))
    rows = [(abs(s0 - s1), max(e0, e1) - max(s0, s1)) for (s0, e0), (s1, e1) in zip(r0, r1)]
    if not rows:
        raise SystemExit(f"allreduce_times: no {ISSUE} calls in {a.prefix}.rank*.json.gz")
    print(f"{len(rows)} all-reduces ({len(r0)} on rank 0, {len(r1)} on rank 1); us")
    for k in range(a.per_iteration):
        pos = rows[k::a.per_iteration]
        print(f"position {k}: skew median {statistics.median(s for s, _ in pos):7.0f}   "
              f"from the later start: mean {statistics.fmean(d for _, d in pos):7.0f} "
              f"median {statistics.median(d for _, d in pos):7.0f}")
    print(f"all: mean {statistics.fmean(d for _, d in rows):.0f}, median {statistics.median(d for _, d in rows):.0f}")


if __name__ == "__main__":
    main()
