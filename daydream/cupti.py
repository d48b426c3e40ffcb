"""GPU activity from CUPTI: the Python face of the optional ``daydream._cupti`` extension.

The extension is C++ (``cupti_ext/``), links libcupti only, and is built at
install time when a CUDA toolkit is present.  This module imports it lazily:
``import daydream.cupti`` always works, with or without CUDA, and
:func:`available` says whether tracing can work here and, if not, why.

Records come back columnar: one numpy array per field (``kind``,
``start_ns``, ``end_ns``, ``correlation_id``, ``device_id``, ``stream_id``,
``name_id``, ``bytes``, ``copy_kind``, grid/block, ``cbid``, ``sync_type``,
``external_id``, ...), names as a table of unique strings indexed by
``name_id``; never a Python object per record.  A field that does not apply
to a record's kind holds the sentinel given by :func:`sentinels` (mostly -1).

Joining with ``torch.profiler`` CPU ops
---------------------------------------
CUPTI gives every runtime API call a correlation id, shared by the kernel or
copy it launches.  While an external id is pushed on a thread
(:func:`external_correlation`, CUPTI's ``cuptiActivityPushExternalCorrelationId``),
each API call on that thread also yields an ``EXTERNAL_CORRELATION`` record
mapping its correlation id to the external id.  Pushing each CPU op's id when
the op starts therefore ties kernels to ops:
kernel.correlation_id -> external_id -> op (:func:`attach_external_ids`).
Kineto does exactly this with its own ids when its CUDA activity is on, so the
two tracers must not run together (CUPTI's buffer callbacks are per process).

Examples
--------
>>> from daydream import cupti
>>> ok, reason = cupti.available()
>>> isinstance(ok, bool) and isinstance(reason, str)
True
"""
from __future__ import annotations

import atexit
import contextlib
import enum
import importlib
import importlib.util
import threading
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Iterator, Mapping

import numpy as np

from .errors import DaydreamError

if TYPE_CHECKING:   # at run time these come from __getattr__ below (cupti_export imports this module)
    from .cupti_export import CuptiKernelCollector, attach_external_ids, make_collector

__all__ = [
    "ActivityKind",
    "MemcpyKind",
    "SyncType",
    "ExternalKind",
    "DEFAULT_KINDS",
    "DEFAULT_SKIPPED_APIS",
    "demangle",
    "CuptiError",
    "CuptiUnavailableError",
    "CuptiStateError",
    "ExtensionStatus",
    "ActivityRecords",
    "CuptiTracer",
    "CuptiKernelCollector",
    "available",
    "extension_status",
    "load_extension",
    "decode",
    "external_correlation",
    "push_external_correlation_id",
    "pop_external_correlation_id",
    "attach_external_ids",
    "make_collector",
    "sentinels",
    "timestamp_ns",
]


class ActivityKind(enum.IntEnum):
    """CUPTI activity kinds daydream decodes (values are ``CUpti_ActivityKind``)."""

    MEMCPY = 1
    MEMSET = 2
    KERNEL = 3
    DRIVER = 4
    RUNTIME = 5
    CONCURRENT_KERNEL = 10
    OVERHEAD = 17  # not decoded into rows; counted in ``skipped_by_kind``
    MEMCPY2 = 22  # peer-to-peer copies
    SYNCHRONIZATION = 38
    EXTERNAL_CORRELATION = 39


class MemcpyKind(enum.IntEnum):
    """Direction of a copy (``CUpti_ActivityMemcpyKind``)."""

    UNKNOWN = 0
    HTOD = 1
    DTOH = 2
    HTOA = 3
    ATOH = 4
    ATOA = 5
    ATOD = 6
    DTOA = 7
    DTOD = 8
    HTOH = 9
    PTOP = 10


class SyncType(enum.IntEnum):
    """What a synchronisation record waited on (``CUpti_ActivitySynchronizationType``)."""

    UNKNOWN = 0
    EVENT_SYNCHRONIZE = 1
    STREAM_WAIT_EVENT = 2
    STREAM_SYNCHRONIZE = 3
    CONTEXT_SYNCHRONIZE = 4


