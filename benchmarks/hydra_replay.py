"""Hydra's span error taken apart: the schedule model replayed on the real runtime's own task times.

Per round (``hydra_terms.traced_and_run``): the validation MLP traced as ``daydream validate``
traces it, both schedules predicted from it at once, and the real K-model job run with
``--task-log`` (``daydream.workloads.hydra``, the validation's sizes and pinning).  Each real round is then
*replayed*: ``hydra``'s schedule graph (:func:`optimizations.hydra.schedule_graph`, the profile's
transfer to a receive posted ahead, and shard-parallel's arrival notice) with every task at its
real duration (a task's send post inside it, as the runtime logs it), simulated.  Printed per
schedule, medians over the rounds:

* ``replay / real``: the schedule model's own error (task order, hand-overs, waits) given the right
  task times;
* ``prediction / real``: the what-if's error;
* per class of tasks (``rank R forward|backward|step``): its predicted durations over its real ones,
  summed over the round (``durations``); the replay with that class alone at its predicted
  durations (``alone``); and with every class but it at theirs (``all but``): a class whose
  ``all but`` lies far closer to 0 than ``all predicted`` carries the error.

``--logs DIR`` replays the task logs of an earlier run (``replay / real`` only).

Usage (a validation's profile; its Hydra split)::

    python benchmarks/hydra_replay.py --profile DIR/device-cpu-1t.json --models 4 --rounds 4
    python benchmarks/hydra_replay.py --profile DIR/device-cpu-1t.json --models 4 --logs LOGDIR
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

__all__ = ["main", "task_name", "real_rounds", "replay_ms", "predicted_durations", "CLASSES"]

#: The runtime's task kinds and the words ``schedule_graph`` names them with.
_KINDS = {"forward": "forward shard", "backward": "backward shard", "step": "optimizer shard"}
#: Classes of tasks of a 2-device job: (rank, kind).
CLASSES = tuple((r, k) for r in (0, 1) for k in _KINDS)
_SHARD_PARALLEL = "shard-parallel"


def task_name(kind: str, model: int, rank: int) -> str:
    """The name :func:`optimizations.hydra.schedule_graph` gives a runtime task.

    >>> task_name("step", 2, 1)
    'model 2 optimizer shard 1'
    """
    return f"model {model} {_KINDS[kind]} {rank}"


def real_rounds(logs: dict) -> dict:
    """``{(schedule, round): ({task name: ns}, span ms)}`` from :func:`hydra_timeline.load`'s rows:
    each task's duration and the round's span (the earliest rank's start to the last one's end).

    >>> rows = lambda r, t: [{"schedule": "s", "round": 0, "what": "round", "model": -1, "start_ns": 0,
    ...                       "end_ns": t}, {"schedule": "s", "round": 0, "what": "forward", "model": 0,
    ...                       "start_ns": 10, "end_ns": 30 + r}]
    >>> real_rounds({0: rows(0, 1_000_000), 1: rows(1, 3_000_000)})
    {('s', 0): ({'model 0 forward shard 0': 20, 'model 0 forward shard 1': 21}, 3.0)}
    """
    durs, spans = defaultdict(dict), defaultdict(list)
    for rank, rows in logs.items():
        for r in rows:
            key = (r["schedule"], r["round"])
            if r["what"] in _KINDS:
                durs[key][task_name(r["what"], r["model"], rank)] = r["end_ns"] - r["start_ns"]
            elif r["what"] == "round":
                spans[key].append((r["start_ns"], r["end_ns"]))
    return {k: (durs[k], (max(b for _, b in v) - min(a for a, _ in v)) / 1e6)
            for k, v in sorted(spans.items()) if k in durs}


def replay_ms(durations: dict, models: int, schedule: str, device, send_bytes: int) -> float:
    """The simulated span (ms) of ``schedule_graph`` for 2 devices with each named task at
    ``durations[name]`` (ns; its send post included, so none apart) and each transfer at the
    profile's time to a receive posted ahead, plus its arrival notice under shard-parallel."""
    from daydream.sim import simulate
    from daydream.optimizations.hydra import ShardCosts, schedule_graph

    notice = device.p2p_notify_ns() if schedule == _SHARD_PARALLEL else 0.0
    g = schedule_graph(ShardCosts((0, 0), (0, 0), (0, 0), (send_bytes,), (1, 1)), models,
                       lambda n: device.p2p_preposted_ns(n) + notice, schedule)
    names = g.names.strings
    for t, i in enumerate(g.tasks["name"].tolist()):
        if i >= 0 and names[i] in durations:
            g.tasks["dur_ns"][t] = durations[names[i]]
    return simulate(g).makespan_ns / 1e6


