"""Memory needed to load traces, checked before loading rather than swapping.

Parsing JSON into Python objects takes far more memory than the file: about
:data:`BYTES_PER_JSON_BYTE` bytes per byte of (uncompressed) JSON at peak,
measured on Kineto traces (``benchmarks/bench_load.py`` prints the ratio).  The
compiled scanner (:mod:`daydream.loader.fast`) needs
:data:`FAST_BYTES_PER_JSON_BYTE`; where it declines a document, the reference
parse is checked again before it starts (:func:`check_bytes`).
:func:`check_memory` compares that with the memory available and raises a
one-line :class:`~daydream.errors.TraceError` naming the file, the size needed
and the size available.  ``DAYDREAM_MEMORY_CHECK=0`` turns the check off.
"""
from __future__ import annotations

import os
import tarfile

from ..errors import TraceError

__all__ = ["BYTES_PER_JSON_BYTE", "FAST_BYTES_PER_JSON_BYTE", "json_bytes", "needed_bytes", "available_bytes",
           "check_memory", "check_bytes", "format_bytes", "max_workers_for"]

#: Peak bytes of memory per byte of JSON while one file is parsed (measured: ~13 for
#: compact Kineto JSON, ~6 for indented), rounded up.
BYTES_PER_JSON_BYTE = 14
#: The same for the compiled scanner (measured: 1.6 above the interpreter's own for a 124 MB
#: rank: the file's bytes plus the columns), with room to spare.
FAST_BYTES_PER_JSON_BYTE = 3
_DEFLATE_MAX_RATIO = 1032   # deflate cannot compress better than this
_TGZ_RATIO = 12   # typical gzip ratio of Kineto JSON, for archives whose size we cannot read cheaply


def format_bytes(n: float) -> str:
    """Human-readable size.

    >>> format_bytes(3 * 2**30), format_bytes(1536 * 2**10)
    ('3.0 GiB', '1.5 MiB')
    """
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def json_bytes(path: str) -> int:
    """Uncompressed JSON bytes of a trace file (gzip: from its trailer)."""
    size = os.path.getsize(path)
    if path.endswith((".tar.gz", ".tgz")):
        return size * _TGZ_RATIO
    if path.endswith(".tar"):
        try:
            with tarfile.open(path) as tar:
                return sum(m.size for m in tar.getmembers() if m.isfile())
        except (tarfile.TarError, OSError):
            return size
    try:
        with open(path, "rb") as f:
            if f.read(2) != b"\x1f\x8b":
                return size
            f.seek(-4, os.SEEK_END)
            isize = int.from_bytes(f.read(4), "little")   # size mod 2**32
    except OSError:
        return size
    while isize < size:          # wrapped: files over 4 GiB
        isize += 1 << 32
    if isize > size * _DEFLATE_MAX_RATIO:   # not a real trailer (truncated file): guess
        return size * _TGZ_RATIO
    return isize


def needed_bytes(path: str) -> int:
    """Estimated peak memory to parse one trace file (with the compiled scanner where it is used)."""
    from . import fast

    return json_bytes(path) * (FAST_BYTES_PER_JSON_BYTE if fast.enabled() else BYTES_PER_JSON_BYTE)


def available_bytes() -> int | None:
    """Memory this process can still use (MemAvailable, capped by a cgroup limit); None if unknown."""
    avail = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        with open("/sys/fs/cgroup/memory.current") as f:
            current = int(f.read().strip())
        if limit != "max":
            room = int(limit) - current
            avail = room if avail is None else min(avail, room)
    except (OSError, ValueError):
        pass
    return avail


def _enabled() -> bool:
    return os.environ.get("DAYDREAM_MEMORY_CHECK", "1") not in ("0", "false", "no")


def max_workers_for(files, wanted: int) -> int:
    """How many files may be parsed at once without exceeding available memory (>= 1)."""
    avail = available_bytes()
    if not files or avail is None or not _enabled():
        return max(1, wanted)
    biggest = max(needed_bytes(p) for p in files)
    return max(1, min(wanted, avail // max(biggest, 1)))


def check_memory(files, workers: int = 1) -> None:
    """Raise :class:`TraceError` if the ``workers`` largest files cannot be parsed at once.

    Raises
    ------
    TraceError
        Naming the largest file, the memory needed and the memory available.
    """
    avail = available_bytes()
    if not files or avail is None or not _enabled():
        return
    needs = sorted(((needed_bytes(p), p) for p in files), reverse=True)[:max(1, workers)]
    need = sum(n for n, _ in needs)
    if need > avail:
        path = needs[0][1]
        at_once = f" ({len(needs)} files at once)" if len(needs) > 1 else ""
        raise TraceError(path, f"too large for memory: loading needs about {format_bytes(need)}{at_once} "
                               f"for {format_bytes(json_bytes(path))} of JSON, only {format_bytes(avail)} "
                               f"available")


def check_bytes(source: str, json_size: int) -> None:
    """Raise :class:`TraceError` if ``json_size`` bytes of JSON cannot be parsed into Python objects.

    Checked before the reference loader parses a document the compiled scanner declined.
    """
    avail = available_bytes()
    need = json_size * BYTES_PER_JSON_BYTE
    if avail is None or not _enabled() or need <= avail:
        return
    raise TraceError(source, f"too large for memory: loading needs about {format_bytes(need)} for "
                             f"{format_bytes(json_size)} of JSON (the compiled loader declined it), only "
                             f"{format_bytes(avail)} available")

