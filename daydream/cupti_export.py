"""Chrome trace events from CUPTI records, and the collector ``daydream.collect`` drives.

Holds :func:`attach_external_ids` (the join kernel.correlation_id ->
external_id that ties GPU work to CPU ops), the conversion of
:class:`~daydream.cupti.ActivityRecords` into Kineto-style Chrome trace
events, :class:`CuptiKernelCollector` and :func:`make_collector`.  Every
public name here is also importable from :mod:`daydream.cupti`, which loads
this module on first use of one of them.
"""
from __future__ import annotations

import time

import numpy as np

from .cupti import (ActivityKind, ActivityRecords, CuptiTracer, CuptiUnavailableError, ExternalKind, MemcpyKind,
                    SyncType, available, demangle, timestamp_ns)
from .cupti_align import ClockMap, clock_sample, current_thread_pair, map_threads, pick_clock

__all__ = ["attach_external_ids", "CuptiKernelCollector", "default_clocks", "make_collector"]


def attach_external_ids(records: ActivityRecords, kind: ExternalKind | None = None) -> np.ndarray:
    """External id of every row, through its correlation id.

    Parameters
    ----------
    records : ActivityRecords
    kind : ExternalKind, optional
        Use only external ids of this kind.  Without it, when one correlation
        id has ids of several kinds, the last record wins.

    Returns
    -------
    numpy.ndarray of uint64
        One per row; 0 where the row's correlation id has no external id.
    """
    cols = records.columns
    ext_rows = cols["kind"] == ActivityKind.EXTERNAL_CORRELATION
    if kind is not None:
        ext_rows &= cols["external_kind"] == int(kind)
    corr = cols["correlation_id"][ext_rows]
    ids = cols["external_id"][ext_rows]
    out = np.zeros(len(records), dtype=np.uint64)
    if len(corr) == 0:
        return out
    # Last occurrence of each correlation id wins.
    order = np.argsort(corr, kind="stable")
    corr_sorted, ids_sorted = corr[order], ids[order]
    last = np.r_[corr_sorted[1:] != corr_sorted[:-1], True]
    keys, values = corr_sorted[last], ids_sorted[last]
    pos = np.searchsorted(keys, cols["correlation_id"])
    pos = np.minimum(pos, len(keys) - 1)
    hit = (keys[pos] == cols["correlation_id"]) & (cols["correlation_id"] != 0)
    out[hit] = values[pos[hit]]
    return out


_CHROME_CATEGORY = {
    ActivityKind.KERNEL: "kernel",
    ActivityKind.CONCURRENT_KERNEL: "kernel",
    ActivityKind.MEMCPY: "gpu_memcpy",
    ActivityKind.MEMCPY2: "gpu_memcpy",
    ActivityKind.MEMSET: "gpu_memset",
    ActivityKind.RUNTIME: "cuda_runtime",
    ActivityKind.DRIVER: "cuda_driver",
    ActivityKind.SYNCHRONIZATION: "cuda_sync",
}


_API_KINDS = (ActivityKind.RUNTIME, ActivityKind.DRIVER)
_CPU_CATS = ("cpu_op", "user_annotation")


def _cpu_ops_by_thread(doc: dict) -> dict:
    """CPU thread id -> (starts, ends) in ns since the document's base, from its Kineto ops."""
    spans: dict = {}
    for e in doc.get("traceEvents", []) if isinstance(doc, dict) else []:
        if isinstance(e, dict) and e.get("ph") == "X" and e.get("cat") in _CPU_CATS:
            try:
                spans.setdefault(int(e["tid"]), []).append((float(e["ts"]) * 1e3,
                                                            (float(e["ts"]) + float(e.get("dur", 0))) * 1e3))
            except (KeyError, TypeError, ValueError):
                continue
    return {tid: (np.array([a for a, _ in v]), np.array([b for _, b in v])) for tid, v in spans.items()}