class ExternalKind(enum.IntEnum):
    """Namespace of an external correlation id (``CUpti_ExternalCorrelationKind``)."""

    INVALID = 0
    UNKNOWN = 1
    OPENACC = 2
    CUSTOM0 = 3
    CUSTOM1 = 4
    CUSTOM2 = 5


#: What :class:`CuptiTracer` records unless told otherwise.
DEFAULT_KINDS = (
    ActivityKind.CONCURRENT_KERNEL,
    ActivityKind.MEMCPY,
    ActivityKind.MEMCPY2,
    ActivityKind.MEMSET,
    ActivityKind.RUNTIME,
    ActivityKind.SYNCHRONIZATION,
    ActivityKind.EXTERNAL_CORRELATION,
)

#: Runtime and driver APIs whose records :class:`CuptiTracer` does not take:
#: frequent calls that launch, copy and wait for nothing (cudaGetDevice alone
#: is ~8 calls per PyTorch op).  Kineto drops the first six from its traces;
#: here CUPTI is told not to record any of them, which is what costs time.
#: Their time stays inside the CPU ops that make them.
DEFAULT_SKIPPED_APIS = (
    "cudaGetDevice", "cudaSetDevice", "cudaGetLastError", "cudaEventCreate",
    "cudaEventCreateWithFlags", "cudaEventDestroy", "cudaPeekAtLastError", "cudaGetErrorString",
    "cuKernelGetName", "cuCtxGetCurrent", "cuCtxSetCurrent", "cuGetProcAddress",
)

_MODULE = "daydream._cupti"
_NOT_BUILT = (
    "the C++ extension daydream._cupti is not built: no CUDA toolkit with CUPTI was found "
    "when daydream was installed (or DAYDREAM_NO_CUPTI was set); install the CUDA toolkit, "
    "set CUDA_HOME, and reinstall daydream"
)


class CuptiError(DaydreamError):
    """A CUPTI call failed.

    Parameters
    ----------
    message : str
        What went wrong.
    call : str, optional
        The CUPTI function that failed.
    code : int, optional
        Its ``CUptiResult``.
    result : str, optional
        CUPTI's name for ``code`` (e.g. ``"CUPTI_ERROR_NOT_INITIALIZED"``).
    """

    def __init__(self, message: str, call: str | None = None, code: int | None = None,
                 result: str | None = None):
        self.call = call
        self.code = code
        self.result = result
        super().__init__(message)


class CuptiUnavailableError(CuptiError):
    """Tracing cannot work on this machine; the message says why."""


class CuptiStateError(CuptiError):
    """Tracing was started twice, or stopped when not running."""


@dataclass(frozen=True)
class ExtensionStatus:
    """What is known about the CUPTI extension in this process.

    Attributes
    ----------
    built : bool
        ``daydream._cupti`` exists in the installed package.
    loaded : bool
        It imported.
    usable : bool
        A CUDA driver and at least one device are present, so tracing can start.
    reason : str
        Why not, when ``usable`` is false; empty otherwise.
    cupti_api_version_built : int or None
        ``CUPTI_API_VERSION`` of the headers it was compiled with.
    cupti_version_runtime : int or None
        ``cuptiGetVersion()`` of the libcupti it loaded.
    driver_version : int or None
        ``cuDriverGetVersion()`` (e.g. 13000), when a driver is present.
    device_count : int
        CUDA devices the driver sees.
    library_path : str or None
        File of the extension.
    """

    built: bool
    loaded: bool
    usable: bool
    reason: str
    cupti_api_version_built: int | None = None
    cupti_version_runtime: int | None = None
    driver_version: int | None = None
    device_count: int = 0
    library_path: str | None = None


_lock = threading.Lock()
_ext_cache: tuple | None = None  # (module or None, reason)


def load_extension():
    """Import ``daydream._cupti`` once.

    Returns
    -------
    tuple
        ``(module, "")`` on success, ``(None, reason)`` otherwise.
    """
    global _ext_cache
    with _lock:
        if _ext_cache is None:
            try:
                if importlib.util.find_spec(_MODULE) is None:
                    _ext_cache = (None, _NOT_BUILT)
                else:
                    _ext_cache = (importlib.import_module(_MODULE), "")
            except ImportError as exc:  # built, but libcupti (or a symbol) is missing
                _ext_cache = (None, f"daydream._cupti is built but does not load: {exc}")
        return _ext_cache


