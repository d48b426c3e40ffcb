"""Chrome trace events from CUPTI records, and the collector ``daydream.collect`` drives.

Holds :func:`attach_external_ids` (the join kernel.correlation_id ->
external_id that ties GPU work to CPU ops), the conversion of
:class:`~daydream.cupti.ActivityRecords` into Kineto-style Chrome trace
events, :class:`CuptiKernelCollector` and :func:`make_collector`.  Every
public name here is also importable from :mod:`daydream.cupti`, which loads
this module on first use of one of them.
"""
from __future__ import annotations

import numpy as np

from .cupti import (ActivityKind, ActivityRecords, CuptiTracer, CuptiUnavailableError, ExternalKind, MemcpyKind,
                    SyncType, available)

__all__ = ["attach_external_ids", "CuptiKernelCollector", "make_collector"]


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


def _chrome_events(records: ActivityRecords) -> list:
    """Kineto-style Chrome trace events (``ts``/``dur`` in µs) for the timed rows."""
    cols = records.columns
    external = attach_external_ids(records)
    events = []
    for i in np.flatnonzero(records.mask(*_CHROME_CATEGORY)):
        kind = ActivityKind(int(cols["kind"][i]))
        start, end = int(cols["start_ns"][i]), int(cols["end_ns"][i])
        args = {"correlation": int(cols["correlation_id"][i]),
                "External id": int(external[i])}
        if kind in (ActivityKind.RUNTIME, ActivityKind.DRIVER):
            pid, tid = int(cols["process_id"][i]), int(cols["thread_id"][i])
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
            name = records.name(i) or f"cbid {int(cols['cbid'][i])}"
        events.append({"ph": "X", "cat": _CHROME_CATEGORY[kind], "name": name,
                       "pid": pid, "tid": tid, "ts": start / 1000.0,
                       "dur": (end - start) / 1000.0, "args": args})
    return events


class CuptiKernelCollector:
    """Adapter for ``daydream.collect``: start, stop, then Chrome trace events.

    Parameters
    ----------
    tracer : CuptiTracer, optional
        The tracer to drive; a default one otherwise.
    """

    def __init__(self, tracer: CuptiTracer | None = None):
        self.tracer = tracer or CuptiTracer()
        self.records: ActivityRecords | None = None

    def start(self) -> None:
        """Start the tracer (raises :class:`CuptiUnavailableError` with the reason)."""
        self.tracer.start()

    def stop(self) -> None:
        """Stop the tracer and keep its records."""
        self.records = self.tracer.stop()

    @property
    def dropped_records(self) -> int:
        """Activity records lost (CUPTI buffers full, or over the row limit); 0 before :meth:`stop`."""
        return 0 if self.records is None else int(self.records.dropped_records)

    def chrome_events(self) -> list:
        """Kernels, copies, memsets, runtime calls and syncs as Chrome trace events."""
        return [] if self.records is None else _chrome_events(self.records)


def make_collector() -> CuptiKernelCollector:
    """A collector for ``daydream.collect``; raises :class:`CuptiUnavailableError` if unusable."""
    ok, reason = available()
    if not ok:
        raise CuptiUnavailableError(f"CUPTI tracing is unavailable: {reason}")
    return CuptiKernelCollector()
