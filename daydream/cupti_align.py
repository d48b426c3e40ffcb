"""Put CUPTI's records on the CPU trace's clock and threads.

Two things differ between the records of ``daydream._cupti`` and the CPU ops
``torch.profiler`` (Kineto) writes in the same process:

* **The clock.**  CUPTI stamps records with its own timestamp source: by
  default ``CLOCK_REALTIME`` in ns, but any library in the process may
  register another one (Kineto registers its TSC-based approximate clock when
  it enables CUPTI, and a CUDA build of torch enables CUPTI's runtime records
  even for CPU-only profiling).  Kineto's exported events are in µs since the
  document's ``baseTimeNanoseconds`` of the Unix clock.  :func:`clock_sample`
  reads ``cuptiGetTimestamp`` bracketed by two ``time.time_ns()`` calls, and
  :meth:`ClockMap.fit` turns samples taken at the start and the end of a
  recording into a linear map, so the map holds whatever CUPTI's source is.
  Which source the records carry is not certain either (whether
  ``cuptiGetTimestamp`` follows a registered callback is not documented), so
  several candidate clocks are sampled and :func:`pick_clock` keeps the one
  under which the calling thread's runtime calls lie inside its CPU ops.
* **The thread ids.**  CUPTI's ``threadId`` is the low 32 bits of the calling
  thread's ``pthread_t``; Kineto's CPU ops carry the kernel's thread id.  The
  calling thread's pair is known (``threading.get_ident`` and
  ``get_native_id``); for other threads (autograd's device threads run the
  backward pass on CUDA) :func:`map_threads` picks the CPU thread whose ops
  contain the most of that thread's runtime calls, as a launch happens inside
  the op that makes it.

Examples
--------
>>> m = ClockMap.fit([ClockSample(1_000, 5_000, 10), ClockSample(2_001_000, 4_005_000, 10)])
>>> m.scale, float(m.since(4_000, 1_000)), float(m.since(0, 1_001_000))
(2.0, 1000.0, 2005000.0)
>>> import numpy as np
>>> ops = {7: (np.array([0.0, 100.0]), np.array([50.0, 200.0]))}
>>> map_threads(np.array([9, 9]), np.array([10.0, 120.0]), np.array([20.0, 130.0]), ops)
{9: 7}
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

__all__ = ["ClockSample", "ClockMap", "clock_sample", "current_thread_pair", "map_threads", "pick_clock",
           "MIN_SCALE_SPAN_NS", "MIN_THREAD_SCORE"]

#: Samples closer than this (in CUPTI time) give an offset only: the scale of a
#: shorter span is noise.
MIN_SCALE_SPAN_NS = 1_000_000
#: A CUPTI thread maps to a CPU thread only if at least this share of its
#: runtime calls lies inside that thread's ops.
MIN_THREAD_SCORE = 0.5
_PTHREAD_MASK = 0xFFFFFFFF


@dataclass(frozen=True)
class ClockSample:
    """One reading of both clocks: CUPTI's and the Unix clock (``error_ns``: half the bracket)."""

    cupti_ns: int
    unix_ns: int
    error_ns: int


