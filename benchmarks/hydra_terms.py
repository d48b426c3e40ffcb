"""Hydra's predicted timeline against the real runtime's, term by term, in the same minutes.

Per round: the validation's single-model MLP baseline traced (as ``daydream validate`` traces
it), both schedules predicted from it right away (the co-run rate measured afresh,
:func:`daydream.validate.predict_now`'s way), and the real K-model job run with ``--task-log``
(``daydream.workloads.hydra``, the validation's sizes and pinning).  Printed, predicted against
real with their difference, medians over the rounds:

* per schedule and rank, the per-round sums of each task kind (forward, backward, step; a
  task's send post counted in the task that sends, as the runtime's log counts it), the rank's
  busy time and its idle time before its first task, between tasks and after its last;
* per schedule, the round's span (the earliest rank's start to the last one's end, as the
  runtime measures it) and the hand-overs to an idle rank (the sending task's end to the
  receiving task's start, :func:`hydra_timeline.handover_gaps`);
* per rank, the trace's shard forward and backward before any of ``hydra``'s factors (the
  first shard's forward without the iteration's other work) against the runtime's
  ``forward.compute`` and ``backward.compute`` parts.

A term that reads high in one schedule and not in the other is what moves the schedules' ratio.

Usage (a validation's profile; its Hydra split)::

    python benchmarks/hydra_terms.py --profile DIR/device-cpu-1t.json --models 4 --rounds 4
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

__all__ = ["main", "add_round_args", "traced_and_run", "predicted_sums", "real_sums", "idle_parts", "trace_shards",
           "real_parts"]

SCHEDULES = ("model-parallel", "shard-parallel")
KINDS = ("forward", "backward", "step")
PARTS = ("forward.compute", "backward.compute")
_TASK = re.compile(r"(?:post )?model \d+ (forward shard|activation|backward shard|gradient|optimizer shard)")
_KIND = {"forward shard": "forward", "activation": "forward", "backward shard": "backward",
         "gradient": "backward", "optimizer shard": "step"}


def _named(res):
    """``[(name, lane, start ns, end ns)]`` of a predicted Hydra timeline's device tasks."""
    g = res.graph
    names, T = g.names.strings, g.tasks
    return [(names[T["name"][t]], g.lanes[int(T["lane"][t])], int(res.start_ns[t]), int(res.end_ns[t]))
            for t in range(g.n_tasks) if T["name"][t] >= 0 and g.lanes[int(T["lane"][t])].kind.name != "COMM"]


def predicted_sums(res) -> dict:
    """``{rank: {kind: ms, "busy": ms, "span": ms}}`` of one predicted Hydra timeline; and
    ``"handover"``: ``{"forward": [ns], "backward": [ns]}`` as :func:`hydra_timeline.handover_gaps`."""
    out = defaultdict(lambda: defaultdict(float))
    spans, tasks = defaultdict(list), _named(res)
    for name, lane, t0, t1 in tasks:
        m = _TASK.match(name)
        if m:
            out[lane.tid][_KIND[m.group(1)]] += (t1 - t0) / 1e6
            out[lane.tid]["busy"] += (t1 - t0) / 1e6
            spans[lane.tid].append((t0, t1))
    for r in out:
        out[r]["span"] = res.makespan_ns / 1e6
        out[r].update(idle_parts(spans[r], 0, res.makespan_ns))
    sums = {r: dict(v) for r, v in out.items()}
    sums["handover"] = _predicted_handovers(tasks)
    return sums


def _predicted_handovers(tasks) -> dict:
    """Hand-overs to an idle rank in :func:`_named`'s ``tasks``, as :func:`hydra_timeline.handover_gaps`."""
    end = {}
    for name, lane, t0, t1 in tasks:
        m = re.match(r"(?:post )?model (\d+) (forward shard 0|activation|backward shard 1|gradient)", name)
        if m:
            kind = "forward" if m.group(2) in ("forward shard 0", "activation") else "backward"
            end[(int(m.group(1)), kind)] = max(end.get((int(m.group(1)), kind), 0), t1)
    gaps = {"forward": [], "backward": []}
    for kind, dst in (("forward", 1), ("backward", 0)):
        mine = sorted((t0, t1, name) for name, lane, t0, t1 in tasks if lane.tid == dst)
        for i, (t0, _, name) in enumerate(mine):
            m = re.match(rf"model (\d+) {kind} shard {dst}$", name)
            sent = end.get((int(m.group(1)), kind)) if m else None
            if sent is not None and max((e for _, e, _ in mine[:i]), default=0) <= sent:
                gaps[kind].append(t0 - sent)
    return gaps


