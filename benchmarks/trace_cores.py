"""The validation MLP's 1-process trace unpinned and pinned to rank 0's / rank 1's core, in turns.

Does where Linux puts a baseline trace move its iteration time?  Each round traces the bundled
MLP (validation sizes, 20 iterations) three ways in an order that alternates, under validate's
malloc settings with idle CPUs polling; prints each trace and per way the median, mean and range.

    python benchmarks/trace_cores.py --rounds 10
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

#: Way of tracing -> ``core_of`` of :func:`daydream.validate.trace_workload`.
WAYS = {"unpinned": None, "core0": (0, 2), "core1": (1, 2)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args(argv)

    from daydream.analysis import replay
    from daydream.cpuidle import polling_idle
    from daydream.validate import trace_workload

    got = {w: [] for w in WAYS}
    with tempfile.TemporaryDirectory() as tmp, polling_idle():
        for r in range(args.rounds):
            line = []
            for w in (list(WAYS) if r % 2 == 0 else list(WAYS)[::-1]):
                path = trace_workload("mlp", Path(tmp) / f"{w}{r}.json.gz", (), iterations=20, core_of=WAYS[w])
                got[w].append(replay(path)[0].measured_ms)
                line.append(f"{w} {got[w][-1]:.2f}")
            print(f"round {r}: " + ", ".join(line), flush=True)
    for w, v in got.items():
        print(f"{w:9s}: median {statistics.median(v):.2f} ms, mean {statistics.fmean(v):.2f}, "
              f"min {min(v):.2f}, max {max(v):.2f}")


if __name__ == "__main__":
    main()
