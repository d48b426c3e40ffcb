"""Page-fault storms in recorded iterations: which traces of validation runs paid them, and what for.

``daydream trace`` keeps a pre-faulted heap reserve (:mod:`daydream.collect.heap`) so that the
profiler's records do not make the recorded iterations fault on fresh pages; it records each
iteration's wall time and minor page faults in the trace's ``daydream`` metadata, with the
reserve's size and top-ups.  For every trace under the given ``daydream validate -o DIR``
directories (``traces/``) whose name matches ``--match``, this prints those with more than
``--faults`` minor faults over their recorded iterations: the faults, the first iteration with
over 100, the reserve, the trace's mean iteration over its median (what the storm did to a
round's measured time) and, where the trace records it, what the heap took from its top by
the end of each iteration.  Then per trace name: how many traces, and how many stormed.

Usage::

    python benchmarks/trace_faults.py /tmp/s61/vy /tmp/s61/vz --match "hfta.mlp.n[48]"
"""
from __future__ import annotations

import argparse
import collections
import fnmatch
import gzip
import json
from pathlib import Path

__all__ = ["main", "iterations_meta"]


def iterations_meta(path) -> tuple:
    """``(iterations, heap_reserve)`` of a trace's ``daydream`` metadata (empty dicts if none)."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        meta = json.load(f).get("daydream") or {}
    return meta.get("iterations") or {}, meta.get("heap_reserve") or {}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dirs", nargs="+", help="daydream validate output directories")
    p.add_argument("--match", default="*", help="trace file names (a glob, before .rK.json.gz)")
    p.add_argument("--faults", type=int, default=1000, help="a storm: more minor faults than this")
    args = p.parse_args(argv)
    counts = collections.defaultdict(lambda: [0, 0])
    for d in args.dirs:
        for path in sorted(Path(d, "traces").glob("*.json.gz")):
            name = path.name.split(".r")[0]
            if not fnmatch.fnmatch(name, args.match):
                continue
            its, heap = iterations_meta(path)
            faults, walls = its.get("minor_faults") or [], its.get("wall_ns") or []
            counts[name][0] += 1
            if sum(faults) <= args.faults or not walls:
                continue
            counts[name][1] += 1
            first = next((i for i, x in enumerate(faults) if x > 100), None)
            median = sorted(walls)[len(walls) // 2]
            print(f"{d}/{path.name}: {sum(faults)} faults, from iteration {first}; reserve "
                  f"{heap.get('reserved_bytes', 0) / 2**20:.0f} MiB, {heap.get('top_ups', 0)} top-ups; mean iteration "
                  f"x{sum(walls) / len(walls) / median:.2f} its median")
            if heap.get("top_taken_bytes"):   # traces since session 62: the heap's growth
                print("  taken from the heap's top by iteration (MiB):",
                      " ".join(f"{b / 2**20:.0f}" for b in heap["top_taken_bytes"]))
    for name, (n, storms) in sorted(counts.items()):
        print(f"{name}: {n} traces, {storms} with over {args.faults} faults")


if __name__ == "__main__":
    main()