def clock_sample(read_cupti: Callable[[], int], tries: int = 5) -> ClockSample:
    """The tightest of ``tries`` readings of ``read_cupti`` between two ``time.time_ns()``."""
    best = None
    for _ in range(tries):
        t0 = time.time_ns()
        c = int(read_cupti())
        t1 = time.time_ns()
        s = ClockSample(c, (t0 + t1) // 2, (t1 - t0) // 2 + 1)
        if best is None or s.error_ns < best.error_ns:
            best = s
    return best


@dataclass(frozen=True)
class ClockMap:
    """``unix_ns = ref_unix_ns + scale * (cupti_ns - ref_cupti_ns)``.

    Kept relative to a reference reading so that float64 keeps ns precision
    (absolute Unix ns, about 1.8e18, would round to 256 ns).

    Attributes
    ----------
    scale : float
        Unix ns per CUPTI unit (1 when CUPTI's source is a ns clock).
    ref_cupti_ns, ref_unix_ns : int
        One reading of both clocks.
    error_ns : int
        The widest bracket half of the samples it was fitted to.
    samples : int
    """

    scale: float = 1.0
    ref_cupti_ns: int = 0
    ref_unix_ns: int = 0
    error_ns: int = 0
    samples: int = 0

    @classmethod
    def fit(cls, samples) -> "ClockMap":
        """Through the first and last sample (an offset alone when they are close)."""
        pts = sorted(samples, key=lambda s: s.cupti_ns)
        if not pts:
            return cls()
        first, last = pts[0], pts[-1]
        span = last.cupti_ns - first.cupti_ns
        scale = (last.unix_ns - first.unix_ns) / span if span >= MIN_SCALE_SPAN_NS else 1.0
        if not scale > 0:
            scale = 1.0
        return cls(scale, first.cupti_ns, first.unix_ns, max(s.error_ns for s in pts), len(pts))

    def since(self, base_unix_ns: int, cupti_ns) -> np.ndarray:
        """CUPTI timestamps (scalar or array) as float64 ns since ``base_unix_ns`` of the Unix clock."""
        d = np.asarray(cupti_ns, dtype=np.int64) - np.int64(self.ref_cupti_ns)
        return float(self.ref_unix_ns - int(base_unix_ns)) + self.scale * d.astype(np.float64)

    def as_metadata(self) -> dict:
        return {"scale": self.scale, "ref_cupti_ns": self.ref_cupti_ns, "ref_unix_ns": self.ref_unix_ns,
                "error_ns": self.error_ns, "samples": self.samples}


def current_thread_pair() -> tuple:
    """``(CUPTI's thread id, the kernel's thread id)`` of the calling thread."""
    return threading.get_ident() & _PTHREAD_MASK, threading.get_native_id()


def _contained(starts: np.ndarray, ends: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Whether each interval ``[s, e]`` lies inside some interval of ``(starts, ends)``."""
    if len(starts) == 0:
        return np.zeros(len(s), bool)
    order = np.argsort(starts, kind="stable")
    st, reach = starts[order], np.maximum.accumulate(ends[order])
    idx = np.searchsorted(st, s, side="right") - 1
    ok = idx >= 0
    out = np.zeros(len(s), bool)
    out[ok] = reach[idx[ok]] >= e[ok]
    return out


def map_threads(api_tid: np.ndarray, api_start: np.ndarray, api_end: np.ndarray,
                cpu_ops: Mapping[int, tuple], known: Mapping[int, int] | None = None) -> dict:
    """CUPTI thread id -> CPU thread id, for every thread that made runtime calls.

    Parameters
    ----------
    api_tid, api_start, api_end : numpy.ndarray
        The runtime calls' CUPTI thread ids and times (on the CPU ops' clock).
    cpu_ops : mapping
        CPU thread id -> ``(starts, ends)`` arrays of its ops.
    known : mapping, optional
        Pairs known for sure (:func:`current_thread_pair`); they win.

    Returns
    -------
    dict
        Only the threads that map; the others keep their CUPTI id.
    """
    known = dict(known or {})
    out = {}
    for tid in np.unique(api_tid).tolist():
        if tid in known:
            out[tid] = known[tid]
            continue
        sel = api_tid == tid
        s, e = api_start[sel], api_end[sel]
        scores = {cpu: _contained(st, en, s, e).mean() for cpu, (st, en) in cpu_ops.items()}
        if scores:
            cpu, score = max(scores.items(), key=lambda kv: kv[1])
            if score >= MIN_THREAD_SCORE:
                out[tid] = cpu
    return out


def pick_clock(candidates: Mapping[str, ClockMap], api_tid: np.ndarray, api_start: np.ndarray,
               api_end: np.ndarray, cpu_ops: Mapping[int, tuple], known: Mapping[int, int],
               base_ns: int = 0, after_ns: float = -np.inf) -> tuple:
    """The candidate clock under which the known threads' runtime calls nest in their CPU ops.

    Parameters
    ----------
    candidates : mapping
        Name -> :class:`ClockMap` of each clock the records may carry, in order of preference
        (the first wins ties, and when nothing can be scored).
    api_tid, api_start, api_end : numpy.ndarray
        The runtime calls' CUPTI thread ids and raw CUPTI timestamps.
    cpu_ops : mapping
        CPU thread id -> ``(starts, ends)`` of its ops, ns since ``base_ns``.
    known : mapping
        CUPTI thread id -> CPU thread id pairs known for sure.
    base_ns : int
        The Unix ns the CPU ops' times count from.
    after_ns : float
        Calls that start before this (ns since ``base_ns``) under a candidate are not scored
        for it: the collector was running before the CPU side recorded.

    Returns
    -------
    tuple
        ``(name, ClockMap, share)``: ``share`` of the known threads' calls inside their
        thread's ops under it (NaN when none could be scored: no such call, or no ops of
        those threads).

    Examples
    --------
    >>> ops = {7: (np.array([1_000.0]), np.array([2_000.0]))}
    >>> c = {"a": ClockMap(), "b": ClockMap(2.0)}
    >>> name, _, share = pick_clock(c, np.array([9]), np.array([700]), np.array([800]), ops, {9: 7})
    >>> name, share
    ('b', 1.0)
    """
    names = list(candidates)
    mine = np.isin(api_tid, [c for c, cpu in known.items() if cpu in cpu_ops])   # calls with ops to nest in
    if not names or not mine.any():
        return (names[0], candidates[names[0]], float("nan")) if names else ("", ClockMap(), float("nan"))
    shares = {}
    for name in names:
        clock = candidates[name]
        s, e = clock.since(base_ns, api_start[mine]), clock.since(base_ns, api_end[mine])
        tids = api_tid[mine]
        scored = s >= after_ns
        s, e, tids = s[scored], e[scored], tids[scored]
        inside = np.zeros(len(s), bool)
        for cupti_tid, cpu_tid in known.items():
            sel = tids == cupti_tid
            if sel.any() and cpu_tid in cpu_ops:
                inside[sel] = _contained(*cpu_ops[cpu_tid], s[sel], e[sel])
        shares[name] = float(inside.mean()) if len(inside) else float("nan")
    best = max(names, key=lambda n: (shares[n] if shares[n] == shares[n] else -1.0, -names.index(n)))
    return best, candidates[best], shares[best]