def predicted_durations(res) -> dict:
    """``{task name: ns}`` of a predicted Hydra timeline's shard tasks (as simulated: co-run stretch
    included), each send's post folded into the task that sends, as the runtime logs it."""
    g, out = res.graph, {}
    names = g.names.strings
    for t, i in enumerate(g.tasks["name"].tolist()):
        shard_task = i >= 0 and names[i].startswith(("model ", "post model "))
        if shard_task and g.lanes[int(g.tasks["lane"][t])].kind.name != "COMM":
            out[names[i]] = out.get(names[i], 0) + int(res.end_ns[t] - res.start_ns[t])
    for name in [n for n in out if n.startswith("post model ")]:
        _, _, k, what, hop = name.split()
        src = int(hop.split("->")[0])
        out[task_name("forward" if what == "activation" else "backward", int(k), src)] += out.pop(name)
    return out


def _class_of(name: str):
    return next(((r, k) for r, k in CLASSES if name.endswith(f"{_KINDS[k]} {r}")), None)


def _compare(durs, pred, span_ms, predicted_ms, replay) -> dict:
    """Per-round figures (ratios less 1) of one real round against its prediction."""
    base = replay(durs)
    out = {"replay / real": base / span_ms - 1}
    if pred is None:
        return out
    out["prediction / real"] = predicted_ms / span_ms - 1
    out["all predicted"] = replay({**durs, **pred}) / base - 1
    for c in CLASSES:
        names = [n for n in durs if _class_of(n) == c]
        if not names:
            continue
        mine = {n: d for n, d in pred.items() if _class_of(n) == c}
        rank, kind = c
        out[f"rank {rank} {kind}: durations"] = sum(mine.get(n, 0) for n in names) / sum(durs[n] for n in names) - 1
        out[f"rank {rank} {kind}: alone"] = replay({**durs, **mine}) / base - 1
        others = {n: d for n, d in pred.items() if n not in mine}
        out[f"rank {rank} {kind}: all but"] = replay({**durs, **others}) / base - 1
    return out


def main(argv=None) -> None:
    from hydra_terms import add_round_args, traced_and_run
    from hydra_timeline import load

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_round_args(ap)
    ap.add_argument("--logs", metavar="DIR", help="replay the task logs in DIR instead (no prediction)")
    ap.add_argument("--send-bytes", type=int, default=64 * 512 * 4,
                    help="bytes of an activation or gradient (default: the validation MLP's, batch 64 x 512)")
    args = ap.parse_args(argv)
    from daydream.device import DeviceProfile

    try:
        device = DeviceProfile.from_json(json.loads(Path(args.profile).read_text()))
    except (OSError, ValueError, KeyError) as e:
        raise SystemExit(f"hydra_replay: {args.profile}: not a device profile ({e})") from None
    got = defaultdict(lambda: defaultdict(list))

    def add(logs, pred):
        for (sched, _), (durs, span) in real_rounds(logs).items():
            p, p_ms = pred[sched] if pred else (None, None)
            for k, v in _compare(durs, p, span, p_ms,
                                 lambda d, s=sched: replay_ms(d, args.models, s, device, args.send_bytes)).items():
                got[sched][k].append(v)

    if args.logs:
        add(load(args.logs), None)
    else:
        from daydream.corelink import probed
        from daydream.cpuidle import polling_idle
        from daydream.validate import run_env

        with tempfile.TemporaryDirectory() as tmp, polling_idle(), probed():
            for r in range(args.rounds):
                _, preds, log = traced_and_run(r, args, Path(tmp), run_env())
                add(load(log), {s: (predicted_durations(res), res.makespan_ns / 1e6) for s, (_, res) in preds.items()})
                print(f"round {r + 1}/{args.rounds} done", flush=True)
    for sched, figures in got.items():
        print(f"{sched} ({len(figures['replay / real'])} rounds), medians:")
        for k, v in figures.items():
            print(f"  {k:34s} {100 * statistics.median(v):+6.1f} %")


if __name__ == "__main__":
    from _bench import with_steady_malloc

    with_steady_malloc()
    main()
