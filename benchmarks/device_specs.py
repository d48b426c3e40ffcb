"""``device`` variants predicted again from a validation's rounds, against each round's real 2-thread run.

A validation's device rows (``daydream validate --opt device``) keep every
round's traces: the 1-thread baseline (``W.dev1t.rR.json.gz``) and the real
2-thread run (``W.dev2t.rR.json.gz``), and the two profiles it measured
(``device-cpu-{1,2}t-nocomm.json``).  This predicts each round's 2-thread run
from the round's baseline with every ``--spec`` (options added to
``device:target=<2-thread profile>``, ``""`` for the defaults) in turns, now,
and prints each prediction's signed error against the round's real run, then
per spec the mean over the rounds.  The re-runs are measured now, not in the
minute the round was traced, so a round's error here says less than the
difference between specs, which meet the machine's drift alike.

    python benchmarks/device_specs.py DIR --workload transformer --spec flow=false --spec ""
"""
from __future__ import annotations

import argparse
from pathlib import Path

from hfta_specs import in_turns

__all__ = ["main"]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", help="a validation's output directory (its traces/ and device-cpu-*-nocomm.json)")
    ap.add_argument("--workload", default="mlp", choices=("mlp", "transformer"))
    ap.add_argument("--spec", action="append", default=None, help="device options to compare (repeat; '' = defaults)")
    ap.add_argument("--rounds", type=int, nargs="+", default=list(range(5)), help="round numbers (default 0-4)")
    args = ap.parse_args(argv)
    from daydream.analysis import replay
    from daydream.whatif import predict

    d = Path(args.dir)
    specs = args.spec if args.spec is not None else [""]
    target, profile = (str(d / f"device-cpu-{t}t-nocomm.json") for t in (2, 1))
    traces = d / "traces"
    cases = [(f"round {r}", args.workload, traces / f"{args.workload}.dev1t.r{r}.json.gz",
              replay(str(traces / f"{args.workload}.dev2t.r{r}.json.gz"))[0].measured_ms) for r in args.rounds]

    def one(base, _, s):
        return predict(str(base), [f"device:target={target}" + (f",{s}" if s else "")], profile_path=profile)[0]

    in_turns(cases, specs, one)


if __name__ == "__main__":
    main()
