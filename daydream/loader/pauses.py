"""Cutting ``daydream: paused`` spans out of a rank's timeline.

A process traced in turns with others (:mod:`daydream.collect.turns`)
waits for its turn between two iterations, inside a ``daydream: paused``
range.  The wait is not part of the training loop, so the loader removes it:
the range's event is dropped and every time after a pause moves earlier by
the pause's length (an event that spans a pause, which none should, loses
the paused part).

>>> import numpy as np
>>> cols = {"start_ns": np.array([0, 10, 30]), "dur_ns": np.array([10, 15, 5])}
>>> cut_spans(cols, np.array([[12, 22]]), keep=np.array([True, True, True]))
>>> cols["start_ns"].tolist(), cols["dur_ns"].tolist()
([0, 10, 20], [10, 5, 5])
"""
from __future__ import annotations

import numpy as np

__all__ = ["PAUSE_NAME", "cut_pauses", "cut_spans", "shift_times"]

#: Name of the range a participant waits in (written by :mod:`daydream.collect.turns`).
PAUSE_NAME = "daydream: paused"


def shift_times(t: np.ndarray, spans: np.ndarray) -> np.ndarray:
    """Times ``t`` with the sorted, disjoint ``spans`` (``[start, end)`` rows) cut out.

    A time inside a span maps to the span's start.
    """
    if not len(spans):
        return t
    starts, ends = spans[:, 0], spans[:, 1]
    cum = np.concatenate(([0], np.cumsum(ends - starts)))
    k = np.searchsorted(starts, t, side="right")          # spans starting at or before t
    inside = (k > 0) & (t < ends[np.maximum(k - 1, 0)])
    out = t - cum[k]
    out[inside] = starts[k[inside] - 1] - cum[k[inside] - 1]
    return out


def cut_spans(cols: dict, spans: np.ndarray, keep: np.ndarray) -> None:
    """Cut ``spans`` out of the event columns in place, keeping rows where ``keep``."""
    start = cols["start_ns"]
    new_start = shift_times(start, spans)
    new_end = shift_times(start + cols["dur_ns"], spans)
    cols["start_ns"], cols["dur_ns"] = new_start, new_end - new_start
    if not keep.all():
        for k, v in cols.items():
            if len(v) == len(keep):
                cols[k] = v[keep]


def cut_pauses(cols: dict, names, fwdbwd: np.ndarray) -> int:
    """Remove every ``daydream: paused`` range of one rank; returns how many.

    ``names`` is the rank's :class:`~daydream.model.StringTable`, ``fwdbwd``
    the flow pairs ``(start_ns, lane, end_ns, lane)`` (times shifted in place).
    """
    pid = names.get(PAUSE_NAME)
    if pid < 0:
        return 0
    is_pause = cols["name"] == pid
    if not is_pause.any():
        return 0
    spans = np.stack([cols["start_ns"][is_pause], cols["start_ns"][is_pause] + cols["dur_ns"][is_pause]], axis=1)
    spans = _disjoint(spans[np.argsort(spans[:, 0], kind="stable")])
    cut_spans(cols, spans, ~is_pause)
    if len(fwdbwd):
        fwdbwd[:, 0] = shift_times(fwdbwd[:, 0], spans)
        fwdbwd[:, 2] = shift_times(fwdbwd[:, 2], spans)
    return int(is_pause.sum())


def _disjoint(spans: np.ndarray) -> np.ndarray:
    """Merge overlapping sorted spans (pauses of several threads at once)."""
    out = [list(spans[0])]
    for s, e in spans[1:]:
        if s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return np.asarray(out, np.int64)
