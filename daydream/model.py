"""Data model shared by every pipeline stage: categories, lanes, traces.

Times are integer nanoseconds (``*_ns``), sizes are bytes (``*_bytes``).  A
:class:`RankTrace` is a columnar table of events (one numpy array per field)
plus metadata; a :class:`Trace` is the list of ranks of one job.

Examples
--------
>>> from daydream.model import Phase, EventKind
>>> Phase.BACKWARD.label
'backward'
>>> EventKind.KERNEL.is_gpu
True
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np

#: Python 3.11's Enum looks up missing class attributes through a slow
#: ``__getattr__``; numpy asks every operand for ``__array_ufunc__`` on each
#: scalar comparison (``kind_col[t] == EventKind.KERNEL``), which made such
#: loops ~3x slower.  ndarray's own ``__array_ufunc__`` means "no override"
#: to numpy, so declaring it changes nothing but the speed.
_NUMPY_DEFAULT_UFUNC = np.ndarray.__array_ufunc__

__all__ = [
    "EventKind",
    "Phase",
    "LaneKind",
    "Lane",
    "StringTable",
    "EVENT_COLUMNS",
    "RankTrace",
    "Trace",
]


class EventKind(enum.IntEnum):
    """What an event is.  Values are stored in int8 columns."""

    __array_ufunc__ = _NUMPY_DEFAULT_UFUNC  # see _NUMPY_DEFAULT_UFUNC

    CPU_OP = 0
    RUNTIME = 1
    KERNEL = 2
    MEMCPY = 3
    MEMSET = 4
    SYNC = 5
    COLLECTIVE = 6
    ANNOTATION = 7
    MARKER = 8

    @property
    def label(self) -> str:
        return self.name.lower()

    @property
    def is_gpu(self) -> bool:
        return self in (EventKind.KERNEL, EventKind.MEMCPY, EventKind.MEMSET, EventKind.COLLECTIVE)


class Phase(enum.IntEnum):
    """Training phase a task belongs to."""

    __array_ufunc__ = _NUMPY_DEFAULT_UFUNC  # see _NUMPY_DEFAULT_UFUNC

    FORWARD = 0
    BACKWARD = 1
    OPTIMIZER = 2
    DATALOADER = 3
    OTHER = 4

    @property
    def label(self) -> str:
        return self.name.lower()


class LaneKind(enum.IntEnum):
    """Kind of serial resource a lane models."""

    __array_ufunc__ = _NUMPY_DEFAULT_UFUNC  # see _NUMPY_DEFAULT_UFUNC

    CPU_THREAD = 0
    GPU_STREAM = 1
    COMM = 2
    COPY = 3

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass(frozen=True)
class Lane:
    """One serial resource: a CPU thread, a GPU stream, a channel.

    ``pid`` and ``tid`` are the Chrome-trace ids the lane came from (for a GPU
    stream: device and stream), so exported timelines keep the input's lanes.
    """

    rank: int
    kind: LaneKind
    pid: int | str
    tid: int | str
    label: str = ""
    device: int = -1


class StringTable:
    """Interning table: strings to dense int ids (a symbol table).

    >>> t = StringTable(); t.intern("a"), t.intern("b"), t.intern("a")
    (0, 1, 0)
    >>> t[1]
    'b'
    """

    __slots__ = ("_ids", "strings")

    def __init__(self, strings=()):
        self.strings: list[str] = []
        self._ids: dict[str, int] = {}
        for s in strings:
            self.intern(s)

    def intern(self, s: str) -> int:
        i = self._ids.get(s)
        if i is None:
            i = self._ids[s] = len(self.strings)
            self.strings.append(s)
        return i

    def get(self, s: str, default: int = -1) -> int:
        return self._ids.get(s, default)

    def __getitem__(self, i: int) -> str:
        return self.strings[i]

    def __len__(self) -> int:
        return len(self.strings)


#: Columns of a :class:`RankTrace` event table and their dtypes.
EVENT_COLUMNS: dict[str, type] = {
    "kind": np.int8,       # EventKind
    "name": np.int32,      # index into RankTrace.names
    "lane": np.int32,      # index into RankTrace.lanes
    "start_ns": np.int64,
    "dur_ns": np.int64,
    "corr": np.int64,      # CUDA correlation id, -1 if none
    "ext": np.int64,       # external id (CPU op <-> runtime), -1 if none
    "bytes": np.int64,     # bytes moved (memcpy/memset/collective) or CPU op input bytes, 0 if unknown
    "flops": np.int64,     # arithmetic of matmul/conv ops (shapes or with_flops), 0 otherwise
    "layer": np.int32,     # index into RankTrace.layers, -1 if unmapped
    "phase": np.int8,      # Phase
    "iteration": np.int32,  # iteration index, -1 outside every iteration
}


@dataclass
class RankTrace:
    """Events of one rank as columns, plus what the file says about the job.

    Attributes
    ----------
    source : str
        File (or ``archive.tar.gz:member``) the events came from.
    rank : int
        Rank of this process in the job.
    cols : dict of str to numpy.ndarray
        Event table, see :data:`EVENT_COLUMNS`.  Sorted by ``start_ns``.
    names, layers : StringTable
        Event names and layer (module path) names.
    lanes : list of Lane
    boundaries_ns : numpy.ndarray
        Iteration boundaries, ``n + 1`` times for ``n`` iterations.
    iteration_names : list of str
    main_lane : int
        The CPU lane that carries the iteration markers.
    repairs : dict of str to int
        Problems repaired while loading, with counts.
    meta : dict
        Everything else: device properties, distributed info, the
        ``"daydream"`` object of traces collected by daydream.
    """

    source: str
    rank: int
    cols: dict
    names: StringTable
    layers: StringTable
    lanes: list
    boundaries_ns: np.ndarray
    iteration_names: list
    main_lane: int
    repairs: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)
    fwdbwd: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))
    #: Call signatures of compute ops (``cols["sig"]`` indexes it), to re-measure them.
    signatures: StringTable = field(default_factory=StringTable)

    def __len__(self) -> int:
        return len(self.cols["kind"])

    @property
    def n_iterations(self) -> int:
        return max(len(self.boundaries_ns) - 1, 0)

    def iteration_times_ns(self) -> np.ndarray:
        """Measured duration of each iteration."""
        return np.diff(self.boundaries_ns)

    def world_size(self) -> int:
        return int((self.meta.get("distributedInfo") or {}).get("world_size", 1) or 1)


@dataclass
class Trace:
    """All ranks of one job, ordered by rank."""

    ranks: list

    def __iter__(self):
        return iter(self.ranks)

    def __len__(self) -> int:
        return len(self.ranks)

    @property
    def sources(self) -> list:
        return [r.source for r in self.ranks]