def _chrome_events(records: ActivityRecords, clock: ClockMap | None = None, base_ns: int = 0,
                   thread_map: dict | None = None) -> list:
    """Kineto-style Chrome trace events (``ts``/``dur`` in µs since ``base_ns``) for the timed rows.

    ``clock`` maps CUPTI's timestamps onto the Unix clock (identity when
    omitted) and ``thread_map`` CUPTI thread ids onto the CPU trace's.
    """
    cols = records.columns
    clock = clock or ClockMap()
    thread_map = thread_map or {}
    external = attach_external_ids(records)
    starts = clock.since(base_ns, cols["start_ns"])
    ends = clock.since(base_ns, cols["end_ns"])
    shown = [demangle(n) for n in records.names]          # kernels named as Kineto names them
    events = []
    for i in np.flatnonzero(records.mask(*_CHROME_CATEGORY)):
        kind = ActivityKind(int(cols["kind"][i]))
        args = {"correlation": int(cols["correlation_id"][i]),
                "External id": int(external[i])}
        if kind in _API_KINDS:
            pid, tid = int(cols["process_id"][i]), int(cols["thread_id"][i])
            tid = thread_map.get(tid, tid)
            args["cbid"] = int(cols["cbid"][i])
        else:
            pid, tid = int(cols["device_id"][i]), int(cols["stream_id"][i])
            args["device"], args["stream"] = pid, tid
        if kind in (ActivityKind.KERNEL, ActivityKind.CONCURRENT_KERNEL):
            args["grid"] = [int(cols[f"grid_{a}"][i]) for a in "xyz"]
            args["block"] = [int(cols[f"block_{a}"][i]) for a in "xyz"]
            args["registers per thread"] = int(cols["registers_per_thread"][i])
            args["shared memory"] = int(cols["static_shared_bytes"][i]
                                        + cols["dynamic_shared_bytes"][i])
        elif kind in (ActivityKind.MEMCPY, ActivityKind.MEMCPY2, ActivityKind.MEMSET):
            args["bytes"] = int(cols["bytes"][i])
        if kind == ActivityKind.SYNCHRONIZATION:
            name = f"cuda{SyncType(int(cols['sync_type'][i])).name.title().replace('_', '')}"
        elif kind in (ActivityKind.MEMCPY, ActivityKind.MEMCPY2):
            name = f"Memcpy {MemcpyKind(int(cols['copy_kind'][i])).name}"
        elif kind == ActivityKind.MEMSET:
            name = "Memset"
        else:
            index = int(cols["name_id"][i])
            name = shown[index] if index >= 0 else f"cbid {int(cols['cbid'][i])}"
        events.append({"ph": "X", "cat": _CHROME_CATEGORY[kind], "name": name,
                       "pid": pid, "tid": tid, "ts": float(starts[i]) / 1e3,
                       "dur": max(float(ends[i] - starts[i]), 0.0) / 1e3, "args": args})
    return events


class CuptiKernelCollector:
    """Adapter for ``daydream.collect``: start, stop, then Chrome trace events.

    It reads each candidate clock and the Unix clock when it starts and stops
    (:mod:`daydream.cupti_align`) and remembers the starting thread's pair of
    ids, so that its events land on the CPU trace's clock and threads.

    Parameters
    ----------
    tracer : CuptiTracer, optional
        The tracer to drive; a default one otherwise.
    clocks : mapping of str to callable, optional
        The clocks the records may be stamped with, in order of preference
        (:func:`default_clocks`); tests pass their own.
    """

    def __init__(self, tracer: CuptiTracer | None = None, clocks=None):
        self.tracer = tracer or CuptiTracer()
        self.records: ActivityRecords | None = None
        self._clocks = dict(clocks or default_clocks())
        self._samples: dict = {}
        self._known_threads: dict = {}
        #: How the last :meth:`chrome_events` aligned the records (for the trace's metadata).
        self.alignment: dict = {}
        self._mark_unix_ns: int | None = None

    def start(self) -> None:
        """Start the tracer (raises :class:`CuptiUnavailableError` with the reason).

        ``daydream.collect`` starts it an iteration before the recorded ones, as
        Kineto enables its own CUPTI activities: the first activities CUPTI
        records after it is switched on cost more, and a warm-up iteration pays
        for them.  :meth:`mark` then says where the recorded window begins.
        """
        self.tracer.start()
        cupti_tid, native_tid = current_thread_pair()
        self._known_threads = {cupti_tid: native_tid}
        self._samples = {name: [clock_sample(read)] for name, read in self._clocks.items()}
        self._mark_unix_ns = None

    def mark(self) -> None:
        """The recorded window begins now: what CUPTI recorded before is left out of the events."""
        self._mark_unix_ns = time.time_ns()

    def stop(self) -> None:
        """Stop the tracer and keep its records."""
        for name, read in self._clocks.items():
            self._samples[name].append(clock_sample(read))
        self.records = self.tracer.stop()

    @property
    def skipped_apis(self) -> tuple:
        """Runtime / driver API names the tracer asks CUPTI not to record."""
        return tuple(self.tracer.skip_apis)

    @property
    def dropped_records(self) -> int:
        """Activity records lost (CUPTI buffers full, or over the row limit); 0 before :meth:`stop`."""
        return 0 if self.records is None else int(self.records.dropped_records)

    def chrome_events(self, doc: dict | None = None) -> list:
        """Kernels, copies, memsets, runtime calls and syncs as Chrome trace events.

        Parameters
        ----------
        doc : dict, optional
            The CPU side's Chrome-trace document (Kineto's export): its
            ``baseTimeNanoseconds`` and CPU ops place the events on its clock
            and threads.  Without it, ``ts`` is µs of the Unix clock.
        """
        if self.records is None:
            return []
        doc = doc if isinstance(doc, dict) else {}
        base_ns = int(doc.get("baseTimeNanoseconds") or 0)
        ops = _cpu_ops_by_thread(doc)
        maps = {name: ClockMap.fit(samples) for name, samples in self._samples.items()}
        after = -np.inf if self._mark_unix_ns is None else float(self._mark_unix_ns - base_ns)
        name, clock, share = pick_clock(maps, *_api_calls(self.records), ops, self._known_threads, base_ns, after)
        records = self.records.take(_in_window(self.records, clock, base_ns, after))
        tid, start, end = _api_calls(records)
        threads = map_threads(tid, clock.since(base_ns, start), clock.since(base_ns, end), ops, self._known_threads)
        unmapped = sorted(set(np.unique(tid).tolist()) - set(threads))
        share = None if share != share else share          # NaN (nothing to score) is not JSON
        self.alignment = {"clock": {"source": name, "calls_inside_ops": share, **clock.as_metadata()},
                          "threads": {str(k): v for k, v in threads.items()}, "unmapped_threads": unmapped,
                          "rows_before_window": len(self.records) - len(records)}
        return _chrome_events(records, clock, base_ns, threads)


