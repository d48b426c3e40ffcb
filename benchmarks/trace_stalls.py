"""The machine's stalls in traces: per trace, the time its stalled ops lost an iteration.

A what-if takes an op that ran several times longer than itself in the other
iterations as the machine's stall (:mod:`daydream.graph.stalls`) and keeps the
excess as time between ops, which no optimization rescales.  A real run of the
variant meets stalls too, at the machine's rate per second of its own: where
the variant's iterations are N times the baseline's (``hfta:models=N``), they
meet about N times the stall time an iteration.  This prints, per trace, its
mean iteration, the stall time an iteration that :func:`settle_stalls` takes
out, its share of the iteration and how many ops stalled; then per group of
traces (the name up to its round, ``hfta.cnn.n4`` for ``hfta.cnn.n4.r0``) the
stall time over the traced time, pooled.

    python benchmarks/trace_stalls.py DIR/traces/hfta.cnn.n*.json.gz
"""
from __future__ import annotations

import argparse
import re
from pathlib import Path

__all__ = ["main", "group_of", "trace_stalls"]


def group_of(path: str) -> str:
    """A trace's group: its file name up to the round.

    >>> group_of("/x/traces/hfta.cnn.n4.r12.json.gz"), group_of("mlp.pipeline-base.r3.json.gz")
    ('hfta.cnn.n4', 'mlp.pipeline-base')
    >>> group_of("plain.json")
    'plain'
    """
    name = Path(path).name
    return re.sub(r"(\.r\d+)?\.json(\.gz)?$", "", name)


def trace_stalls(path: str) -> tuple:
    """``(iterations, mean iteration ms, stall ms an iteration, stalled ops)`` of one trace."""
    from daydream.graph.stalls import settle_stalls
    from daydream.sim import simulate
    from daydream.whatif import trace_and_graph

    _, g = trace_and_graph(path, None)
    base = simulate(g)
    n = len(base.iterations()[0].measured_ns)
    report = settle_stalls(g)
    return n, base.mean_iteration_ns()[0] / 1e6, report.excess_ns / max(n, 1) / 1e6, report.tasks


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("traces", nargs="+", help="trace files (daydream trace's .json.gz)")
    args = ap.parse_args(argv)
    pooled: dict = {}
    for p in args.traces:
        n, mean_ms, stall_ms, ops = trace_stalls(p)
        print(f"{Path(p).name:40s} {n:3d} it  mean {mean_ms:8.2f} ms  stalls {stall_ms:6.2f} ms an iteration "
              f"({100 * stall_ms / mean_ms if mean_ms else 0:4.1f} %) in {ops} ops")
        tot = pooled.setdefault(group_of(p), [0.0, 0.0, 0])
        tot[0] += n * stall_ms
        tot[1] += n * mean_ms
        tot[2] += 1
    for grp, (stall, total, k) in pooled.items():
        print(f"{grp:40s} {k:3d} traces: stalls {100 * stall / total if total else 0:4.1f} % of the traced time")


if __name__ == "__main__":
    main()
