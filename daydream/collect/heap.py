"""A pre-faulted heap reserve: the profiler's records must not slow the ops they record.

Kineto keeps every recorded op (name, shapes, timestamps) in memory until the
trace stops.  Those long-lived allocations land in the holes that a training
step's freed activations leave in glibc's heap, so the next step's
activations no longer fit where they were and glibc extends the heap:
every recorded iteration then writes its activations to pages the process
never touched, and pays a page fault per 4 KiB page.  On the bundled CNN
(batch 16, shapes recorded) the heap grew 9 MiB an iteration while the
records themselves grew 0.4 MiB; at 4.5 us a fault on the 2-vCPU VM of
the project's CI that is ~2,300 faults and ~10 ms added to a 40 ms step,
all inside convolutions (``python benchmarks/heap_growth.py`` measures it).

:class:`HeapReserve` takes the page faults out of the recorded iterations:
before recording it takes a block of memory from the top of the heap,
touches it and frees it, so the heap's top is resident and the growth lands
on touched pages.  It is sized from what the program's heap holds already
and topped up between iterations (outside the recorded ranges) when the
remaining iterations, each growing as much as the last one did or by the mean
so far where that is more, would outrun it (:func:`top_up_bytes`).  Nothing
of the program's own allocations changes: no malloc parameter is set, buffers above glibc's mmap
threshold are mapped as they are untraced, and where the program's malloc
gives the heap's top back (glibc's default trim threshold) the reserve
would be given back too, so it turns itself off: that program refaults its
buffers every iteration untraced as well.

glibc only (``mallinfo2``, glibc 2.33+); elsewhere :class:`HeapReserve`
does nothing and says why in :attr:`HeapReserve.note`.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os

__all__ = ["HeapReserve", "CHUNK_BYTES", "MAX_FRACTION_OF_AVAILABLE", "MAX_BYTES", "TOP_UP_MARGIN", "heap_bytes", "top_up_bytes"]

#: allocation unit of the reserve: below glibc's smallest mmap threshold
#: (128 KiB), so every chunk comes from the heap whatever the threshold is now
CHUNK_BYTES = 64 * 1024
#: What one such chunk takes from the top: glibc's chunk header on 64-bit platforms.
CHUNK_FOOTPRINT = CHUNK_BYTES + 16
#: the reserve never exceeds this share of the machine's available memory ...
MAX_FRACTION_OF_AVAILABLE = 1 / 8
#: ... nor this many bytes (a profiler should not double a large host heap)
MAX_BYTES = 2 * 2**30
#: when the remaining iterations at the growth rate seen so far would outrun the reserve,
#: the top-up covers them with this margin (:func:`top_up_bytes`)
TOP_UP_MARGIN = 1.25


def top_up_bytes(taken_bytes, reserved_bytes: int, iterations: int) -> int:
    """Bytes to add to a reserve of ``reserved_bytes`` after ``len(taken_bytes)`` of ``iterations``.

    ``taken_bytes[i]``: what the heap had taken from its top since the reserve was made, at the end
    of recorded iteration ``i``.  The remaining iterations are expected to take what the last one
    took, or the mean so far where that is more: a heap whose freed buffers the records have
    split grows slowly at first, then by a whole iteration's buffers every iteration (the 8-copy
    HFTA MLP: 8 MiB an iteration for ten iterations, then 32).  At the mean alone, the top-ups
    chased that growth and it faulted page by page (``benchmarks/trace_faults.py``).

    Examples
    --------
    >>> MiB = 1 << 20
    >>> top_up_bytes([8 * MiB, 16 * MiB], 100 * MiB, 10)   # 8 MiB an iteration, 84 MiB left: enough
    0
    >>> top_up_bytes([8 * MiB, 40 * MiB], 100 * MiB, 10) // MiB   # 32 MiB an iteration from now
    260
    """
    done, taken = len(taken_bytes), taken_bytes[-1]
    step = taken - (taken_bytes[-2] if done > 1 else 0)
    ahead = max(taken / done, step) * (iterations - done)
    resident = reserved_bytes - taken                     # still free at the top
    if ahead <= resident:
        return 0
    return max(int(ahead * TOP_UP_MARGIN - resident), CHUNK_BYTES)


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                 "fsmblks", "uordblks", "fordblks", "keepcost")]


def _libc():
    """glibc with ``mallinfo2``, or None and why not."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallinfo2.restype = _MallInfo2
    except (OSError, AttributeError):
        return None, "no glibc with mallinfo2 (glibc 2.33+): heap reserve off"
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.sbrk.restype = ctypes.c_void_p
    libc.sbrk.argtypes = [ctypes.c_ssize_t]
    return libc, ""


def heap_bytes() -> int | None:
    """Bytes in glibc's heaps (``mallinfo2().arena``), or None off glibc.

    Examples
    --------
    >>> n = heap_bytes()
    >>> n is None or n > 0
    True
    """
    libc, _ = _libc()
    return None if libc is None else int(libc.mallinfo2().arena)


def _available_bytes() -> int:
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))


