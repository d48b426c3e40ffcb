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

__all__ = ["PAUSE_NAME", "PAUSES_KEY", "PEER_PAUSES_KEY", "cut_pauses", "cut_peer_pauses", "cut_spans",
           "shift_times"]

#: Name of the range a participant waits in (written by :mod:`daydream.collect.turns`).
PAUSE_NAME = "daydream: paused"
#: Key of a rank's ``meta`` that lists the pauses cut from it, ``[start_ns, end_ns]`` on the
#: trace's own clock (before the cut).
PAUSES_KEY = "daydream_pauses_cut_ns"
#: Key of a rank's ``meta`` that lists the other ranks' pauses cut from it
#: (:func:`cut_peer_pauses`), on the rank's clock after its own pauses were cut.
PEER_PAUSES_KEY = "daydream_peer_pauses_cut_ns"


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


def cut_pauses(cols: dict, names, fwdbwd: np.ndarray) -> np.ndarray:
    """Remove every ``daydream: paused`` range of one rank; returns the spans cut.

    ``names`` is the rank's :class:`~daydream.model.StringTable`, ``fwdbwd``
    the flow pairs ``(start_ns, lane, end_ns, lane)`` (times shifted in place).
    The spans (``[start_ns, end_ns]`` rows, sorted and disjoint) are on the
    rank's clock before the cut: what :func:`cut_peer_pauses` needs.
    """
    none = np.zeros((0, 2), np.int64)
    pid = names.get(PAUSE_NAME)
    if pid < 0:
        return none
    is_pause = cols["name"] == pid
    if not is_pause.any():
        return none
    spans = np.stack([cols["start_ns"][is_pause], cols["start_ns"][is_pause] + cols["dur_ns"][is_pause]], axis=1)
    spans = _disjoint(spans[np.argsort(spans[:, 0], kind="stable")])
    cut_spans(cols, spans, ~is_pause)
    _shift_flows(fwdbwd, spans)
    return spans


def cut_peer_pauses(ranks) -> int:
    """Cut each rank's pauses out of the other ranks' timelines too; returns the spans cut.

    A rank that pauses between two iterations (its turn, a heap top-up:
    :mod:`daydream.collect.tracer`) stops its part of the job's collectives,
    so the other ranks wait for it inside their own iteration: in the
    validation's 2-rank tensor-parallel runs a top-up of up to 555 MiB on rank 1
    (up to 1.58 s) lengthened one of rank 0's iterations by as much, the
    round's mean iteration by up to 83 ms (docs/validation-log.md, "Session 75").
    The wait is the tracer's, not training's, so it is cut as the rank's own
    pause is: on every other rank the span of each pause (on the one host
    clock the ranks of ``daydream trace --nproc`` stamp) is cut, iteration
    boundaries and flows included.  The cut rank's iteration then lasts what
    it would have without the pause; ops it still ran before it blocked on
    the paused rank fall into the span and lose their time (its wait is cut
    from the span's start, not from where it began to wait).

    ``ranks``: the :class:`~daydream.model.RankTrace` objects of one job,
    each with the spans :func:`cut_pauses` cut in ``meta[PAUSES_KEY]``;
    changed in place (a rank cut gets ``meta[PEER_PAUSES_KEY]``).
    """
    ranks = list(ranks)
    own = [np.asarray(r.meta.get(PAUSES_KEY, ()), np.int64).reshape(-1, 2) for r in ranks]
    total = 0
    for i, r in enumerate(ranks):
        peers = np.concatenate([own[j] for j in range(len(ranks)) if j != i] or [np.zeros((0, 2), np.int64)])
        spans = shift_times(peers.ravel(), own[i]).reshape(-1, 2) if len(peers) else peers
        spans = spans[spans[:, 1] > spans[:, 0]]
        if not len(spans):
            continue
        spans = _disjoint(spans[np.argsort(spans[:, 0], kind="stable")])
        cut_spans(r.cols, spans, np.ones(len(r.cols["start_ns"]), bool))
        r.boundaries_ns = shift_times(np.asarray(r.boundaries_ns, np.int64), spans)
        _shift_flows(r.fwdbwd, spans)
        r.meta[PEER_PAUSES_KEY] = spans.tolist()
        total += len(spans)
    return total


def _shift_flows(fwdbwd: np.ndarray, spans: np.ndarray) -> None:
    if len(fwdbwd):
        fwdbwd[:, 0] = shift_times(fwdbwd[:, 0], spans)
        fwdbwd[:, 2] = shift_times(fwdbwd[:, 2], spans)


def _disjoint(spans: np.ndarray) -> np.ndarray:
    """Merge overlapping sorted spans (pauses of several threads at once)."""
    out = [list(spans[0])]
    for s, e in spans[1:]:
        if s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return np.asarray(out, np.int64)
