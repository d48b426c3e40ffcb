"""The ``device`` row with and without ``settle``, predicted from the same rounds.

The ``device`` what-if re-runs a traced iteration's ops at 1 and at 2 intra-op threads, the
two passes in turn in one process (:func:`daydream.opseq.sequence_ratios`): each timed pass
at 2 threads follows one at 1 thread, through which the OpenMP worker had nothing to do.  A
real 2-thread training run never leaves its worker idle for a whole step.  ``settle=1`` runs
each thread count's pass once untimed before its timed pass, so that the timed pass follows
one at its own thread count.

This makes the ``device`` validation's rounds (:func:`daydream.validate.paired_rounds`: a
1-thread trace, then a real 2-thread run, ``--rounds`` rounds) and after each round predicts
the 2-thread time from its 1-thread trace twice, ``settle=0`` and ``settle=1`` in alternating
order; then prints, per variant, the row's error (mean prediction against mean real run, as
``daydream validate`` reports it), the per-round prediction over the round's baseline, and the
real runs over theirs.

Usage::

    python benchmarks/device_settle.py --workload mlp --rounds 10 -o /tmp/settle

Calibrates the 1- and 2-thread profiles into ``-o`` first (about a minute), unless given
``--profile-1t`` and ``--profile-2t``.  Needs two otherwise idle cores.
"""
from __future__ import annotations

import argparse
import statistics
from pathlib import Path

__all__ = ["main", "VARIANTS"]

#: The two predictions made from every round's 1-thread trace.
VARIANTS = ("settle=0", "settle=1")


def _profiles(a, out: Path) -> tuple:
    if a.profile_1t and a.profile_2t:
        return a.profile_1t, a.profile_2t
    from daydream.validation.device import _fresh_profile

    return tuple(_fresh_profile(out, t, print) for t in (1, 2))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="mlp", help="a bundled workload (mlp, transformer)")
    ap.add_argument("--rounds", type=int, default=10, help="rounds (a 1-thread trace and a real 2-thread run each)")
    ap.add_argument("--iterations", type=int, default=5, help="traced iterations a run")
    ap.add_argument("--profile-1t", help="1-thread profile (default: calibrated now)")
    ap.add_argument("--profile-2t", help="2-thread profile (default: calibrated now)")
    ap.add_argument("-o", "--out", required=True, help="output directory (traces, profiles)")
    a = ap.parse_args(argv)
    from daydream.validate import paired_rounds
    from daydream.whatif import predict

    out = Path(a.out)
    (out / "traces").mkdir(parents=True, exist_ok=True)
    p1, p2 = _profiles(a, out)
    w = a.workload
    configs = [(w, out / "traces" / f"{w}.dev1t.json.gz", ("--threads", "1"), 1),
               (w, out / "traces" / f"{w}.dev2t.json.gz", ("--threads", "2"), 1)]
    got = {v: [] for v in VARIANTS}
    base, real = [], []

    def after_round(runs):
        k = len(base)
        for v in VARIANTS if k % 2 == 0 else VARIANTS[::-1]:
            rep, _ = predict(runs[0][0], [f"device:target={p2},{v}"], profile_path=p1)
            got[v].append(rep.predicted_ms)
        base.append(runs[0][1].simulated_ms)
        real.append(runs[1][1].measured_ms)
        print(f"round {k + 1}/{a.rounds}: base {base[-1]:.2f} ms, real {real[-1]:.2f}; "
              + ", ".join(f"{v} {got[v][-1]:.2f}" for v in VARIANTS), flush=True)

    paired_rounds((a.rounds + 1) // 2, configs, a.iterations, False, after_round)
    print(f"real over base per round: " + " ".join(f"{r / b:.2f}" for r, b in zip(real, base)))
    for v in VARIANTS:
        err = 100.0 * (statistics.fmean(got[v]) / statistics.fmean(real) - 1.0)
        print(f"{v}: error {err:+.1f} %; prediction over base per round: "
              + " ".join(f"{p / b:.2f}" for p, b in zip(got[v], base)))


if __name__ == "__main__":
    main()
