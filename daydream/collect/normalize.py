"""Post-processing of daydream's own ranges before the trace is written.

* Layer and iteration ranges are opened with torch's fast record function,
  which Kineto files under ``cat: "cpu_op"``; they are annotations, so their
  category becomes ``user_annotation`` (as for ``torch.profiler.record_function``).
* A backward range opens in a pre-hook of the autograd node that starts the
  module's backward, i.e. *inside* that node's
  ``autograd::engine::evaluate_function`` range, and closes inside the first
  node after the module.  To keep slices properly nested (Perfetto and
  stack-based readers need it), its start moves back to the start of the
  enclosing ``evaluate_function`` and its end to the start of the one it
  closed in; ranges ending at the same point are shrunk by 1 ns per level so
  an inner module never ties with its parent.
"""
from __future__ import annotations

import bisect
from collections import defaultdict

from .hooks import BWD_PREFIX, FWD_PREFIX

__all__ = ["normalize_marker_events"]

_EVAL_PREFIX = "autograd::engine::evaluate_function"
_STEP_PREFIX = "ProfilerStep#"
_ONE_NS_US = 0.001


def _is_marker(name: str) -> bool:
    return name.startswith((FWD_PREFIX, BWD_PREFIX, _STEP_PREFIX))


#: Kineto writes microseconds with 3 decimals: times that coincide can differ by
#: a rounding step, so containment is tested with this tolerance (us).
_TOLERANCE_US = 0.002


def _containing_start(starts, ends, t):
    """Start of the latest-starting interval that contains ``t`` (within rounding), or None."""
    i = bisect.bisect_right(starts, t + _TOLERANCE_US) - 1
    while i >= 0:
        if ends[i] >= t - _TOLERANCE_US:
            return starts[i]
        if i > 0 and starts[i - 1] == starts[i]:
            i -= 1
            continue
        return None
    return None


def normalize_marker_events(events: list[dict]) -> list[dict]:
    """Fix categories and nesting of daydream's ranges in ``events`` (in place).

    Returns
    -------
    list of dict
        ``events``, for chaining.
    """
    evals = defaultdict(list)
    bwd = []
    for e in events:
        name = e.get("name")
        if e.get("ph") != "X" or not isinstance(name, str):
            continue
        if _is_marker(name):
            e["cat"] = "user_annotation"
            if name.startswith(BWD_PREFIX):
                bwd.append(e)
        elif name.startswith(_EVAL_PREFIX):
            evals[(e.get("pid"), e.get("tid"))].append((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))))
    if not bwd:
        return events
    index = {}
    for key, spans in evals.items():
        spans.sort()
        index[key] = ([s for s, _ in spans], [t for _, t in spans])
    by_end = defaultdict(list)
    for e in bwd:
        starts, ends = index.get((e.get("pid"), e.get("tid")), ([], []))
        ts = float(e["ts"])
        te = ts + float(e.get("dur", 0))
        new_ts = _containing_start(starts, ends, ts)
        new_te = _containing_start(starts, ends, te)
        new_ts = ts if new_ts is None else new_ts
        new_te = te if new_te is None else new_te
        by_end[round(new_te, 3)].append((te, e, new_ts))
    for anchor, group in by_end.items():
        group.sort(key=lambda g: g[0])  # inner modules close first
        n = len(group)
        for i, (_, e, new_ts) in enumerate(group):
            end = anchor - (n - 1 - i) * _ONE_NS_US
            _set_span(e, new_ts, end)
    _uncross(bwd)
    return events


def _set_span(e: dict, start: float, end: float) -> None:
    """Set ts/dur with 3 decimals so that ts + dur never passes ``end`` (rounding)."""
    ts = round(start, 3)
    dur = round(max(end - ts, 0.0), 3)
    if ts + dur > end + 1e-7:
        dur = round(max(dur - _ONE_NS_US, 0.0), 3)
    e["ts"], e["dur"] = ts, dur


def _uncross(ranges: list[dict]) -> None:
    """Last resort: a backward range that starts inside another and ends after it
    (autograd ran the two modules' nodes interleaved) starts where the other ends."""
    by_thread = defaultdict(list)
    for e in ranges:
        by_thread[(e.get("pid"), e.get("tid"))].append(e)
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in evs:
            end = e["ts"] + e["dur"]
            while stack and stack[-1] <= e["ts"] + 1e-7:
                stack.pop()
            if stack and end > stack[-1] + 1e-7:
                _set_span(e, stack[-1], end)
                while stack and stack[-1] <= e["ts"] + 1e-7:
                    stack.pop()
            stack.append(e["ts"] + e["dur"])
