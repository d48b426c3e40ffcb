"""The validation runners' rounds in turns: a round of each in order, over the whole run.

A runner (:data:`daydream.validate.RUNNERS`) is a generator function: its
generator does its set-up and its rounds, yields between two rounds the
fraction of its rounds done, and returns its rows.  At each yield it is told,
through the value sent back when it resumes, whether other runners' rounds
ran meanwhile: a baseline trace taken before the pause then no longer shows
the machine as it is, and the runner takes a fresh one before its next runs.

:func:`run_rounds` resumes the runner least far along (ties in the given
order), so that each one's rounds spread over the whole validation instead of
sitting together in a few minutes of it.  On this project's VM the host's
slow spells last minutes: over the 40 full validations 2026-12-05s to 12-06zd
a row's error correlated from run to run with its runner's other rows' by
+0.59 (Tessel), +0.65 to +0.70 (Hydra) and +0.23 to +0.43 (HFTA), with other
runners' rows' by -0.08 to +0.12 (``python benchmarks/runner_spells.py
FILE...``), so that a spell fell on all five rounds of a row, and the median
over the rounds, meant to pass over it, could not (docs/validation-log.md,
"Session 84").  Rounds in different states of the machine are compared round
by round (:func:`daydream.validate.median_round`).  :func:`drain` runs one
runner alone, its rounds back to back.

Examples
--------
>>> def runner(name, rounds, log):
...     for k in range(rounds):
...         log.append(f"{name}{k}")
...         if k < rounds - 1:
...             log.append((yield (k + 1) / rounds))
...     return [name]
>>> log = []
>>> run_rounds({"a": runner("a", 2, log), "b": runner("b", 3, log)})
{'a': ['a'], 'b': ['b']}
>>> log
['a0', 'b0', False, 'b1', True, 'a1', True, 'b2']
>>> log = []
>>> drain(runner("a", 2, log)), log
(['a'], ['a0', False, 'a1'])
"""
from __future__ import annotations

import heapq
import inspect
import time

from ..corelink import CoreLinkLog, only_open

__all__ = ["run_rounds", "drain", "started", "RoundsClock"]


def drain(runner):
    """Run the runner generator ``runner`` alone to its end; its rows."""
    return run_rounds({"": runner})[""]


def started(fn, *args):
    """A runner generator that calls ``fn(*args)`` when first advanced: the generator it returns
    is run on (``yield from``), and rows it returns at once are a runner without rounds.

    >>> drain(started(lambda k: [k] * 2, "row"))
    ['row', 'row']
    """
    got = fn(*args)
    if inspect.isgenerator(got):
        return (yield from got)
    return got


class RoundsClock:
    """How far a set of runners has come, and about how long the rest will take.

    A runner's share of the work is its last yielded fraction (1 when it has ended);
    the whole is their mean, and the time left is the time so far scaled by the
    work left (the runners' rounds take about equally long each).

    >>> t = iter([0.0, 600.0])
    >>> clock = RoundsClock(["a", "b"], clock=lambda: next(t))
    >>> clock.note("a", 1.0); clock.note("b", 0.5)
    >>> clock.line()
    'validate: 75 % of the rounds done in 10 min, about 3 min left'
    """

    def __init__(self, names, clock=None):
        self.done = dict.fromkeys(names, 0.0)
        self.clock = clock or time.monotonic
        self.t0_s = self.clock()

    def note(self, name: str, fraction: float) -> None:
        """Runner ``name`` is ``fraction`` of the way through its rounds."""
        self.done[name] = min(1.0, max(0.0, float(fraction)))

    def line(self) -> str:
        """One progress line: the share done, the minutes so far and about how many are left."""
        share = sum(self.done.values()) / max(1, len(self.done))
        spent_min = (self.clock() - self.t0_s) / 60.0
        left = f", about {spent_min * (1 - share) / share:.0f} min left" if 0 < share < 1 else ""
        return f"validate: {100 * share:.0f} % of the rounds done in {spent_min:.0f} min{left}"


def run_rounds(runners: dict, logs: dict | None = None, on_error=None, interleave: bool = True,
               progress=None) -> dict:
    """``{name: rows}``: the runner generators ``runners`` (``{name: generator}``) run to their
    ends in turns, one round at a time, the one least far along next (``interleave=False``:
    each to its end, in the given order).

    ``logs``, where given (``{name: CoreLinkLog}``), collects each runner's core-to-core
    probes: only its own logs are open in its turns (:func:`daydream.corelink.only_open`).
    ``on_error(name, exc)``, where given, is called with an exception a runner raised; that
    runner stops without rows (``[]``) and the others go on; without it the exception
    propagates.  ``progress``, where given, hears after each turn how far the runners have
    come (:class:`RoundsClock`).
    """
    clock = RoundsClock(runners)
    heap = [(0.0, i, name) for i, name in enumerate(runners)]
    opened = {name: [(logs or {}).get(name) or CoreLinkLog()] for name in runners}
    rows, started, last = {}, set(), None
    while heap:
        _, i, name = heapq.heappop(heap)
        sent = None if name not in started else last != name
        started.add(name)
        last = name
        try:
            with only_open(opened[name]):
                done = runners[name].send(sent)
        except StopIteration as stop:
            rows[name], done = stop.value or [], None
        except Exception as exc:   # noqa: BLE001 - handed to the caller's on_error
            if on_error is None:
                raise
            on_error(name, exc)
            rows[name], done = [], None
        clock.note(name, 1.0 if done is None else done)
        if progress is not None:
            progress(clock.line())
        if done is not None:
            heapq.heappush(heap, (float(done) if interleave else 0.0, i, name))
    return {name: rows[name] for name in runners}
