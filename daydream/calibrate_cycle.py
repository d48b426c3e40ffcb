"""Calibration: training steps of several model copies taking turns on one core.

A one-process trace of one model runs each step right after the model's last
one: its weights and optimizer state are where that step left them in the
caches.  A device that trains K models in turn (Hydra's shards) runs each
model's step after the other models' steps, which passed K times as much
state through the same caches; once that no longer fits, every step streams
its state from memory again.  On the development VM (32 MiB L3 shared by the
two cores, 1 MiB L2 each) a shard of two ``Linear(512)`` layers with momentum
SGD ran its forward / backward / step 0-8 % slower with 2 copies in turn and
11-20 / 5-13 / 20-50 % with 4 (session 32; no change for 128- or 1024-wide
layers, whose state fits the caches, or does not, either way).

:func:`cycle_points` measures that curve: the time of a training step of one
copy when N copies of a small shard take turns, over one copy's, by the
persistent state (parameters and momentum) that the N copies cycle through.
Needs torch.
"""
from __future__ import annotations

import random
import statistics
import time

__all__ = ["cycle_points", "CYCLE_COPIES", "CYCLE_ROUNDS", "CYCLE_WIDTH", "CYCLE_SPAN_S"]

#: Copies cycled through, per point of the curve.
CYCLE_COPIES = (1, 2, 4, 8)
#: Rounds (each times every number of copies once, in random order); each point is the median.
#: With 9 rounds twelve probes in a row read x0.97-1.19 for 2 copies (session 40, 05:13); a Hydra
#: prediction takes the point as its factor, so the probe takes three times as many (about 6 s).
CYCLE_ROUNDS = 27
#: Width of the probe shard's two linear layers (batch 64): 4 MiB of parameters and momentum.
CYCLE_WIDTH = 512
#: Least time (s) a number of copies is timed for in one round.
CYCLE_SPAN_S = 0.04


def cycle_points(torch, rounds: int = CYCLE_ROUNDS) -> tuple:
    """``((state bytes, factor), ...)``: the mean time of a training step (forward, backward,
    momentum-SGD step) of one of N copies of a small shard run in turn, over the same with one
    copy, for each N of :data:`CYCLE_COPIES`; ``state bytes`` is what the N copies keep between
    steps (parameters and momentum: N x 4 MiB).  Median over ``rounds``; below 1 counts as 1.
    About 6 s (``tests/test_hydra.py`` runs one round).
    """
    from torch import nn

    h = CYCLE_WIDTH
    copies = []
    for _ in range(max(CYCLE_COPIES)):
        shard = nn.Sequential(nn.Linear(h, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU())
        copies.append((shard, torch.optim.SGD(shard.parameters(), lr=1e-3, momentum=0.9)))
    x, grad = torch.randn(64, h), torch.randn(64, h)

    def step(shard, opt):
        opt.zero_grad(set_to_none=True)
        shard(x).backward(grad)
        opt.step()

    def per_step_ns(n):
        steps, t0 = 0, time.perf_counter_ns()
        while True:
            for c in copies[:n]:
                step(*c)
            steps += n
            if time.perf_counter_ns() - t0 >= CYCLE_SPAN_S * 1e9:
                return (time.perf_counter_ns() - t0) / steps

    for _ in range(2):                   # every copy's momentum allocated, its pages touched
        for c in copies:
            step(*c)
    got = {n: [] for n in CYCLE_COPIES}
    for _ in range(rounds):
        for n in random.sample(CYCLE_COPIES, len(CYCLE_COPIES)):
            for c in copies[:n]:         # one untimed pass: the cycle's steady state
                step(*c)
            got[n].append(per_step_ns(n))
    state = 2 * sum(p.numel() * p.element_size() for p in copies[0][0].parameters())
    base = statistics.median(got[CYCLE_COPIES[0]])
    return tuple((float(n * state), max(statistics.median(got[n]) / base, 1.0)) for n in CYCLE_COPIES)