def _require_extension():
    ext, reason = load_extension()
    if ext is None:
        raise CuptiUnavailableError(f"CUPTI tracing is unavailable: {reason}")
    return ext


@contextlib.contextmanager
def _translated(ext) -> Iterator[None]:
    """Turn the extension's exceptions into :class:`CuptiError` subclasses."""
    try:
        yield
    except ext.CuptiCallError as exc:
        call, code, result = exc.args
        raise CuptiError(f"{call} failed: {result} (CUptiResult {code})", call, code,
                         result) from None
    except ext.UnavailableError as exc:
        raise CuptiUnavailableError(f"CUPTI tracing is unavailable: {exc}") from None
    except ext.StateError as exc:
        raise CuptiStateError(str(exc)) from None


def extension_status() -> ExtensionStatus:
    """Check the extension, the driver and the devices; never raises.

    Returns
    -------
    ExtensionStatus
    """
    built = importlib.util.find_spec(_MODULE) is not None
    ext, reason = load_extension()
    if ext is None:
        return ExtensionStatus(built=built, loaded=False, usable=False, reason=reason)
    try:
        runtime = int(ext.cupti_version())
    except ext.CuptiCallError as exc:
        runtime = None
        reason = f"cuptiGetVersion failed: {exc.args[2]}"
    why, devices, driver = ext.probe_driver()
    return ExtensionStatus(
        built=True,
        loaded=True,
        usable=not why and runtime is not None,
        reason=why or reason,
        cupti_api_version_built=int(ext.CUPTI_API_VERSION),
        cupti_version_runtime=runtime,
        driver_version=int(driver) or None,
        device_count=int(devices),
        library_path=getattr(ext, "__file__", None),
    )


def available() -> tuple:
    """Whether CUPTI tracing can start in this process.

    Returns
    -------
    tuple of (bool, str)
        ``(True, "")``, or ``(False, reason)``.
    """
    status = extension_status()
    return status.usable, status.reason


@dataclass(frozen=True)
class ActivityRecords:
    """Decoded activity records, one row per record, all kinds in one table.

    Behaves as a read-only mapping from column name to numpy array
    (``records["start_ns"]``).  Times are CUPTI timestamps in ns.

    Attributes
    ----------
    columns : Mapping[str, numpy.ndarray]
        One array per field, all the same length.
    names : tuple of str
        Unique kernel and API names; ``columns["name_id"]`` indexes it (-1: none).
    dropped_records : int
        Records lost: CUPTI's dropped count plus rows over ``max_rows``.
    stats : Mapping[str, int]
        Counters: ``dropped_by_cupti``, ``dropped_by_row_limit``,
        ``buffers_refused``, ``buffers_completed``, ``records_seen``, ...
    skipped_by_kind : Mapping[int, int]
        Records of kinds the decoder does not turn into rows, by CUPTI kind.
    """

    columns: Mapping[str, np.ndarray]
    names: tuple
    dropped_records: int = 0
    stats: Mapping[str, int] = field(default_factory=dict)
    skipped_by_kind: Mapping[int, int] = field(default_factory=dict)

    @classmethod
    def _from_raw(cls, raw: dict, column_names) -> "ActivityRecords":
        columns = {name: raw.pop(name) for name in column_names}
        for array in columns.values():
            array.flags.writeable = False
        names = tuple(raw.pop("names"))
        skipped = dict(raw.pop("skipped_by_kind"))
        dropped = int(raw.pop("dropped_records", 0))
        return cls(MappingProxyType(columns), names, dropped,
                   MappingProxyType({k: int(v) for k, v in raw.items()}),
                   MappingProxyType(skipped))

    def __len__(self) -> int:
        return len(self.columns["kind"])

    def __getitem__(self, column: str) -> np.ndarray:
        return self.columns[column]

    def __contains__(self, column: object) -> bool:
        return column in self.columns

    def keys(self):
        """Column names."""
        return self.columns.keys()

    def name(self, row: int) -> str | None:
        """Kernel or API name of one row, or None."""
        index = int(self.columns["name_id"][row])
        return self.names[index] if index >= 0 else None

    def mask(self, *kinds: ActivityKind) -> np.ndarray:
        """Boolean mask of the rows of the given kinds."""
        return np.isin(self.columns["kind"], np.asarray([int(k) for k in kinds], dtype=np.int16))

    def take(self, rows: np.ndarray) -> "ActivityRecords":
        """The records of the rows a boolean mask (or index array) selects; names and counters kept."""
        columns = {}
        for name, array in self.columns.items():
            columns[name] = array[rows]
            columns[name].flags.writeable = False
        return ActivityRecords(MappingProxyType(columns), self.names, self.dropped_records, self.stats,
                               self.skipped_by_kind)

    def as_dict(self) -> dict:
        """Plain dict: every column, plus ``names`` and ``dropped_records``."""
        out = dict(self.columns)
        out["names"] = list(self.names)
        out["dropped_records"] = self.dropped_records
        return out


