"""How the point-to-point calibration drifts against real pipeline runs, round by round.

Each round calibrates the point-to-point figures (``daydream.calibrate_procs.gloo_p2p``: the
part of ``daydream calibrate`` that times gloo sends between two pinned processes, and one
sitting of the pipeline hand-over exchange, ``handover_sitting``: ``p2p_post``, ``p2p_handover``), then runs
the validation's 2-process GPipe job (``daydream.validation.pipeline.measure_pipeline``), then
predicts that job from one 1-process trace of the MLP with the round's figures in the profile
twice: hand-overs at the fitted latency (``p2p``, which carries the barrier-started sends that
stalled for their rank's socket thread; what the pipeline model uses) and at the clean send
(the latency set to ``p2p_preposted``; tried in session 36, the 2-process rows then read
10-21 % low).  Idle CPUs poll, as ``daydream validate`` runs.

Prints one line per round: fitted latency, stalled share, clean send, send/receive post, the
round's hand-over figure, measured ms, and the two predictions with their errors; then the
spread of each column.  (A calibration pools three such sittings spread over its run.)

Usage::

    python benchmarks/p2p_drift.py [--rounds 8] [--profile PROFILE.json] [--trace MLP.json.gz]

Without ``--profile`` the validation's cached CPU profile is used (calibrated first if
missing); without ``--trace`` the MLP is traced once with the validation's sizes.
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
from pathlib import Path

__all__ = ["main"]

#: The validation's GPipe row (``daydream.validation.pipeline``), its runtime cost per action fixed.
SPEC = "pipeline:stages=2,microbatches=4,schedule=gpipe,partition=MLP.blocks.2,action_overhead_us=25"


def _predict(trace, prof, tmp: Path) -> float:
    from daydream.device import save_profile
    from daydream.whatif import predict

    path = tmp / "profile.json"
    save_profile(prof, str(path))
    return predict(trace, [SPEC], profile_path=str(path))[0].predicted_ms


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--profile", help="device profile (default: the validation's cached one)")
    p.add_argument("--trace", help="1-process trace of the MLP at the validation's sizes")
    args = p.parse_args(argv)

    from daydream.calibrate_procs import GLOO_SIZES, gloo_p2p
    from daydream.cpuidle import polling_idle
    from daydream.device import load_profile
    from daydream.validate import ensure_profile, trace_workload
    from daydream.validation.pipeline import MODEL_ARGS, measure_pipeline

    base = load_profile(args.profile or ensure_profile())
    rows = []
    with tempfile.TemporaryDirectory() as tmp, polling_idle():
        tmp = Path(tmp)
        trace = args.trace or str(trace_workload("mlp", tmp / "mlp.json.gz", MODEL_ARGS, iterations=10))
        print("round  fitted us  stalled  clean us  post us  hand-over us    measured ms  fitted-latency ms  "
              "clean-send ms")
        for k in range(args.rounds):
            fit = gloo_p2p(GLOO_SIZES)
            measured = measure_pipeline("gpipe", steps=20)
            prof = dataclasses.replace(base, **{name: {"gloo": v} for name, v in fit.items()})
            fitted = _predict(trace, prof, tmp)
            clean_send = {"gloo": (fit["p2p"][0], fit["p2p_preposted"])}
            clean = _predict(trace, dataclasses.replace(prof, p2p=clean_send), tmp)
            rows.append((fit["p2p"][1] / 1e3, fit["p2p_sends"][1], fit["p2p_preposted"] / 1e3, measured, fitted,
                         clean))
            post = "/".join(f"{x / 1e3:.0f}" for x in fit["p2p_post"])
            print(f"{k:5d}  {rows[-1][0]:9.0f}  {rows[-1][1]:7.2f}  {rows[-1][2]:8.0f}  {post:>7s}  "
                  f"{fit['p2p_handover'] / 1e3:12.0f}    "
                  f"{measured:11.2f}  {fitted:8.2f} ({(fitted - measured) / measured * 100:+5.1f}%)  "
                  f"{clean:7.2f} ({(clean - measured) / measured * 100:+5.1f}%)", flush=True)
    cols = list(zip(*rows))
    for name, i in (("fitted latency us", 0), ("measured ms", 3), ("predicted, fitted latency", 4),
                    ("predicted, clean send", 5)):
        print(f"{name}: {min(cols[i]):.2f}-{max(cols[i]):.2f} (median {statistics.median(cols[i]):.2f})")


if __name__ == "__main__":
    main()
