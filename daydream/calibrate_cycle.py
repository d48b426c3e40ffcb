"""Calibration: work that finds its state gone cold (model copies in turn, work after a gap).

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
:func:`resume_points` measures the other way state goes cold: the same
shard's backward and step after its thread slept (``DeviceProfile.resume``).
Both take the medians of their raw times pooled over sittings
(:func:`cycle_curve`, :func:`resume_curve`), which ``daydream calibrate``
spreads over its run.  Needs torch.
"""
from __future__ import annotations

import random
import statistics
import time

__all__ = ["cycle_points", "cycle_times", "cycle_curve", "resume_points", "resume_times", "resume_curve",
           "CYCLE_COPIES", "CYCLE_ROUNDS", "CYCLE_WIDTH", "CYCLE_SPAN_S", "RESUME_GAPS_MS", "RESUME_TRIES"]

#: Copies cycled through, per point of the curve.
CYCLE_COPIES = (1, 2, 4, 8)
#: Rounds (each times every number of copies once, in random order); each point is the median.
#: With 9 rounds twelve probes in a row read x0.97-1.19 for 2 copies (session 40, 05:13); a Hydra
#: prediction takes the point as its factor, so the probe takes three times as many (about 6 s).
#: ``daydream calibrate`` takes them in sittings spread over the calibration (``CALIBRATION_SITTINGS``).
CYCLE_ROUNDS = 27
#: Width of the probe shard's two linear layers (batch 64): 4 MiB of parameters and momentum.
CYCLE_WIDTH = 512
#: Least time (s) a number of copies is timed for in one round.
CYCLE_SPAN_S = 0.04


def cycle_points(torch, rounds: int = CYCLE_ROUNDS) -> tuple:
    """``((state bytes, factor), ...)``: :func:`cycle_curve` of one sitting of ``rounds``
    (:func:`cycle_times`).  About 6 s (``tests/test_hydra.py`` runs one round)."""
    return cycle_curve(cycle_times(torch, rounds))


def cycle_curve(*sittings) -> tuple:
    """``((state bytes, factor), ...)``: per N of :data:`CYCLE_COPIES`, the median over the rounds
    of all ``sittings`` (:func:`cycle_times`) of the time of a step with N copies in turn, over
    the same with one copy; ``state bytes`` is what the N copies keep between steps (parameters
    and momentum: N x 4 MiB).  Below 1 counts as 1.

    Sittings spread over a calibration put a spell of the host in a third of the rounds at most:
    one 27-round sitting read x1.19 for 2 copies where eighteen others within the hour read
    x1.05-1.14 (session 42), and a Hydra prediction takes the point as its factor.

    >>> cycle_curve({1: [100.0, 100.0], 2: [110.0, 112.0], 4: [120.0, 118.0], 8: [125.0, 125.0]},
    ...             {1: [90.0], 2: [120.0], 4: [100.0], 8: [130.0]})[:2]
    ((4202496.0, 1.0), (8404992.0, 1.12))
    """
    got = {n: [t for s in sittings for t in s.get(n, ())] for n in CYCLE_COPIES}
    if not got[CYCLE_COPIES[0]]:
        return ()
    base = statistics.median(got[CYCLE_COPIES[0]])
    return tuple((float(n * _STATE_BYTES), max(statistics.median(got[n]) / base, 1.0)) for n in CYCLE_COPIES)


#: Parameters and momentum of one probe shard (two ``Linear(CYCLE_WIDTH)`` layers, fp32).
_STATE_BYTES = 2 * 2 * (CYCLE_WIDTH * CYCLE_WIDTH + CYCLE_WIDTH) * 4


def cycle_times(torch, rounds: int = CYCLE_ROUNDS) -> dict:
    """``{N: [ns, ...]}``: per N of :data:`CYCLE_COPIES`, per round, the mean time of a training
    step (forward, backward, momentum-SGD step) of one of N copies of a small shard run in
    turn; each round times every N once, in random order."""
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
    return got


#: Gaps (ms) after which :func:`resume_points` times resumed work, and its tries per gap.
RESUME_GAPS_MS, RESUME_TRIES = (0.5, 1.0, 2.0, 4.0, 8.0), 40


def resume_points(torch, tries: int = RESUME_TRIES) -> tuple:
    """``((gap ns, factor), ...)``: :func:`resume_curve` of one sitting of ``tries``."""
    return resume_curve(resume_times(torch, tries))


def resume_curve(*sittings) -> tuple:
    """``((gap ns, factor), ...)``: per gap of :data:`RESUME_GAPS_MS`, the median over the tries
    of all ``sittings`` (:func:`resume_times`) of the resumed work's time, over the same with no
    gap.  Below 1 (noise) counts as 1: no slow-down.

    >>> resume_curve({0.0: [100, 100], 0.5: [101, 103], 1.0: [100, 104], 2.0: [110, 110],
    ...                4.0: [120, 120], 8.0: [130, 130]}, {0.0: [90], 0.5: [99], 1.0: [104],
    ...                2.0: [95], 4.0: [140], 8.0: [99]})[:2]
    ((500000.0, 1.01), (1000000.0, 1.04))
    """
    gaps = (0.0,) + RESUME_GAPS_MS
    got = {g: [t for s in sittings for t in s.get(g, ())] for g in gaps}
    if not got[0.0]:
        return ()
    base = statistics.median(got[0.0])
    return tuple((g * 1e6, max(statistics.median(got[g]) / base, 1.0)) for g in RESUME_GAPS_MS)


def resume_times(torch, tries: int = RESUME_TRIES) -> dict:
    """``{gap ms: [ns, ...]}``: a small training shard's backward and momentum-SGD step (two
    Linear(512)+ReLU blocks, batch 64) after its thread slept ``gap`` following the forward
    (``0.0``: no gap and the gaps of :data:`RESUME_GAPS_MS`), ``tries`` times each, the gaps
    shuffled per try.  ``benchmarks/post_gap.py`` is the longer measurement."""
    import random

    from torch import nn

    h = 512
    shard = nn.Sequential(nn.Linear(h, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU())
    opt = torch.optim.SGD(shard.parameters(), lr=1e-3, momentum=0.9)
    x, grad = torch.randn(64, h), torch.randn(64, h)

    def one(gap_ms):
        out = shard(x)
        if gap_ms:
            time.sleep(gap_ms / 1e3)
        t0 = time.perf_counter_ns()
        out.backward(grad)
        opt.step()
        opt.zero_grad()
        return time.perf_counter_ns() - t0

    for _ in range(20):
        one(0)
    gaps = (0.0,) + RESUME_GAPS_MS
    got = {g: [] for g in gaps}
    for _ in range(tries):
        for g in random.sample(gaps, len(gaps)):
            got[g].append(one(g))
    return got
