"""Training steps of N model copies taken in turn on one core, per phase, against one copy.

What the profile's ``cycle`` figures stand for (:mod:`daydream.calibrate_cycle`), phase by phase
and for other layer widths: a shard of two ``Linear(W)`` + ReLU and a 10-way head, batch 64,
momentum SGD, one intra-op thread, pinned to one core, idle CPUs polling (as ``daydream
validate`` measures); for each number of copies, every copy's forward (with the loss), backward
and step in turn, the configurations taking turns in blocks of rounds, ``--steps`` timed rounds
each; the median of each phase.

Usage::

    python benchmarks/copies_in_turn.py --width 512 --copies 1,2,4 --repeat 2
    python benchmarks/copies_in_turn.py --width 128,1024 --copies 1,2,4
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

__all__ = ["main", "phase_medians"]


def _copies(torch, width: int, n: int) -> list:
    from torch import nn

    out = []
    for _ in range(n):
        m = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10))
        out.append((m, torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)))
    return out


def phase_medians(torch, width: int, counts, steps: int, block: int = 20) -> dict:
    """``{n: {"F": us, "B": us, "S": us}}``: per number of copies ``n``, the median forward (with
    the loss), backward and step of ``n`` copies stepped in turn.  The configurations take turns
    in blocks of ``block`` rounds (the machine's drift falls on all of them; the first 2 rounds of
    a block are not timed, the copies' state then being where the other configuration left the
    caches), until each has ``steps`` timed rounds.  Not round by round: every configuration's
    steps would then follow all the others' copies, and all read alike (session 32)."""
    import torch.nn.functional as F

    sets = {n: _copies(torch, width, n) for n in counts}
    y = torch.randint(0, 10, (64,))
    times = {n: {"F": [], "B": [], "S": []} for n in counts}
    done = 0
    while done < steps:
        for n, copies in sets.items():
            for r in range(block + 2):
                for m, opt in copies:
                    x = torch.randn(64, width).requires_grad_()
                    t0 = time.perf_counter_ns()
                    opt.zero_grad(set_to_none=True)
                    loss = F.cross_entropy(m(x), y)
                    t1 = time.perf_counter_ns()
                    loss.backward()
                    t2 = time.perf_counter_ns()
                    opt.step()
                    t3 = time.perf_counter_ns()
                    if r >= 2:
                        for k, v in zip("FBS", (t1 - t0, t2 - t1, t3 - t2)):
                            times[n][k].append(v)
        done += block
    return {n: {k: statistics.median(v) / 1e3 for k, v in t.items()} for n, t in times.items()}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--width", default="512", help="layer widths, comma separated")
    p.add_argument("--copies", default="1,2,4", help="numbers of copies, comma separated")
    p.add_argument("--steps", type=int, default=200, help="measured rounds per configuration")
    p.add_argument("--repeat", type=int, default=1, help="passes over all configurations")
    p.add_argument("--core", type=int, default=1)
    args = p.parse_args(argv)

    import torch

    from daydream.cpuidle import polling_idle

    torch.set_num_threads(1)
    if args.core in os.sched_getaffinity(0):
        os.sched_setaffinity(0, {args.core})
    counts = [int(x) for x in args.copies.split(",")]
    with polling_idle():
        for _ in range(args.repeat):
            for width in (int(x) for x in args.width.split(",")):
                got = phase_medians(torch, width, counts, args.steps)
                base = got[counts[0]]
                print(f"width {width}: " + "  ".join(
                    f"{n} cop{'y' if n == 1 else 'ies'} " + " ".join(
                        f"{k} {v:.0f} us ({v / base[k] - 1:+.0%})" for k, v in got[n].items()) for n in counts),
                      flush=True)


if __name__ == "__main__":
    main()
