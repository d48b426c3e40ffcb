"""The 1-stage pipeline row's model taken apart with runs in turns: tracer, micro-batches, runtime.

Each round pairs a baseline trace of the pipeline validation's MLP (10 iterations) with an
untraced one-process job, their measured iterations in turns on one core
(:func:`daydream.validate.trace_beside`: both see the machine in the same state, as the ``hfta``
rows' traces do), three times:

* ``plain x1``: the whole model, no pipelining runtime, one batch (``--schedule none
  --microbatches 1``): the traced iteration over this one is the tracer's cost;
* ``plain x4``: the same accumulating gradients over 4 micro-batches: the micro-batch cost model
  alone, predicted by ``pipeline:stages=1,microbatches=4,action_overhead_us=0,scale_grads=0`` (the
  plain loop does not divide its gradients by 4; until session 86 the prediction did);
* ``gpipe 1-stage``: torch's ``ScheduleGPipe`` on one stage (the validation's 1-stage row),
  predicted with the runtime's cost per action (``--action-overhead-us``).

Each pair's prediction is made from its own trace right after it
(:func:`daydream.validate.predict_now`).  Prints per round and pair the real job over its trace's
mean iteration and the prediction over the same, then the medians over the rounds.

Usage::

    python benchmarks/onestage_turns.py --rounds 5 --profile DIR/device-cpu-1t.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

__all__ = ["main", "PAIRS", "iteration_ms"]

#: Pair name -> ((the job's schedule, micro-batches, other pipeline-workload flags), the what-if that predicts it; ``{a}`` the runtime's
#: cost per action, ``{r}`` the tracer's per recorded op).
PAIRS = {
    "plain x1": (("none", 1, ()),
                 "pipeline:stages=1,microbatches=1,schedule=gpipe,action_overhead_us=0,recording_us={r}"),
    "plain x4": (("none", 4, ()),
                 "pipeline:stages=1,microbatches=4,schedule=gpipe,action_overhead_us=0,recording_us={r},scale_grads=0"),
    "gpipe 1-stage": (("gpipe", 4, ("--nproc", "1")),
                      "pipeline:stages=1,microbatches=4,schedule=gpipe,action_overhead_us={a},recording_us={r}"),
}


def iteration_ms(path) -> float:
    """Mean recorded iteration of a trace, ms (the turns' waits cut out)."""
    from daydream.analysis import as_trace

    b = as_trace([path]).ranks[0].boundaries_ns
    return (b[-1] - b[0]) / (len(b) - 1) / 1e6


def pair(tmp: Path, name: str, k: int, spec: str, profile: str) -> tuple:
    """``(real / trace, predicted / trace)`` of one pair run now."""
    from daydream.validate import predict_now, trace_beside
    from daydream.validation.pipeline import MODEL_ARGS, STEPS, WARMUP_STEPS, _cmd

    schedule, microbatches, extra = PAIRS[name][0]
    cmd = _cmd(schedule, extra, WARMUP_STEPS + STEPS, WARMUP_STEPS, microbatches)
    path, (code, out, err) = trace_beside(("mlp", tmp / f"{name.replace(' ', '_')}.r{k}.json.gz", MODEL_ARGS, 1),
                                          cmd, STEPS)
    line = next((x for x in out.splitlines() if x.startswith("{")), None)
    if line is None:
        raise SystemExit(f"{name}: the job failed (exit {code}): {(err.strip().splitlines() or ['?'])[-1]}")
    base = iteration_ms(path)
    rep = predict_now(path, [spec], profile)[spec]
    return json.loads(line)["mean_ms"] / base, rep.predicted_ms / base


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--profile", required=True, help="device profile (a validation's DIR/device-cpu-1t.json)")
    p.add_argument("--action-overhead-us", type=float, default=67.0, help="the runtime's cost per action")
    p.add_argument("--recording-us", type=float, default=None, help="the tracer's cost per op (default: measured)")
    p.add_argument("--pairs", nargs="+", default=list(PAIRS), choices=list(PAIRS))
    args = p.parse_args(argv)
    if args.recording_us is None:
        from daydream.overhead import recording_us_here

        args.recording_us = recording_us_here()
    print(f"recording_us {args.recording_us:.2f}, action_overhead_us {args.action_overhead_us:.0f}", flush=True)
    got = {name: [] for name in args.pairs}
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.rounds):
            for name in args.pairs:
                spec = PAIRS[name][1].format(a=f"{args.action_overhead_us:.0f}", r=f"{args.recording_us:.2f}")
                real, pred = pair(Path(tmp), name, k, spec, args.profile)
                got[name].append((real, pred))
                print(f"round {k + 1}: {name:13s} real / trace {real:.3f}, predicted / trace {pred:.3f}, "
                      f"error {100 * (pred / real - 1):+.1f} %", flush=True)
    for name, rows in got.items():
        real, pred = (statistics.median(x[i] for x in rows) for i in (0, 1))
        errs = [100 * (b / a - 1) for a, b in rows]
        print(f"{name:13s} median real / trace {real:.3f}, predicted / trace {pred:.3f}, error of the medians "
              f"{100 * (pred / real - 1):+.1f} %, per round sd {statistics.pstdev(errs):.1f} %")


if __name__ == "__main__":
    main()