def idle_parts(spans, start_ns, end_ns) -> dict:
    """A rank's idle time in a round (ms): ``lead`` before its first task, ``gaps`` between its
    tasks, ``tail`` after its last one, the round from ``start_ns`` to ``end_ns``.

    >>> idle_parts([(2_000_000, 3_000_000), (3_500_000, 4_000_000)], 0, 5_000_000)
    {'lead': 2.0, 'gaps': 0.5, 'tail': 1.0}
    """
    spans = sorted(spans)
    gaps = sum(max(0, b[0] - a[1]) for a, b in zip(spans, spans[1:]))
    return {"lead": (spans[0][0] - start_ns) / 1e6, "gaps": gaps / 1e6, "tail": (end_ns - spans[-1][1]) / 1e6}


def real_sums(log_dir) -> dict:
    """``{schedule: {rank: {kind: [ms per round], "busy": [...]}, "span": [ms per round],
    "handover": {"forward": [ns], "backward": [ns]}}}`` of a task log; a round's span from the
    earliest rank's start to the last one's end, as the runtime measures its makespan."""
    from hydra_timeline import handover_gaps, load

    logs = load(log_dir)
    out = {s: defaultdict(lambda: defaultdict(list)) for s in SCHEDULES}
    for s in SCHEDULES:
        bounds, tasks = defaultdict(list), defaultdict(lambda: defaultdict(list))
        out[s]["span"] = []
        for rank, rows in logs.items():
            for x in rows:
                if x["schedule"] == s and x["what"] in KINDS:
                    tasks[x["round"]][rank].append(x)
                elif x["schedule"] == s and x["what"] == "round":
                    bounds[x["round"]].append((x["start_ns"], x["end_ns"]))
        for rd, per_rank in tasks.items():
            t0, t1 = min(a for a, _ in bounds[rd]), max(b for _, b in bounds[rd])
            out[s]["span"].append((t1 - t0) / 1e6)
            for rank, xs in per_rank.items():
                for k in KINDS:
                    out[s][rank][k].append(sum(x["end_ns"] - x["start_ns"] for x in xs if x["what"] == k) / 1e6)
                out[s][rank]["busy"].append(sum(x["end_ns"] - x["start_ns"] for x in xs) / 1e6)
                for k, v in idle_parts([(x["start_ns"], x["end_ns"]) for x in xs], t0, t1).items():
                    out[s][rank][k].append(v)
        out[s]["handover"] = handover_gaps(logs, s)
    return out


def add_round_args(ap) -> None:
    """The options :func:`traced_and_run` reads, on ``ap``."""
    ap.add_argument("--profile", required=True, help="device profile (a validation's device-cpu-1t.json)")
    ap.add_argument("--models", type=int, default=4)
    ap.add_argument("--layers", default="4:5", help="the validation's split (its log says it)")
    ap.add_argument("--rounds", type=int, default=4, help="trace + predict + real run, in turn")
    ap.add_argument("--real-rounds", type=int, default=6, help="measured rounds per schedule of each real run")
    ap.add_argument("--options", default="", help="more hydra options for the prediction, e.g. cycle=true")


