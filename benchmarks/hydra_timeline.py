"""Per-task timeline of the real Hydra runtime (``daydream.workloads.hydra --task-log``).

Runs the workload with ``--task-log`` as ``daydream validate`` runs it (its malloc settings, idle
CPUs polling), or reads the logs of an earlier run with ``--logs DIR``)
and prints, per schedule and process:

* the median round span and busy time;
* per task kind (forward, backward, step): the median duration when the other process was idle
  for all of it (``alone``) and when it was busy for most of it (``beside``, > 70 %); their ratio
  is the real co-run rate that ``hydra``'s ``corun`` stands for;
* shard-parallel: how long after the sending task ended the scheduler learnt of each arrival
  (the median and the largest), and whether the receiving process was busy meanwhile;
* per schedule, hand-overs to an idle receiver: the sending task's end to the receiving task's
  start (what ``hydra``'s transfer time stands for, less the send's post);
* per schedule and process, the median of each part of a task (``forward.prepare``: the input
  and ``zero_grad``; ``forward.compute``; ``backward.compute``) and what a task takes beyond its
  parts (its send's post);
* the last shard-parallel round's tasks as ``(model, F/B/S, start ms, end ms)`` from its start.

Usage (the validation's sizes)::

    python benchmarks/hydra_timeline.py --models 2 --devices 2 --shard0-layers 4 --rounds 8 \\
        --pin-cores --hidden 512 --batch-size 64 --threads 1 --dataset-batches 64
    python benchmarks/hydra_timeline.py --logs DIR     # logs written before
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["main", "load", "report", "handover_gaps"]

_TASKS = ("forward", "backward", "step")
#: A task counts as run beside the other process when that one was busy for more than this share of it.
BESIDE = 0.7


def load(log_dir) -> dict:
    """``{rank: [row dict, ...]}`` from ``log_dir/hydra-rank*.json``, measured rounds only."""
    out = {}
    for path in sorted(Path(log_dir).glob("hydra-rank*.json")):
        log = json.loads(path.read_text())
        rank = int(path.stem.removeprefix("hydra-rank"))
        out[rank] = [r for r in (dict(zip(log["columns"], row)) for row in log["rows"]) if r["round"] >= 0]
    if not out:
        raise SystemExit(f"hydra_timeline: no hydra-rank*.json in {log_dir}")
    return out


def _busy_share(task, others) -> float:
    span = task["end_ns"] - task["start_ns"]
    hit = sum(max(0, min(task["end_ns"], o["end_ns"]) - max(task["start_ns"], o["start_ns"])) for o in others)
    return hit / span if span else 0.0


def _median(xs) -> str:
    return f"{statistics.median(xs) / 1e6:.2f}" if xs else "-"


def report(logs: dict) -> None:
    """Print the figures of the module docstring."""
    for sched in ("model-parallel", "shard-parallel"):
        tasks = {r: [x for x in rows if x["schedule"] == sched and x["what"] in _TASKS] for r, rows in logs.items()}
        for rank, rows in logs.items():
            spans = [x["end_ns"] - x["start_ns"] for x in rows if x["schedule"] == sched and x["what"] == "round"]
            by_round = {}
            for t in tasks[rank]:
                by_round[t["round"]] = by_round.get(t["round"], 0) + t["end_ns"] - t["start_ns"]
            others = [t for r, ts in tasks.items() if r != rank for t in ts]
            kinds = []
            for kind in _TASKS:
                mine = [t for t in tasks[rank] if t["what"] == kind]
                share = [_busy_share(t, others) for t in mine]
                alone = [t["end_ns"] - t["start_ns"] for t, s in zip(mine, share) if s == 0]
                beside = [t["end_ns"] - t["start_ns"] for t, s in zip(mine, share) if s > BESIDE]
                kinds.append(f"{kind} {_median(alone)} alone ({len(alone)}) / {_median(beside)} beside ({len(beside)})")
            print(f"rank {rank} {sched}: span {_median(spans)} ms, busy {_median(list(by_round.values()))} ms; "
                  + "; ".join(kinds))
    _parts(logs)
    _arrivals(logs)
    _handovers(logs)


_PARTS = {"forward": ("forward.prepare", "forward.compute"), "backward": ("backward.compute",)}


def _parts(logs: dict) -> None:
    """Per schedule and process: the median time of each part of a task, and of the rest of the
    task beyond its parts (the send's post)."""
    for sched in ("model-parallel", "shard-parallel"):
        for rank, rows in logs.items():
            mine = {(x["round"], x["model"], x["what"]): x["end_ns"] - x["start_ns"] for x in rows
                    if x["schedule"] == sched}
            out = []
            for task, parts in _PARTS.items():
                keys = [k for k in mine if k[2] == task and all((*k[:2], p) in mine for p in parts)]
                for p in parts:
                    out.append(f"{p} {_median([mine[(*k[:2], p)] for k in keys])}")
                out.append(f"{task} beyond them {_median([mine[k] - sum(mine[(*k[:2], p)] for p in parts) for k in keys])}")
            print(f"rank {rank} {sched} parts (ms): " + "; ".join(out))


def handover_gaps(logs: dict, sched: str) -> dict:
    """``{"forward": [ns], "backward": [ns]}``: hand-overs to an idle receiver under ``sched``,
    from the end of the task that sent the data (its post included) to the start of the task
    that needed it, where the receiver's task before it had ended by then (2 devices)."""
    gaps = {"forward": [], "backward": []}
    rows = {r: [x for x in logs[r] if x["schedule"] == sched and x["what"] in _TASKS] for r in (0, 1)}
    for kind, src, dst in (("forward", 0, 1), ("backward", 1, 0)):
        sent = {(x["round"], x["model"]): x for x in rows[src] if x["what"] == kind}
        for x in (x for x in rows[dst] if x["what"] == kind):
            s = sent.get((x["round"], x["model"]))
            before = [y["end_ns"] for y in rows[dst] if y["round"] == x["round"] and y["end_ns"] <= x["start_ns"]]
            if s is not None and max(before, default=0) <= s["end_ns"]:
                gaps[kind].append(x["start_ns"] - s["end_ns"])
    return gaps


def _handovers(logs: dict) -> None:
    """Per schedule, :func:`handover_gaps`' medians."""
    if sorted(logs) != [0, 1]:
        return
    for sched in ("model-parallel", "shard-parallel"):
        gaps = handover_gaps(logs, sched)
        print(f"{sched} hand-overs to an idle receiver, sender's task end to receiver's task start: "
              + "; ".join(f"{kind} {statistics.median(g) / 1e3:.0f} us ({len(g)})" if g else f"{kind} - (0)"
                          for kind, g in gaps.items()))


def _arrivals(logs: dict) -> None:
    """Shard-parallel: from the end of the task that sent a receive's data to the scheduler's notice."""
    sp = {r: [x for x in rows if x["schedule"] == "shard-parallel"] for r, rows in logs.items()}
    for rank, rows in sp.items():
        lags, busy = [], 0
        for a in (x for x in rows if x["what"] in ("activation", "gradient")):
            src, kind = (rank - 1, "forward") if a["what"] == "activation" else (rank + 1, "backward")
            sent = [x for x in sp.get(src, []) if x["round"] == a["round"] and x["model"] == a["model"]
                    and x["what"] == kind]
            if not sent:
                continue
            lags.append(a["start_ns"] - sent[0]["end_ns"])
            busy += any(x["what"] in _TASKS and x["start_ns"] < sent[0]["end_ns"] < x["end_ns"] for x in rows
                        if x["round"] == a["round"])
        if lags:
            print(f"rank {rank} shard-parallel arrivals: {len(lags)}, noticed {_median(lags)} ms (median), "
                  f"{max(lags) / 1e6:.2f} ms (most) after the sender's task ended; {busy} landed while busy")
        last = max(x["round"] for x in rows)
        t0 = min(x["start_ns"] for x in rows if x["round"] == last and x["what"] == "round")
        print(f"rank {rank} last shard-parallel round: " + " ".join(
            f"({x['model']}, {x['what'][0].upper()}, {(x['start_ns'] - t0) / 1e6:.2f}, {(x['end_ns'] - t0) / 1e6:.2f})"
            for x in rows if x["round"] == last and x["what"] in _TASKS))


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--logs"] and len(argv) == 2:
        report(load(argv[1]))
        return
    from daydream.cpuidle import polling_idle
    from daydream.validate import run_env

    with tempfile.TemporaryDirectory() as tmp, polling_idle():     # as daydream validate runs it
        cmd = [sys.executable, "-m", "daydream.workloads.hydra", *argv, "--task-log", tmp]
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=run_env())
        print(proc.stdout.strip())
        if proc.returncode:
            raise SystemExit(proc.returncode)
        report(load(tmp))


if __name__ == "__main__":
    main()