class HeapReserve:
    """Resident free memory at the heap's top for the growth of the recorded iterations.

    Call :meth:`start` on the training thread before the first recorded
    iteration, :meth:`boundary` at each recorded iteration boundary and
    :meth:`top_up` when it asks (outside the recorded ranges: a top-up
    touches pages).

    The reserve is memory taken from the top of the heap, touched and freed
    again: it stays part of the top chunk, resident, as long as the
    program's malloc keeps its top (``M_TRIM_THRESHOLD`` above it, as under
    ``daydream validate``'s :data:`daydream.heapmode.STEADY_MALLOC`).  Where
    glibc gives the top back (its default: a dynamic threshold of a few
    MiB) the reserve is returned at once; the untraced program then refaults
    its own buffers every iteration as well, and the reserve turns itself
    off (:attr:`note` says so) rather than keep memory the program would not.

    Parameters
    ----------
    iterations : int
        Iterations to be recorded.
    limit_bytes : int, optional
        Most bytes ever reserved; default the smaller of :data:`MAX_BYTES`
        and :data:`MAX_FRACTION_OF_AVAILABLE` of available memory.

    Examples
    --------
    >>> r = HeapReserve(iterations=3, limit_bytes=1 << 20)
    >>> r.start()
    >>> r.reserved_bytes <= 1 << 20
    True
    """

    def __init__(self, iterations: int, limit_bytes: int | None = None):
        self.iterations = iterations
        self.limit_bytes = limit_bytes if limit_bytes is not None else int(
            min(MAX_BYTES, MAX_FRACTION_OF_AVAILABLE * _available_bytes()))
        self.reserved_bytes = 0   # resident bytes at the top: the reserve's end over where the top started
        self.top_ups = 0
        self._libc, self.note = _libc()
        self._done = 0            # recorded iterations seen so far
        self._below0 = 0          # where the top chunk started at :meth:`start` (an address)
        self._end = 0             # where the resident part of the top ends (an address)
        #: per recorded iteration, at its end: bytes taken from the top since :meth:`start`,
        #: bytes in mmapped chunks, bytes in all arenas (where a page-fault storm came from)
        self.history: dict[str, list[int]] = {"top_taken_bytes": [], "mmapped_bytes": [], "arena_bytes": []}

    def _brk(self) -> int:
        return int(self._libc.sbrk(0) or 0)

    def _below_top(self) -> int:
        """Where the main heap's top chunk starts: moves up as memory is taken from the top.

        From the program break and the top chunk's size, so other threads'
        arenas (a collective library's helper threads) do not count.
        """
        return self._brk() - int(self._libc.mallinfo2().keepcost)

    def _reserve(self, nbytes: int) -> None:
        """Make ``nbytes`` more of the heap's top resident, past the reserve's end (or past the
        top's start, where the program's growth has gone beyond that end).

        Chunks come as malloc gives them (free holes lower in the heap first, then the top)
        until the top's start reaches the new end; all are touched (those from holes or from the
        reserve at no fault), then freed, and rejoin the top.  (Until session 62 a top-up took
        ``nbytes`` from the top's start and added them to the count: it touched again the part
        of the reserve the program had not used yet, counted that part twice, and the reserve
        ran out before its count said: the transformer's baseline traces faulted 20-34 k times.)
        """
        below = self._below_top()
        end = min(max(self._end, below) + nbytes, self._below0 + self.limit_bytes)
        chunks: list[int] = []
        while (left := end - self._below_top()) >= CHUNK_FOOTPRINT:   # never past the end
            batch = [self._libc.malloc(CHUNK_BYTES) for _ in range(min(16, left // CHUNK_FOOTPRINT))]
            chunks += batch
            if not all(batch):
                break
        if not chunks:
            return
        top = self._below_top()
        for c in chunks:
            if c:                                # None: malloc failed, the rest is freed below
                ctypes.memset(c, 0, CHUNK_BYTES)
        brk = self._brk()
        for c in chunks:
            self._libc.free(c)
        if self._brk() < brk - (top - below) // 2:      # the break moved down: glibc trimmed the top
            self._libc = None
            self.note = ("glibc gives the heap's top back (M_TRIM_THRESHOLD): the program refaults "
                         "its buffers untraced as well; heap reserve off")
            return
        self._end = max(self._end, top)
        self.reserved_bytes = self._end - self._below0

    def start(self, nbytes: int | None = None) -> None:
        """Reserve ``nbytes`` (default: as much as the heap holds now; bounded by the limit)."""
        if self._libc is None:
            return
        self._below0 = self._end = self._below_top()
        self._reserve(int(self._libc.mallinfo2().arena) if nbytes is None else nbytes)

    def boundary(self) -> int:
        """One recorded iteration done: bytes to :meth:`top_up` now (0: none; see :func:`top_up_bytes`)."""
        if self._libc is None:
            return 0
        self._done += 1
        info = self._libc.mallinfo2()
        taken = self._brk() - int(info.keepcost) - self._below0
        for key, value in zip(self.history, (taken, info.hblkhd, info.arena)):
            self.history[key].append(int(value))
        if self.reserved_bytes >= self.limit_bytes:
            return 0
        return top_up_bytes(self.history["top_taken_bytes"], self.reserved_bytes, self.iterations)

    def top_up(self, nbytes: int) -> None:
        """Reserve ``nbytes`` more (between iterations: it touches every page)."""
        if self._libc is None:
            return
        self._reserve(nbytes)
        self.top_ups += 1

    def as_metadata(self) -> dict:
        """What the trace file records about the reserve."""
        return {"reserved_bytes": self.reserved_bytes, "top_ups": self.top_ups,
                **({"note": self.note} if self.note else {}),
                **({k: list(v) for k, v in self.history.items()} if self._done else {})}
