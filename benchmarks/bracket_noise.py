"""How much a 1-process baseline trace moves a 2-process prediction: before, after, and both.

Each round traces the Hydra validation's baseline (the bundled MLP, one
process), runs the real 2-model Hydra job (``daydream.validation.hydra.run_real``),
and traces the baseline again; it prints the error of the prediction from the
trace before the run, from the trace after it, and from their mean (what
``daydream validate`` now takes, :func:`daydream.validate.bracket_predictions`),
and at the end the spread (standard deviation over the rounds) of each.
Under validate's malloc settings, with idle CPUs polling.

``--cores``: rounds alternate between traces where Linux puts them
(``unpinned``) and traces on the two processes' cores, the one before the run
on rank 0's and the one after on rank 1's (``pinned``), and each mode's spread is printed.

Usage::

    python benchmarks/bracket_noise.py --rounds 6 --profile DIR/device-cpu-1t.json
    python benchmarks/bracket_noise.py --rounds 16 --cores --profile DIR/device-cpu-1t.json
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

SCHEDULES = ("model-parallel", "shard-parallel")


def _predict(path, profile, split):
    from daydream.whatif import predict

    return [predict(path, [f"hydra:models=2,devices=2,schedule={s},layers={split}"], profile_path=profile)[0]
            .predicted_ms for s in SCHEDULES]


def _pct(p, m):
    return (p / m - 1.0) * 100.0


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--profile", required=True, help="a CPU device profile (1 thread), e.g. a validation's")
    ap.add_argument("--layers", default="4:5", help="the split (layers per shard), as the validation chose it")
    ap.add_argument("--cores", action="store_true",
                    help="alternate rounds of unpinned traces and of traces on rank 0's, then rank 1's core")
    args = ap.parse_args(argv)

    from daydream.cpuidle import polling_idle
    from daydream.validate import trace_workload
    from daydream.validation.hydra import run_real

    shard0 = int(args.layers.split(":")[0])
    modes = ("unpinned", "pinned") if args.cores else ("unpinned",)
    err = {(mode, w): {s: [] for s in SCHEDULES} for mode in modes for w in ("before", "after", "mean")}
    with tempfile.TemporaryDirectory() as tmp, polling_idle():
        for r in range(args.rounds):
            mode = modes[r % len(modes)]
            pinned = mode == "pinned"
            before = trace_workload("mlp", Path(tmp) / f"b{r}a.json.gz", (), iterations=20,
                                    core_of=(0, 2) if pinned else None)
            real = run_real(2, shard0)
            after = trace_workload("mlp", Path(tmp) / f"b{r}b.json.gz", (), iterations=20,
                                   core_of=(1, 2) if pinned else None)
            pa, pb = _predict(before, args.profile, args.layers), _predict(after, args.profile, args.layers)
            line = []
            for i, s in enumerate(SCHEDULES):
                m = real[s]
                for w, p in (("before", pa[i]), ("after", pb[i]), ("mean", (pa[i] + pb[i]) / 2)):
                    err[(mode, w)][s].append(_pct(p, m))
                line.append(f"{s} real {m:.2f} ms, before {_pct(pa[i], m):+.1f} %, after {_pct(pb[i], m):+.1f} %, "
                            f"mean {err[(mode, 'mean')][s][-1]:+.1f} %")
            print(f"round {r} ({mode}): " + "; ".join(line), flush=True)
    for (mode, w), by in err.items():
        print(f"{mode:8s} {w:6s}: " + ", ".join(f"{s} mean {statistics.fmean(v):+.1f} %, sd {statistics.stdev(v):.1f}"
                                                for s, v in by.items() if len(v) > 1))


if __name__ == "__main__":
    main()
