"""``hfta`` variants predicted again from a validation's rounds, against each round's real fused job.

A validation's HFTA rows (``daydream validate --opt hfta``) keep every round's
traces: the single model's (``hfta.W.n0.rR.json.gz``) and each fused job's
(``hfta.W.nN.rR.json.gz``), taken with their iterations in turns.  This predicts
each round's fused job from the round's baseline with every ``--spec`` (options
added to ``hfta:models=N``, ``""`` for the defaults) one after the other, now,
and prints each prediction's signed error against the round's real fused job
(``measured_ms``: its mean iteration after the first), then per spec and N the
mean error over the rounds.  The predictions re-run ops now, not in the minute
the traces were taken; the specs are predicted in turns, round by round, so the
machine's drift hits them alike.

    python benchmarks/hfta_specs.py DIR --workload cnn --spec chained=false --spec ""
"""
from __future__ import annotations

import argparse
import statistics
from pathlib import Path

__all__ = ["main", "hfta_spec", "in_turns"]


def hfta_spec(models: int, options: str) -> str:
    """The what-if spec of ``models`` fused copies with extra ``options``.

    >>> hfta_spec(2, ""), hfta_spec(4, "chained=false")
    ('hfta:models=2', 'hfta:models=4,chained=false')
    """
    return f"hfta:models={models}" + (f",{options}" if options else "")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", help="a validation's output directory (its traces/ and device-cpu-1t.json)")
    ap.add_argument("--workload", default="cnn", choices=("mlp", "cnn"))
    ap.add_argument("--spec", action="append", default=None, help="hfta options to compare (repeat; '' = defaults)")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    from daydream.analysis import replay
    from daydream.validation.hfta import MODELS
    from daydream.whatif import predict

    d = Path(args.dir)
    specs = args.spec if args.spec is not None else ["chained=false", ""]
    profile = str(d / "device-cpu-1t.json")
    cases = [(f"round {r} N={n}", n, d / "traces" / f"hfta.{args.workload}.n0.r{r}.json.gz",
              replay(str(d / "traces" / f"hfta.{args.workload}.n{n}.r{r}.json.gz"))[0].measured_ms)
             for r in range(args.rounds) for n in MODELS[args.workload]]
    in_turns(cases, specs, lambda base, n, s: predict(str(base), [hfta_spec(n, s)], profile_path=profile)[0],
             "N={}")


def in_turns(cases, specs, predict_one, group: str = "{}") -> dict:
    """Each case predicted with every spec in turns: ``cases`` ``(label, key, baseline trace, real
    ms)``, ``predict_one(baseline, key, spec)`` a :class:`daydream.whatif.WhatIfReport`; prints each
    prediction's signed error against the real figure, then per spec and key (``group`` formats
    it) the mean over the cases.  Returns ``{(spec, key): [error %, ...]}``."""
    errors: dict = {}
    for label, key, base, real in cases:
        cells = []
        for s in specs:
            got = predict_one(base, key, s).predicted_ms
            errors.setdefault((s, key), []).append(100.0 * (got / real - 1.0))
            cells.append(f"[{s or 'defaults'}] {got:7.2f} ({errors[(s, key)][-1]:+5.1f} %)")
        print(f"{label}: real {real:7.2f} ms  " + "  ".join(cells), flush=True)
    for (s, key), v in errors.items():
        print(f"[{s or 'defaults'}] {group.format(key)}: mean {statistics.fmean(v):+.1f} %  "
              f"({' '.join(f'{x:+.1f}' for x in v)})")
    return errors

if __name__ == "__main__":
    main()