def decode(buffer, max_rows: int | None = None) -> ActivityRecords:
    """Decode a ``daydream._cupti.SyntheticBuffer`` exactly as the tracer decodes CUPTI's.

    Parameters
    ----------
    buffer : daydream._cupti.SyntheticBuffer
        Real ``CUpti_Activity*`` records built in memory.
    max_rows : int, optional
        Keep at most this many rows; the rest count in ``dropped_records``.

    Returns
    -------
    ActivityRecords
    """
    ext = _require_extension()
    raw = ext.decode(buffer) if max_rows is None else ext.decode(buffer, max_rows)
    raw["dropped_records"] = raw["dropped_by_row_limit"]
    return ActivityRecords._from_raw(raw, ext.COLUMNS)


def sentinels() -> Mapping[str, int]:
    """The value each column holds where it does not apply (empty without the extension)."""
    ext, _ = load_extension()
    return MappingProxyType(dict(ext.SENTINELS)) if ext is not None else MappingProxyType({})


_atexit_registered = False


def _shutdown_at_exit() -> None:
    # Python's atexit runs before CUDA's own teardown; the C++ side releases
    # the GIL and its callbacks never take it, so this cannot deadlock.
    ext, _ = load_extension()
    if ext is not None:
        ext.shutdown()


class CuptiTracer:
    """Records GPU activity with CUPTI between :meth:`start` and :meth:`stop`.

    CUPTI's activity API is process wide: one tracer runs at a time.  Buffers
    are bounded (``max_buffers`` of ``buffer_bytes`` each handed to CUPTI at
    once; decoded rows at most ``max_rows`` between flushes); what does not fit
    is dropped and counted in ``dropped_records``.

    Parameters
    ----------
    kinds : iterable of ActivityKind
        What to record; :data:`DEFAULT_KINDS` by default.
    buffer_bytes : int
        Size of one activity buffer (multiple of 8, at least 1024).
    max_buffers : int
        Buffers CUPTI may hold at once.
    max_rows : int
        Decoded rows held between two flushes.
    skip_apis : iterable of str, optional
        Runtime (``cuda...``) and driver (``cu...``) API names whose records
        CUPTI should not make; :data:`DEFAULT_SKIPPED_APIS` by default, ``()``
        for every call.  A name this CUPTI does not know raises ``ValueError``
        when tracing starts (names in the default list are skipped where known).

    Examples
    --------
    >>> tracer = CuptiTracer()                  # doctest: +SKIP
    >>> with tracer:                            # doctest: +SKIP
    ...     train_step()
    >>> tracer.records["start_ns"]              # doctest: +SKIP
    """

    def __init__(self, kinds=DEFAULT_KINDS, buffer_bytes: int = 8 << 20, max_buffers: int = 16,
                 max_rows: int = 50_000_000, skip_apis=None):
        self.kinds = tuple(ActivityKind(k) for k in kinds)
        self.skip_apis = tuple(DEFAULT_SKIPPED_APIS if skip_apis is None else skip_apis)
        self._strict_skips = skip_apis is not None
        if buffer_bytes < 1024 or buffer_bytes % 8:
            raise ValueError("buffer_bytes must be a multiple of 8 and at least 1024")
        if max_buffers < 1 or max_rows < 0:
            raise ValueError("max_buffers must be >= 1 and max_rows >= 0")
        self.buffer_bytes = int(buffer_bytes)
        self.max_buffers = int(max_buffers)
        self.max_rows = int(max_rows)
        self.records: ActivityRecords | None = None

    @property
    def active(self) -> bool:
        """Whether CUPTI tracing is running in this process."""
        ext, _ = load_extension()
        return bool(ext is not None and ext.is_active())

    def start(self) -> None:
        """Start recording.

        Raises
        ------
        CuptiUnavailableError
            No extension, no driver or no device; the message says which.
        CuptiStateError
            Tracing already runs in this process.
        CuptiError
            CUPTI refused to enable a kind.
        """
        global _atexit_registered
        ext = _require_extension()
        runtime_off, driver_off = _skipped_cbids(ext, self.skip_apis, self._strict_skips)
        with _translated(ext):
            ext.start([int(k) for k in self.kinds], self.buffer_bytes, self.max_buffers,
                      self.max_rows, runtime_off, driver_off)
        if not _atexit_registered:
            atexit.register(_shutdown_at_exit)
            _atexit_registered = True

    def flush(self) -> ActivityRecords:
        """Records completed so far; tracing goes on."""
        ext = _require_extension()
        with _translated(ext):
            raw = ext.flush()
        return ActivityRecords._from_raw(raw, ext.COLUMNS)

    def stop(self) -> ActivityRecords:
        """Stop recording and return the records since the last flush."""
        ext = _require_extension()
        with _translated(ext):
            raw = ext.stop()
        self.records = ActivityRecords._from_raw(raw, ext.COLUMNS)
        return self.records

    def __enter__(self) -> "CuptiTracer":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def timestamp_ns() -> int:
    """CUPTI's current timestamp: the clock its activity records are stamped with."""
    ext = _require_extension()
    with _translated(ext):
        return int(ext.timestamp_ns())