def _api_calls(records: ActivityRecords) -> tuple:
    """``(thread ids, starts, ends)`` of the runtime and driver calls."""
    api = records.mask(*_API_KINDS)
    return records["thread_id"][api], records["start_ns"][api], records["end_ns"][api]


def _in_window(records: ActivityRecords, clock: ClockMap, base_ns: int, after_ns: float) -> np.ndarray:
    """Rows of the recorded window: API calls that start at ``after_ns`` or later (ns since
    ``base_ns`` under ``clock``), the rows of their correlation ids, and the other rows by their start.

    A kernel launched before the window and run inside it goes with its launch, so no kernel is
    left without the call that launched it.

    Examples
    --------
    >>> from daydream import cupti
    >>> cols = {"kind": np.array([int(cupti.ActivityKind.RUNTIME), int(cupti.ActivityKind.CONCURRENT_KERNEL),
    ...                           int(cupti.ActivityKind.RUNTIME), int(cupti.ActivityKind.CONCURRENT_KERNEL)]),
    ...         "correlation_id": np.array([1, 1, 2, 2]), "start_ns": np.array([10, 30, 20, 40])}
    >>> _in_window(cupti.ActivityRecords(cols, ()), ClockMap(), 0, 15.0).tolist()
    [False, False, True, True]
    """
    start = clock.since(base_ns, records["start_ns"])
    inside = start >= after_ns
    api = records.mask(*_API_KINDS)
    corr = records["correlation_id"]
    before = np.unique(corr[api & ~inside & (corr != 0)])
    after = np.unique(corr[api & inside & (corr != 0)])
    launched = ~api & (corr != 0)
    inside[launched & np.isin(corr, before)] = False
    inside[launched & np.isin(corr, after)] = True
    return inside


def default_clocks() -> dict:
    """CUPTI's own timestamp, then torch's approximate clock (which Kineto registers with CUPTI
    as the records' source when it enables CUPTI) where this torch has it."""
    clocks = {"cupti": timestamp_ns}
    try:
        from torch._C import _profiler

        clocks["torch approximate clock"] = _profiler._get_approximate_time
    except (ImportError, AttributeError):
        pass
    return clocks


def make_collector() -> CuptiKernelCollector:
    """A collector for ``daydream.collect``; raises :class:`CuptiUnavailableError` if unusable."""
    ok, reason = available()
    if not ok:
        raise CuptiUnavailableError(f"CUPTI tracing is unavailable: {reason}")
    return CuptiKernelCollector()
