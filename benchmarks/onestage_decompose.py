"""The 1-stage pipeline row's error taken apart: the micro-batch cost model against the tracer.

Each round traces the pipeline validation's MLP baseline (10 iterations) and runs the plain
loop untraced at one micro-batch and at four (``--schedule none``: the whole model, gradients
accumulated), each alone, one after the other (order rotated) on one core (``--core``).  From
the trace it predicts both loops (``pipeline:stages=1,microbatches=M,action_overhead_us=0,
scale_grads=0`` with the tracer's measured cost per op taken out, ``recording_us``) and splits
the error of the 4-micro-batch prediction into two factors:

* **the model**: predicted x4 over predicted x1 against real x4 over real x1, both untraced
  (what splitting the batch costs, the tracer's share cancelled);
* **the baseline**: predicted x1 over the real untraced x1 (what the trace still carries of the
  tracer after ``recording_us``).

Their product is the 4-micro-batch prediction over its real loop.  Medians over the rounds.

Usage::

    python benchmarks/onestage_decompose.py --rounds 5 --profile DIR/device-cpu-1t.json
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from onestage_alone_turns import _job_ms, _trace
from onestage_turns import iteration_ms

__all__ = ["main"]

SPEC = "pipeline:stages=1,microbatches={m},schedule=gpipe,action_overhead_us=0,recording_us={r:.2f},scale_grads=0"


def main(argv=None) -> None:
    from daydream.overhead import recording_us_here
    from daydream.validate import predict_now

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--profile", required=True, help="device profile (a validation's DIR/device-cpu-1t.json)")
    p.add_argument("--core", type=int, default=1, help="the core every run takes (taskset)")
    a = p.parse_args(argv)
    prefix = ("taskset", "-c", str(a.core))
    rec = recording_us_here()
    specs = {m: SPEC.format(m=m, r=rec) for m in (1, 4)}
    print(f"recording_us {rec:.2f}", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(a.rounds):
            got = {}
            steps = [lambda k=k: got.__setitem__("trace", _trace(Path(tmp) / f"b{k}.json.gz", prefix)),
                     lambda: got.__setitem__(1, _job_ms(prefix, "none", 1)),
                     lambda: got.__setitem__(4, _job_ms(prefix, "none", 4))]
            for step in steps[k % 3:] + steps[:k % 3]:
                step()
            reports = predict_now(got["trace"], list(specs.values()), a.profile)
            pred = {m: reports[spec].predicted_ms for m, spec in specs.items()}
            row = {"trace": iteration_ms(got["trace"]), "real1": got[1], "real4": got[4], "pred1": pred[1],
                   "pred4": pred[4]}
            row["model"] = (row["pred4"] / row["pred1"]) / (row["real4"] / row["real1"])
            row["baseline"] = row["pred1"] / row["real1"]
            row["error"] = row["pred4"] / row["real4"]
            rows.append(row)
            print(f"round {k + 1}: trace {row['trace']:.2f}, untraced x1 {row['real1']:.2f} x4 {row['real4']:.2f}, "
                  f"predicted x1 {row['pred1']:.2f} x4 {row['pred4']:.2f} ms; model x{row['model']:.3f}, "
                  f"baseline x{row['baseline']:.3f}, x4 predicted over real x{row['error']:.3f}", flush=True)
    med = {k: statistics.median(r[k] for r in rows) for k in ("model", "baseline", "error")}
    print(f"medians: the model x{med['model']:.3f} (x4 / x1 predicted over real), the baseline x{med['baseline']:.3f} "
          f"(x1 predicted over real), x4 predicted over real x{med['error']:.3f}")


if __name__ == "__main__":
    main()
