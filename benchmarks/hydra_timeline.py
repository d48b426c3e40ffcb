"""Per-task timeline of the real Hydra runtime (``daydream.workloads.hydra``), per process.

Wraps the runtime's forward, backward and optimizer-step tasks with timers and prints, per
schedule and process, the median round span and busy time, and the last shard-parallel round's
tasks as ``(model, F/B/S, start ms, end ms)`` from the round's start: hand-overs (a process
starting a task after its input's sender finished it) and idle stretches can be read off it.

Usage (the validation's sizes)::

    python benchmarks/hydra_timeline.py --models 4 --devices 2 --rounds 8 --pin-cores \\
        --hidden 512 --batch-size 64 --threads 1 --dataset-batches 64
"""
from __future__ import annotations

import statistics
import sys
import time

import daydream.workloads.hydra as H

__all__ = ["main"]

_LOG: list = []
_T0 = [0]
_ROUNDS: dict = {}


def _timed(name: str, label: str) -> None:
    task = getattr(H._Shard, name)

    def run(self, k):
        a = time.perf_counter_ns()
        task(self, k)
        _LOG.append((k, label, (a - _T0[0]) / 1e6, (time.perf_counter_ns() - _T0[0]) / 1e6))

    setattr(H._Shard, name, run)


def _patch() -> None:
    for name, label in (("forward", "F"), ("backward", "B"), ("step", "S")):
        _timed(name, label)
    run_round, worker = H._Shard.run_round, H._worker

    def timed_round(self, schedule):
        _LOG.clear()
        _T0[0] = time.perf_counter_ns()
        t0, t1 = run_round(self, schedule)
        off = (t0 - _T0[0]) / 1e6
        tasks = [(k, s, round(a - off, 2), round(b - off, 2)) for k, s, a, b in _LOG]
        _ROUNDS.setdefault(schedule, []).append(((t1 - t0) / 1e6, tasks))
        return t0, t1

    def report(rank, args, port, world):
        worker(rank, args, port, world)
        for schedule, rounds in _ROUNDS.items():
            rounds = rounds[args.warmup:]
            busy = statistics.median(sum(b - a for _, _, a, b in tasks) for _, tasks in rounds)
            print(f"rank {rank} {schedule}: span {statistics.median(s for s, _ in rounds):.2f} ms, "
                  f"busy {busy:.2f} ms", flush=True)
            if schedule == "shard-parallel":
                print(f"rank {rank} last shard-parallel round: {rounds[-1][1]}", flush=True)

    H._Shard.run_round, H._worker = timed_round, report


def main(argv=None) -> None:
    _patch()
    H.main(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
