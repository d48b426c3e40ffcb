"""How alike two identical runs traced in turns measure: the noise floor of a validation row.

Each round traces the same workload twice at once, iterations taken in turns
(:func:`daydream.validate.trace_in_turns`), and takes the ratio of the two
runs' mean iteration times.  A validation row compares a baseline and a
variant traced the same way, so the spread of this ratio over rounds is the
part of a row's error that no model can remove.  Conditions: the turn length
(``--quantum-s``) and whether the processes record on one shared core
(``--free-cores`` lets the system place them).

    python benchmarks/turns_aa.py --workload mlp --rounds 6
    python benchmarks/turns_aa.py --workload mlp --rounds 6 --free-cores --quantum-s 0.1
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path


def aa_ratios(workload: str, rounds: int, iterations: int, quantum_s: float, one_core: bool,
              extra: tuple = ()) -> list:
    """The B/A ratio of mean iteration times in each round."""
    from daydream.analysis import replay
    from daydream.validate import trace_in_turns

    out = []
    with tempfile.TemporaryDirectory(prefix="daydream-aa-") as tmp:
        for k in range(rounds):
            a, b = trace_in_turns([(workload, Path(tmp) / f"a{k}.json.gz", extra, 1),
                                   (workload, Path(tmp) / f"b{k}.json.gz", extra, 1)],
                                  iterations, quantum_s=quantum_s, one_core=one_core)
            ta, tb = (replay(p)[0].measured_ms for p in (a, b))
            out.append(tb / ta)
            print(f"round {k}: A {ta:.2f} ms, B {tb:.2f} ms, B/A {tb / ta:.3f}", file=sys.stderr, flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", default="mlp")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--quantum-s", type=float, default=None, help="turn length (default: validate's TURN_S)")
    ap.add_argument("--free-cores", action="store_true", help="do not record on one shared core")
    ap.add_argument("extra", nargs="*", help="workload flags after --, added to validate's sizes")
    a = ap.parse_args(argv)
    from daydream.validate import TURN_S

    q = TURN_S if a.quantum_s is None else a.quantum_s
    r = aa_ratios(a.workload, a.rounds, a.iterations, q, not a.free_cores, tuple(a.extra))
    print(f"{a.workload}: turns of {q} s, {'free cores' if a.free_cores else 'one shared core'}, "
          f"{a.rounds} rounds of {a.iterations} iterations: B/A spread (population sd) "
          f"{100 * statistics.pstdev(r):.1f} %, worst |B/A - 1| {100 * max(abs(x - 1) for x in r):.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
