"""How many rounds a validation case takes: those asked for, and more while its runs disagree.

``daydream validate --repeat N`` runs every case N rounds (a round: the
baseline traced and the real variant run in turn) and compares medians or
means over them.  On a shared machine the spread of one real run to the next
is not steady: on this project's 2-vCPU VM a 2-process run of the pipeline
validation's Tessel V schedule took 76-87 ms in 25 runs in a row, then
78-135 ms for the next ten minutes, 1-process traces taken between them
slowing by up to 70 % as well (docs/validation-log.md, "Session 48"); five
rounds taken in such a spell leave the median where two or three of them
fell.  Inside :func:`settling` (``validate --max-repeat M``), a loop of rounds
goes on past its N while the measured rounds of any of its runs still lie
more than :data:`SETTLE_PCT` apart (:func:`spread_pct`: the interquartile range), up to M.  The rule
looks at the measured rounds only, never at a prediction.

Examples
--------
>>> another_round(5, 5, [[80.0, 81.0, 95.0, 79.0, 115.0]])   # N rounds done, no settling asked
False
>>> with settling(9):
...     another_round(5, 5, [[80.0, 81.0, 95.0, 79.0, 115.0]]), another_round(5, 5, [[80.0, 81.0, 83.0, 79.0, 115.0]])
(True, False)
"""
from __future__ import annotations

import contextlib
import statistics
from contextvars import ContextVar

__all__ = ["another_round", "settling", "spread_pct", "round_label", "SETTLE_PCT"]

#: Measured rounds of a run that lie further apart than this (%, :func:`spread_pct`) ask for
#: another round.  In the runs of 2026-12-02 e-g (``--repeat 5``, 17 rows each) the rows spread
#: 2-9 % in run e; six rows spread more than 15 % in runs f and g, among them run g's two rows
#: off by more than 10 % (Tessel V 18 %, tensor-parallel 38 %).
SETTLE_PCT = 15.0

_MOST: ContextVar = ContextVar("daydream_rounds_most", default=None)


def spread_pct(values) -> float:
    """How far apart a run's measured rounds lie: their interquartile range over the lower
    quartile, in percent (``statistics.quantiles``, inclusive: with five rounds, from the second
    smallest to the second largest), so that a stray round or two does not count where the
    middle agrees.  0 with fewer than two.

    >>> spread_pct([100.0, 80.0, 81.0, 90.0, 79.0])
    12.5
    >>> round(spread_pct([79.0, 80.0, 80.0, 81.0, 82.0, 95.0, 115.0, 81.0, 80.0]), 2)   # two slow of nine
    2.5
    """
    if len(values) < 2:
        return 0.0
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return 100.0 * (q3 / q1 - 1.0) if q1 > 0 else 0.0


@contextlib.contextmanager
def settling(most: int):
    """Within it, :func:`another_round` adds rounds up to ``most`` (per round asked for: a loop
    that runs ``scale`` rounds for each, up to ``most x scale``) while a run is unsettled."""
    token = _MOST.set(int(most))
    try:
        yield
    finally:
        _MOST.reset(token)


def another_round(done: int, least: int, series=(), scale: int = 1) -> bool:
    """Whether a loop that has run ``done`` rounds runs another: yes below ``least``; past it,
    only inside :func:`settling`, below its limit and while any of ``series`` (one list of
    measured times per run, a value per round) spreads more than :data:`SETTLE_PCT`."""
    if done < max(least, 1):
        return True
    most = _MOST.get()
    return most is not None and done < most * scale and any(spread_pct(s) > SETTLE_PCT for s in series)


def round_label(done: int, least: int, series=()) -> str:
    """``'k/N'`` for the rounds asked for; past them, which round it is and why.

    >>> round_label(2, 5), round_label(5, 5, [[80.0, 95.0, 90.0, 100.0]])
    ('3/5', '6 (5 asked for; measured rounds 10 % apart)')
    """
    if done < max(least, 1):
        return f"{done + 1}/{max(least, 1)}"
    worst = max((spread_pct(s) for s in series), default=0.0)
    return f"{done + 1} ({least} asked for; measured rounds {worst:.0f} % apart)"
