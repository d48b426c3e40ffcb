"""How fast two CPUs hand data to each other: a probe of where the cores lie.

A multi-threaded or multi-process CPU job hands freshly written data from
one core to another all the time: a thread reads the rows another wrote, a
rank reads what its peer sent.  What one hand-over costs depends on where
the two cores are: on one chip, tens of nanoseconds; on two sockets, or on
virtual CPUs the host has placed far apart, several hundred.

On the 2-vCPU VM this project is developed on the host moves the two virtual
CPUs between a near and a far placement every few seconds: a cache-line
round trip took 50-95 ns or 315-350 ns (40 one-second samples: far in 29,
near in 11).  Memory-bound ops that read what the other core wrote run 2-4x
slower in the far placement (the transformer's ``gelu_backward`` at 2
threads: 0.20-0.24 ms a call near, 1.11-1.16 ms far, 8 of 8 runs), while
matrix products keep their speed: a 2-thread run's time depends on a state
of the machine that neither the trace nor the device profile records
(docs/validation-log.md, "Session 23").  ``daydream validate`` therefore probes
before and after every measured run and writes the range it saw with each
row, and ``daydream doctor`` shows the figure now.

The probe is the compiled ``daydream._corelink`` (two threads pinned one to
each CPU bounce a flag through one cache line); without it, or with fewer
than two CPUs, :func:`core_to_core_ns` raises :class:`CoreLinkUnavailable`.

Examples
--------
>>> log = CoreLinkLog()
>>> with log:
...     note_placement(probe=lambda: 330.0)
>>> log.values_ns
(330.0,)
>>> note_placement(probe=lambda: 55.0)   # no log open: nothing is probed
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

from .errors import DaydreamError

__all__ = ["CoreLinkUnavailable", "CoreLinkLog", "core_to_core_ns", "try_probe", "span_text", "note_placement",
           "only_open", "probed", "ROUND_TRIPS", "MAX_PROBE_S"]

#: Round trips a probe makes: ~1-7 ms on the VM, short against the host's moves
#: (seconds apart) and long against one trip.
ROUND_TRIPS = 20_000
#: A probe stops after this long even if it has not made :data:`ROUND_TRIPS`
#: (a CPU busy with other work answers in scheduler ticks, not nanoseconds).
MAX_PROBE_S = 0.25


class CoreLinkUnavailable(DaydreamError):
    """The core-to-core probe cannot run here; the message says why."""


def _default_pair() -> tuple:
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cpus) < 2:
        raise CoreLinkUnavailable(f"this process may run on {len(cpus)} CPU(s); the probe needs two")
    return cpus[0], cpus[1]


def core_to_core_ns(cpus: tuple | None = None, round_trips: int = ROUND_TRIPS,
                    max_seconds: float = MAX_PROBE_S) -> float:
    """Mean round-trip time (ns) of a cache line between two CPUs.

    Parameters
    ----------
    cpus : (int, int), optional
        The two CPUs; by default the first two this process may run on.
    round_trips : int
        How many times the flag goes there and back.
    max_seconds : float
        Stop early after this long; the mean is over the trips made.

    Raises
    ------
    CoreLinkUnavailable
        No compiled probe, fewer than two CPUs, or a CPU this process may not use.
    """
    try:
        from . import _corelink
    except ImportError as exc:
        raise CoreLinkUnavailable(f"daydream._corelink is not built ({exc})") from None
    a, b = cpus if cpus is not None else _default_pair()
    try:
        done, seconds = _corelink.round_trips(int(a), int(b), int(round_trips), float(max_seconds))
    except (ValueError, RuntimeError) as exc:
        raise CoreLinkUnavailable(f"CPUs {a} and {b}: {exc}") from None
    return seconds / done * 1e9


def try_probe(probe=None) -> tuple:
    """``(probe(),)`` (default :func:`core_to_core_ns`), or ``()`` where the probe cannot run
    (measuring goes on without it)."""
    try:
        return ((probe or core_to_core_ns)(),)
    except CoreLinkUnavailable:
        return ()


def span_text(values_ns) -> str:
    """Probes as a range for messages; ``''`` for none.

    >>> span_text((330.0, 55.2, 341.0)), span_text((92.4,)), span_text(())
    ('55-341 ns', '92 ns', '')
    """
    if not values_ns:
        return ""
    lo, hi = min(values_ns), max(values_ns)
    return f"{lo:.0f} ns" if round(lo) == round(hi) else f"{lo:.0f}-{hi:.0f} ns"


@dataclass(eq=False)
class CoreLinkLog:
    """Collects :func:`note_placement` probes while open (``with log: ...``).

    Logs nest: a probe is recorded in every open log.  Compared by identity:
    two logs that saw the same probes are still two logs.
    """

    values_ns: tuple = ()

    def __enter__(self):
        _OPEN.append(self)
        return self

    def __exit__(self, *exc):
        _OPEN.remove(self)
        return False


_OPEN: list = []


@contextlib.contextmanager
def only_open(logs: list):
    """Within: exactly ``logs`` are open, the others set aside; on leaving, ``logs`` holds the
    logs open then (a log opened within and not yet closed stays in it) and the others are back.

    For work done in turns (:func:`daydream.validation.turns.run_rounds`): each part's
    probes go to its own logs, even those it keeps open across its turns.

    >>> mine, other = CoreLinkLog(), CoreLinkLog()
    >>> with other, only_open([mine]):
    ...     note_placement(probe=lambda: 90.0)
    >>> mine.values_ns, other.values_ns
    ((90.0,), ())
    """
    saved = _OPEN[:]
    _OPEN[:] = logs
    try:
        yield
    finally:
        logs[:] = _OPEN
        _OPEN[:] = saved


def note_placement(probe=None) -> None:
    """Probe once (:func:`try_probe`) into every open :class:`CoreLinkLog`; nothing when none
    is open or the probe is unavailable."""
    got = try_probe(probe) if _OPEN else ()
    for log in _OPEN:
        log.values_ns += got


@contextlib.contextmanager
def probed(probe=None):
    """Around a measured run: :func:`note_placement` before and after it.

    >>> log = CoreLinkLog()
    >>> with log, probed(probe=lambda: 60.0):
    ...     pass
    >>> log.values_ns
    (60.0, 60.0)
    """
    note_placement(probe)
    yield
    note_placement(probe)