def demangle(name: str) -> str:
    """A kernel's C++ name as Kineto shows it (demangled); unchanged if not mangled.

    Examples
    --------
    >>> demangle("_Z6kernelPfi") if load_extension()[0] else "kernel(float*, int)"
    'kernel(float*, int)'
    >>> demangle("sm80_xmma_gemm_f32f32")
    'sm80_xmma_gemm_f32f32'
    """
    ext, _ = load_extension()
    return name if ext is None else ext.demangle(name)


def _skipped_cbids(ext, names, strict: bool) -> tuple:
    """(runtime cbids, driver cbids) of ``names``; unknown names raise ValueError when ``strict``."""
    runtime = [n for n in names if n.startswith("cuda")]
    driver = [n for n in names if not n.startswith("cuda")]
    out = (list(ext.api_cbids(runtime, False)), list(ext.api_cbids(driver, True)))
    if strict:
        known = {ext.api_name(c, False) for c in out[0]} | {ext.api_name(c, True) for c in out[1]}
        unknown = sorted(set(names) - known)
        if unknown:
            raise ValueError(f"unknown CUDA runtime/driver API name(s) to skip: {', '.join(unknown)}")
    return out


def push_external_correlation_id(external_id: int,
                                 kind: ExternalKind = ExternalKind.CUSTOM0) -> None:
    """Tag the calling thread's next CUDA API calls with ``external_id``."""
    ext = _require_extension()
    with _translated(ext):
        ext.push_external_correlation_id(int(kind), int(external_id))


def pop_external_correlation_id(kind: ExternalKind = ExternalKind.CUSTOM0) -> int:
    """Undo the last push of ``kind`` on this thread; returns the id popped."""
    ext = _require_extension()
    with _translated(ext):
        return int(ext.pop_external_correlation_id(int(kind)))


@contextlib.contextmanager
def external_correlation(external_id: int,
                         kind: ExternalKind = ExternalKind.CUSTOM0) -> Iterator[None]:
    """Context manager: push ``external_id`` on entry, pop it on exit."""
    push_external_correlation_id(external_id, kind)
    try:
        yield
    finally:
        pop_external_correlation_id(kind)


_EXPORTED = ("attach_external_ids", "CuptiKernelCollector", "make_collector")


def __getattr__(name: str):
    """The names of :mod:`daydream.cupti_export`, imported on first use (it imports this module)."""
    if name in _EXPORTED:
        from . import cupti_export
        return getattr(cupti_export, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
