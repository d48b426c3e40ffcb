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

from ..corelink import CoreLinkLog, only_open

__all__ = ["run_rounds", "drain", "started"]


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


def run_rounds(runners: dict, logs: dict | None = None, on_error=None, interleave: bool = True) -> dict:
    """``{name: rows}``: the runner generators ``runners`` (``{name: generator}``) run to their
    ends in turns, one round at a time, the one least far along next (``interleave=False``:
    each to its end, in the given order).

    ``logs``, where given (``{name: CoreLinkLog}``), collects each runner's core-to-core
    probes: only its own logs are open in its turns (:func:`daydream.corelink.only_open`).
    ``on_error(name, exc)``, where given, is called with an exception a runner raised; that
    runner stops without rows (``[]``) and the others go on; without it the exception
    propagates.
    """
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
            rows[name] = stop.value or []
            continue
        except Exception as exc:   # noqa: BLE001 - handed to the caller's on_error
            if on_error is None:
                raise
            on_error(name, exc)
            rows[name] = []
            continue
        heapq.heappush(heap, (float(done) if interleave else 0.0, i, name))
    return {name: rows[name] for name in runners}
