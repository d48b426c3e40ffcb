"""Finding iteration boundaries in a trace.

Order of preference: ``ProfilerStep#N`` ranges, a user-given annotation
pattern (``--iteration-marker REGEX``), the optimizer step.

Each range-based iteration ends where the next begins; the last one where its
range ends.  That end is not always the iteration's: a loop that leaves with
``break`` never calls ``prof.step()`` again, and its last range stays open
through whatever the script does next (a DataLoader's workers shutting down)
until the profiler stops.  So the last iteration's *tail* -- the time after
the end of the last activity (op, kernel, copy) that started in it -- is cut
to the median tail of the other iterations (:func:`trim_last_tail`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..errors import NoIterationsError
from ..model import EventKind, LaneKind

__all__ = ["Iterations", "find_iterations", "trim_last_tail", "PROFILER_STEP_RE", "OPTIMIZER_STEP_RE", "HOW_TO_MARK"]

PROFILER_STEP_RE = re.compile(r"^ProfilerStep#\d+$")
OPTIMIZER_STEP_RE = re.compile(r"^Optimizer\.step#")

#: Advice printed when no iteration can be found.
HOW_TO_MARK = ("no iterations found (no ProfilerStep#N ranges, no optimizer step); record with "
               "torch.profiler and call prof.step() each iteration, or pass --iteration-marker "
               "REGEX naming an annotation that spans each iteration")


@dataclass(frozen=True)
class Iterations:
    """Iteration boundaries found in one rank (``n + 1`` times for ``n`` iterations)."""

    boundaries_ns: np.ndarray
    names: tuple
    lane: int
    source: str  # "ProfilerStep", "marker", "optimizer"


def _ranges(cols, names, lanes, pattern) -> list[tuple[int, int, int, str]]:
    cpu_lanes = {i for i, ln in enumerate(lanes) if ln.kind == LaneKind.CPU_THREAD}
    match = [pattern.search(s) is not None for s in names.strings]
    out, seen = [], set()
    kinds, nm, ln = cols["kind"], cols["name"], cols["lane"]
    for i in range(len(kinds)):
        if match[nm[i]] and ln[i] in cpu_lanes and kinds[i] in (EventKind.ANNOTATION, EventKind.CPU_OP):
            start = int(cols["start_ns"][i])
            key = (names[nm[i]], start)
            if key not in seen:
                seen.add(key)
                out.append((start, start + int(cols["dur_ns"][i]), int(ln[i]), names[nm[i]]))
    if not out:
        return out
    # keep the lane that carries most markers, in time order, non-overlapping
    best = max({r[2] for r in out}, key=lambda lane: sum(r[2] == lane for r in out))
    kept = []
    for r in sorted(r for r in out if r[2] == best):
        if not kept or r[0] >= kept[-1][1] or r[0] > kept[-1][0]:
            kept.append(r)
    return kept


def find_iterations(source, cols, names, lanes, marker: str | None = None) -> Iterations:
    """Find iteration boundaries.

    Raises
    ------
    NoIterationsError
        If none of the rules finds an iteration.
    """
    if marker:
        try:
            pattern = re.compile(marker)
        except re.error as exc:
            raise NoIterationsError(source, f"bad --iteration-marker regex {marker!r} ({exc})") from None
        rs = _ranges(cols, names, lanes, pattern)
        if not rs:
            raise NoIterationsError(source, f"no annotation matches --iteration-marker {marker!r}")
        return _from_starts(rs, "marker", cols)
    rs = _ranges(cols, names, lanes, PROFILER_STEP_RE)
    if rs:
        return _from_starts(rs, "ProfilerStep", cols)
    rs = _ranges(cols, names, lanes, OPTIMIZER_STEP_RE)
    if rs:
        ends = [r[1] for r in rs]
        first = int(cols["start_ns"][cols["lane"] == rs[0][2]].min())
        bounds = ends if len(ends) >= 2 else [first] + ends
        labels = tuple(f"step {i}" for i in range(len(bounds) - 1))
        return Iterations(np.asarray(bounds, np.int64), labels, rs[0][2], "optimizer")
    raise NoIterationsError(source, HOW_TO_MARK)


def _from_starts(rs, how, cols) -> Iterations:
    bounds = np.asarray([r[0] for r in rs] + [rs[-1][1]], np.int64)
    return Iterations(trim_last_tail(bounds, cols), tuple(r[3] for r in rs), rs[0][2], how)


def trim_last_tail(bounds: np.ndarray, cols) -> np.ndarray:
    """``bounds`` with the last iteration's idle tail cut to the other iterations' median.

    A tail is the time from the end of the last activity (any event but
    annotations and markers, on any lane) that starts in an iteration to the
    iteration's end; negative (work still running) counts as 0.  Needs two
    iterations or more; returns a copy.

    >>> cols = {"start_ns": np.array([0, 90, 100, 190, 200]), "dur_ns": np.array([85, 5, 88, 5, 60]),
    ...         "kind": np.array([0, 0, 0, 0, 0])}
    >>> trim_last_tail(np.array([0, 100, 200, 400]), cols).tolist()      # tails 5, 5, 140
    [0, 100, 200, 265]
    """
    bounds = np.array(bounds, np.int64)
    if len(bounds) < 3:
        return bounds
    kind = np.asarray(cols["kind"])
    work = (kind != EventKind.ANNOTATION) & (kind != EventKind.MARKER)
    start = np.asarray(cols["start_ns"], np.int64)[work]
    end = start + np.asarray(cols["dur_ns"], np.int64)[work]
    it = np.searchsorted(bounds, start, side="right") - 1
    inside = (it >= 0) & (it < len(bounds) - 1)
    last_end = np.full(len(bounds) - 1, np.iinfo(np.int64).min)
    np.maximum.at(last_end, it[inside], end[inside])
    if (last_end == np.iinfo(np.int64).min).any():
        return bounds                      # an iteration with no activity: nothing to compare
    tails = np.maximum(bounds[1:] - last_end, 0)
    typical = int(np.median(tails[:-1]))
    if tails[-1] > typical:
        bounds[-1] -= tails[-1] - typical
    return bounds