def traced_and_run(r, args, tdir, env) -> tuple:
    """One round: the validation MLP traced as ``daydream validate`` traces it, both schedules
    predicted from it at once (the co-run rates measured afresh), then the real K-model job run
    with ``--task-log``: ``(trace, {schedule: (report, result)}, log dir)``.  ``args``: ``models``,
    ``layers``, ``real_rounds``, ``profile`` and ``options`` (more of ``hydra``'s options, comma-separated)."""
    from daydream.validate import WORKLOAD_ARGS, trace_workload
    from daydream.whatif import predict
    from daydream.optimizations._corun import forget_measured

    trace = trace_workload("mlp", tdir / f"base.r{r}.json.gz", (), iterations=5)
    forget_measured()
    more = f",{args.options}" if args.options else ""
    preds = {s: predict(trace, [f"hydra:models={args.models},devices=2,schedule={s},layers={args.layers}{more}"],
                        profile_path=args.profile) for s in SCHEDULES}
    log = tdir / f"log.r{r}"
    log.mkdir()
    cmd = [sys.executable, "-m", "daydream.workloads.hydra", "--models", str(args.models), "--devices", "2",
           "--shard0-layers", args.layers.split(":")[0], "--rounds", str(args.real_rounds), "--pin-cores",
           *WORKLOAD_ARGS["mlp"], "--task-log", str(log)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode:
        raise SystemExit(f"the real Hydra run failed: {proc.stderr.strip()[-500:]}")
    return trace, preds, log


def _round(r, args, tdir, env) -> tuple:
    trace, preds, log = traced_and_run(r, args, tdir, env)
    pred = {s: predicted_sums(res) for s, (_, res) in preds.items()}
    pred["trace_ms"] = preds[SCHEDULES[0]][0].measured_ms
    pred["shards"] = trace_shards(trace, args.layers, args.profile)
    return pred, {**real_sums(log), "parts": real_parts(log)}


def trace_shards(trace, layers: str, profile_path) -> dict:
    """``{rank: {"forward.compute": ms, "backward.compute": ms}}``: each shard's forward (the first
    shard's without the iteration's other work, ``head``) and backward time per iteration in the
    trace, as ``hydra`` totals them before any factor."""
    import daydream.optimizations.hydra as hydra
    from daydream.optimizations import WhatIfContext
    from daydream.optimizations._common import module_table
    from daydream.whatif import device_for, trace_and_graph

    tr, g = trace_and_graph(str(trace), None)
    ctx = WhatIfContext(graph=g, trace=tr, device=device_for(tr, profile_path=profile_path))
    units, _, _ = hydra.layer_units(g, module_table(ctx, "hydra"))
    costs = hydra.shard_costs(units, 0.0, 0.0, 2, [int(x) for x in layers.split(":")])
    return {r: {"forward.compute": costs.fwd_ns[r] / 1e6, "backward.compute": costs.bwd_ns[r] / 1e6} for r in (0, 1)}


def real_parts(log_dir) -> dict:
    """``{schedule: {rank: {part: [ms per task]}}}``: the runtime's ``forward.compute`` and
    ``backward.compute`` parts."""
    from hydra_timeline import load

    out = {s: defaultdict(lambda: defaultdict(list)) for s in SCHEDULES}
    for rank, rows in load(log_dir).items():
        for x in rows:
            if x["what"] in PARTS:
                out[x["schedule"]][rank][x["what"]].append((x["end_ns"] - x["start_ns"]) / 1e6)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_round_args(ap)
    args = ap.parse_args(argv)
    from daydream.corelink import probed
    from daydream.cpuidle import polling_idle
    from daydream.validate import run_env

    preds, reals = [], []
    with tempfile.TemporaryDirectory() as tmp, polling_idle(), probed():
        for r in range(args.rounds):
            p, q = _round(r, args, Path(tmp), run_env())
            preds.append(p)
            reals.append(q)
            print(f"round {r + 1}/{args.rounds}: trace {p['trace_ms']:.2f} ms an iteration; busy per rank "
                  "(predicted/real ms): " + "; ".join(
                      f"{s} " + ", ".join(f"{p[s][rk]['busy']:.2f}/{statistics.median(q[s][rk]['busy']):.2f}"
                                          for rk in (0, 1)) for s in SCHEDULES), flush=True)
    for s in SCHEDULES:
        for rank in (0, 1):
            print(f"{s} rank {rank} (predicted/real ms per round): " + "; ".join(
                _cell(k, [p[s][rank].get(k, 0.0) for p in preds], [v for q in reals for v in q[s][rank][k]])
                for k in (*KINDS, "busy", "lead", "gaps", "tail")))
        print(f"{s}: " + "; ".join(
            [_cell("span", [p[s][0]["span"] for p in preds], [v for q in reals for v in q[s]["span"]])]
            + [_cell(f"{k} hand-over to an idle rank (us)", [v / 1e3 for p in preds for v in p[s]["handover"][k]],
                     [v / 1e3 for q in reals for v in q[s]["handover"][k]]) for k in ("forward", "backward")]))
    for rank in (0, 1):
        print(f"rank {rank} compute, the trace's shard / the runtime's task part (ms): " + "; ".join(
            _cell(f"{part} {s}", [p["shards"][rank][part] for p in preds],
                  [v for q in reals for v in q["parts"][s][rank][part]]) for part in PARTS for s in SCHEDULES))


def _cell(what, pred, real) -> str:
    if not pred or not real:
        return f"{what} -"
    pv, rv = statistics.median(pred), statistics.median(real)
    diff = f" ({100 * (pv - rv) / rv:+.0f} %)" if rv > 0.05 else ""      # not for idle times near 0
    return f"{what} {pv:.2f}/{rv:.2f}{diff}"


if __name__ == "__main__":
    from _bench import with_steady_malloc

    with_steady_malloc()
    main()
