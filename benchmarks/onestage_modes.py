"""The 1-stage pipeline row's error as the validation measures it (alone) against in turns.

Each round (order rotated) makes the row's round both ways on one core: the real job alone
between two baseline traces alone (:func:`daydream.validation.pipeline.one_stage_alone`, the row
since session 89), and the job in turns with a trace of its own (``one_stage_in_turns``, the row
from session 61 to 88); each trace is predicted right away with the row's spec
(``--action-overhead-us`` and ``--recording-us`` as a validation's notes give them), an alone
round's prediction the mean of its two.  Prints per round each side's baseline iteration, real
step, prediction and error, then the median errors.

Usage (a validation's profile)::

    python benchmarks/onestage_modes.py --rounds 8 --profile DIR/device-cpu-1t.json
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from onestage_turns import iteration_ms

__all__ = ["main"]

SPEC = "pipeline:stages=1,microbatches=4,schedule=gpipe,action_overhead_us={a:.0f},recording_us={r:.2f}"


def main(argv=None) -> None:
    from daydream.validate import predict_now
    from daydream.validation.pipeline import one_stage_alone, one_stage_in_turns

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--profile", required=True, help="device profile (a validation's DIR/device-cpu-1t.json)")
    p.add_argument("--action-overhead-us", type=float, default=67.0)
    p.add_argument("--recording-us", type=float, default=1.14)
    a = p.parse_args(argv)
    spec = SPEC.format(a=a.action_overhead_us, r=a.recording_us)

    def predicted(path) -> float:
        return predict_now(path, [spec], a.profile)[spec].predicted_ms

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        for k in range(a.rounds):
            got = {}

            def alone(k=k):
                got["alone"] = one_stage_alone(d, k)

            def turns(k=k):
                path, ms = one_stage_in_turns(d / f"t{k}.json.gz")
                got["turns"] = ((path,), ms)

            for step in ((alone, turns) if k % 2 == 0 else (turns, alone)):
                step()
            row = {}
            for mode, (paths, ms) in got.items():
                pred = statistics.fmean(predicted(x) for x in paths)
                row[mode] = (statistics.fmean(iteration_ms(x) for x in paths), ms, pred, 100 * (pred / ms - 1))
            rows.append(row)
            print(f"round {k + 1}: " + " | ".join(f"{m}: trace {t:.2f} job {j:.2f} predicted {q:.2f} ms, error {e:+.1f} %"
                                                  for m, (t, j, q, e) in row.items()), flush=True)
    print("median error: " + ", ".join(f"{m} {statistics.median(r[m][3] for r in rows):+.1f} %" for m in ("alone", "turns")))


if __name__ == "__main__":
    main()
