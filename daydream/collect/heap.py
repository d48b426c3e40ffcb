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
all inside convolutions (``benchmarks/heap_growth.py`` measures it).

:class:`HeapReserve` takes the page faults out of the recorded iterations:
before recording it allocates a block of already-touched memory below a
small fence chunk and frees it, so it stays resident (glibc only returns
memory at the top of the heap) and heap growth lands there instead of on
fresh pages.  It is sized from what the program's heap holds already,
topped up between iterations (outside the recorded ranges) when the heap
still grew, and given back when tracing stops.  Nothing of the program's
own allocations changes: no malloc parameter is set, and buffers larger
than glibc's mmap threshold are mapped as they would be untraced.

glibc only (``mallinfo2``, glibc 2.33+); elsewhere :class:`HeapReserve`
does nothing and says why in :attr:`HeapReserve.note`.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os

__all__ = ["HeapReserve", "CHUNK_BYTES", "MAX_FRACTION_OF_AVAILABLE", "MAX_BYTES", "heap_bytes"]

#: allocation unit of the reserve: below glibc's smallest mmap threshold
#: (128 KiB), so every chunk comes from the heap whatever the threshold is now
CHUNK_BYTES = 64 * 1024
#: the reserve never exceeds this share of the machine's available memory ...
MAX_FRACTION_OF_AVAILABLE = 1 / 8
#: ... nor this many bytes (a profiler should not double a large host heap)
MAX_BYTES = 2 * 2**30
#: a top-up covers the remaining iterations at the growth rate seen so far, times this
TOP_UP_MARGIN = 1.25


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
    """Resident free memory for the heap growth of the recorded iterations.

    Call :meth:`start` on the training thread before the first recorded
    iteration, :meth:`boundary` at each recorded iteration boundary and
    :meth:`top_up` when it asks (outside the recorded ranges: a top-up
    touches pages), :meth:`release` when done.

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
    >>> r.release()
    """

    def __init__(self, iterations: int, limit_bytes: int | None = None):
        self.iterations = iterations
        self.limit_bytes = limit_bytes if limit_bytes is not None else int(
            min(MAX_BYTES, MAX_FRACTION_OF_AVAILABLE * _available_bytes()))
        self.reserved_bytes = 0
        self.top_ups = 0
        self._libc, self.note = _libc()
        self._fences: list[int] = []
        self._done = 0          # recorded iterations seen so far
        self._heap0 = 0         # heap bytes below the top chunk after the last reserve

    def _below_top(self) -> int:
        """Heap bytes below the top chunk: grows when memory is taken from the top.

        The top chunk may hold pages never touched (glibc's ``M_TOP_PAD``
        extends the heap ahead of need), so heap size alone misses growth.
        """
        info = self._libc.mallinfo2()
        return int(info.arena - info.keepcost)

    def _reserve(self, nbytes: int) -> None:
        """Take ``nbytes`` from the heap's top, touch it, fence it off the top, free it.

        Chunks are taken as malloc gives them: free holes lower in the heap
        first (resident already: touching them costs no fault), then the
        top, until ``nbytes`` came from the top.
        """
        nbytes = min(nbytes, self.limit_bytes - self.reserved_bytes - CHUNK_BYTES)
        below = self._below_top()
        chunks: list[int] = []
        while (left := nbytes - (self._below_top() - below)) >= CHUNK_BYTES:
            batch = [self._libc.malloc(CHUNK_BYTES) for _ in range(min(16, left // CHUNK_BYTES))]
            chunks += batch
            if not all(batch):
                for c in chunks:
                    self._libc.free(c)
                self.note = "heap reserve: malloc failed, reserve off"
                return
        if not chunks:
            return
        for c in chunks:
            ctypes.memset(c, 0, CHUNK_BYTES)
        self._fences.append(self._libc.malloc(CHUNK_BYTES))   # keeps the freed block off the top
        for c in chunks:
            self._libc.free(c)
        self.reserved_bytes += max(0, self._below_top() - below)

    def start(self, nbytes: int | None = None) -> None:
        """Reserve ``nbytes`` (default: as much as the heap holds now; bounded by the limit)."""
        if self._libc is None:
            return
        self._reserve(int(self._libc.mallinfo2().arena) if nbytes is None else nbytes)
        self._heap0 = self._below_top()

    def boundary(self) -> int:
        """One recorded iteration done: bytes to :meth:`top_up` now (0: none).

        Non-zero when the heap still grew (the reserve ran out): the
        remaining iterations at the growth rate seen so far.
        """
        if self._libc is None:
            return 0
        self._done += 1
        grown = self._below_top() - self._heap0
        left = self.iterations - self._done
        if grown <= 0 or left <= 0 or self.reserved_bytes >= self.limit_bytes:
            return 0
        return int((self.reserved_bytes + grown) / self._done * left * TOP_UP_MARGIN)

    def top_up(self, nbytes: int) -> None:
        """Reserve ``nbytes`` more (between iterations: it touches every page)."""
        self._reserve(nbytes)
        self._heap0 = self._below_top()
        self.top_ups += 1

    def release(self) -> None:
        """Free the fences: the reserve rejoins the heap's top (glibc may trim it). Idempotent."""
        while self._fences and self._libc is not None:
            self._libc.free(self._fences.pop())

    def as_metadata(self) -> dict:
        """What the trace file records about the reserve."""
        return {"reserved_bytes": self.reserved_bytes, "top_ups": self.top_ups,
                **({"note": self.note} if self.note else {})}
