"""A 2-stage pipeline step taken apart per rank: the real runtime's against the prediction's.

Each round traces the pipeline validation's baseline (the bundled MLP at its sizes, 14
iterations, one process), predicts the 2-stage schedule from it with the co-run rates measured
then, runs the real job once under ``benchmarks/pipeline_timeline.py``'s wrappers (torch's
pipelining runtime, 2 pinned gloo processes, 24 steps, 4 of warm-up) and traces again; the
prediction is the mean of both traces' (as ``daydream validate`` brackets a round).  Per rank it
prints the medians over the steps of the real step's parts, the summed forward (``F``) and
backward (``B``) chunks, the point-to-point posts (``post``), the waits for them (``wait``) and the
rest (``gap``: optimizer step, gradient scaling, input, the runtime's own work between chunks),
and the prediction's simulated parts of one iteration (``F`` and ``B`` with the runtime's cost
per action, ``post``, and ``other``: input, scaling and optimizer step).  torch's chunks leave
the runtime's bookkeeping around them out, which the prediction's ``action_overhead_us`` puts in.

Usage (docs/validation-log.md, "Session 91": in a slow state of the host the forward chunks ran
0.05-0.3 ms under the prediction each, rank 1's backward over it)::

    python benchmarks/pipeline_components.py --schedule gpipe --rounds 3 --profile DIR/device-cpu-1t.json \\
        --action-overhead-us 47 --recording-us 0.81
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import statistics
import tempfile
from pathlib import Path

import pipeline_timeline as timeline

__all__ = ["main", "real_parts", "predicted_parts"]

#: The prediction's task names that are neither a chunk nor a post.
OTHER_TASKS = ("optimizer step", "scale gradients by 1/M", "input")
#: The part of the step a logged action of ``pipeline_timeline.py`` is.
_KIND = re.compile(r"^([FB](?=\d+$)|post(?=:)|wait(?= ))")


def real_parts(schedule: str, model_args) -> tuple:
    """``(mean step ms, {rank: {part: median ms}})`` of one logged real run (see the docstring)."""
    from daydream.cpuidle import polling_idle
    from daydream.workloads import pipeline

    with tempfile.TemporaryDirectory() as tmp, polling_idle(), contextlib.redirect_stdout(io.StringIO()):
        os.environ[timeline._DIR_ENV] = tmp
        try:
            timeline._install()
            pipeline.main(["--schedule", schedule, "--microbatches", "4", "--steps", "24", "--warmup", "4",
                           "--threads", "1", "--pin-cores", *model_args])
        finally:
            del os.environ[timeline._DIR_ENV]
        logs = {int(f.stem.removeprefix("rank")): json.loads(f.read_text()) for f in Path(tmp).glob("rank*.json")}
    parts, spans = {}, []
    for r, log in logs.items():
        steps = timeline._steps(log)[4:]
        got = {k: [] for k in ("F", "B", "post", "wait", "gap")}
        for a, b in zip(steps, steps[1:]):
            span = b[0][1] - a[0][1]
            if r == 0:
                spans.append(span / 1e6)
            own = {"F": 0, "B": 0, "post": 0, "wait": 0}
            for what, t0, t1 in a:
                kind = _KIND.match(what)      # F3, B0, post:fwd_send, wait fwd_recv
                if kind:
                    own[kind.group(1)] += t1 - t0
            for k, v in own.items():
                got[k].append(v / 1e6)
            got["gap"].append((span - sum(own.values())) / 1e6)
        parts[r] = {k: statistics.median(v) for k, v in got.items()}
    return statistics.fmean(spans), parts


def predicted_parts(trace, spec: str, profile) -> tuple:
    """``(predicted ms, {rank: {part: ms}})`` of the simulated second iteration."""
    from daydream.optimizations._corun import forget_measured
    from daydream.whatif import predict

    forget_measured()
    report, res = predict(trace, [spec], profile_path=profile)
    g, parts = res.graph, {}
    T = g.tasks
    for t in range(g.n_tasks):
        if T["iteration"][t] != 1:
            continue
        name = g.task_name(t)
        key = (name[1] if name[:1].isdigit() and name[1:2] in ("F", "B") else "post" if name.startswith("post")
               else "other" if name in OTHER_TASKS else None)
        if key:
            mine = parts.setdefault(int(T["rank"][t]), dict.fromkeys(("F", "B", "post", "other"), 0.0))
            mine[key] += (res.end_ns[t] - res.start_ns[t]) / 1e6
    return report.predicted_ms, parts


def main(argv=None) -> None:
    from daydream.validate import trace_workload
    from daydream.validation.pipeline import MODEL_ARGS, PARTITION

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--schedule", choices=("gpipe", "1f1b"), default="gpipe")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--profile", required=True, help="device profile (a validation's DIR/device-cpu-1t.json)")
    p.add_argument("--action-overhead-us", type=float, required=True, help="the runtime's cost per action")
    p.add_argument("--recording-us", type=float, required=True, help="the tracer's cost per recorded op")
    args = p.parse_args(argv)
    spec = (f"pipeline:stages=2,microbatches=4,schedule={args.schedule},partition={PARTITION},"
            f"action_overhead_us={args.action_overhead_us:g},recording_us={args.recording_us:g},handover=now")
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.rounds):
            before = predicted_parts(trace_workload("mlp", Path(tmp) / f"r{k}.a.json.gz", MODEL_ARGS, iterations=14),
                                     spec, args.profile)
            real_ms, real = real_parts(args.schedule, MODEL_ARGS)
            after = predicted_parts(trace_workload("mlp", Path(tmp) / f"r{k}.b.json.gz", MODEL_ARGS, iterations=14),
                                    spec, args.profile)
            pred_ms = (before[0] + after[0]) / 2
            print(f"round {k + 1}: predicted {pred_ms:.2f} ms (traces {before[0]:.2f} / {after[0]:.2f}), real "
                  f"{real_ms:.2f} ms, error {100 * (pred_ms / real_ms - 1):+.1f} %")
            for r in sorted(real):
                pred = {key: (before[1][r][key] + after[1][r][key]) / 2 for key in before[1][r]}
                print(f"  rank {r} real: " + " ".join(f"{key} {v:.2f}" for key, v in real[r].items())
                      + "  | predicted: " + " ".join(f"{key} {v:.2f}" for key, v in pred.items()), flush=True)


if __name__ == "__main__":
    main()
