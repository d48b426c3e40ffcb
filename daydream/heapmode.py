"""glibc's heap held steady while daydream times operators.

A what-if that re-runs operators on this machine (``hfta``, ``device``,
``batch-size``, ``amp``, ``fusion``, the co-run rate) times ops that
allocate their outputs on every call.  Under glibc's default settings a
fresh process hands large freed blocks back to the kernel (``mmap`` above a
threshold that only grows as blocks are freed, and a trimmed heap top) and
faults them in again on the next call, so a prediction can time page faults
as well as the ops, and more of them on the side with the larger outputs.
Seen once (2026-11-24, one MLP trace, ``hfta:models=8``, fresh processes in
the same minutes): 49.8 and 49.9 ms in the first two calls of a process
under glibc's defaults (216,000 and 169,000 minor page faults), 47.0 and
47.2 ms with the settings below (65,000 and 6,400, most of them loading).
Minutes later the default settings no longer faulted in those calls
and the two read alike (46-48 ms, four processes alternating): whether the
faults come depends on the state of the machine's memory, and the settings
take that out of the measurement.  The real runs ``daydream validate``
measures, and the device profile's calibration loops, do not fault
(:data:`STEADY_MALLOC`), so the re-runs must not either.

:func:`steady_heap` sets those settings with ``mallopt`` for the duration of
a block and sets the process's own back afterwards (its ``MALLOC_*``
environment, else glibc's documented defaults), so a user's process keeps
giving memory back once the what-if is done.  Off glibc it does nothing.
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os

__all__ = ["STEADY_MALLOC", "GLIBC_DEFAULTS", "steady_heap", "is_steady"]

#: glibc malloc settings for every measured run: keep freed memory in the
#: process (no mmap per large block, no trimming).  By default glibc hands
#: the blocks of one iteration back to the kernel and faults them in again in
#: the next: ~800 page faults per iteration of the bundled MLP, a third of its
#: time on this VM and the main source of run-to-run spread
#: (``/usr/bin/time -f %R`` over 100 vs 400 steps).  The calibration loops,
#: which reuse their buffers, never fault: these settings measure the
#: workloads the way the device profile measured the machine.
STEADY_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(32 * 2**20), "MALLOC_TRIM_THRESHOLD_": str(2**40),
                 "MALLOC_TOP_PAD_": str(64 * 2**20)}
#: ``mallopt`` parameter of each variable (glibc's ``malloc.h``).
_PARAM = {"MALLOC_TRIM_THRESHOLD_": -1, "MALLOC_TOP_PAD_": -2, "MALLOC_MMAP_THRESHOLD_": -3}
#: glibc's documented defaults (mallopt(3)), set back where the environment names none.
GLIBC_DEFAULTS = {"MALLOC_TRIM_THRESHOLD_": 128 * 1024, "MALLOC_TOP_PAD_": 128 * 1024,
                  "MALLOC_MMAP_THRESHOLD_": 128 * 1024}
#: ``mallopt`` takes an int.
_INT_MAX = 2**31 - 1
_depth = 0


@functools.lru_cache(maxsize=None)
def _mallopt():
    try:
        fn = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return fn


def _set(mallopt, values: dict) -> None:
    for name, value in values.items():
        try:
            value = int(value)
        except ValueError:       # an environment value glibc would not take either
            value = GLIBC_DEFAULTS[name]
        mallopt(_PARAM[name], min(value, _INT_MAX))


def is_steady() -> bool:
    """Whether a :func:`steady_heap` block is running."""
    return _depth > 0


@contextlib.contextmanager
def steady_heap(mallopt=None):
    """While the block runs, glibc keeps freed memory in the process (:data:`STEADY_MALLOC`);
    afterwards the process's own settings are set back.  Blocks may nest; off glibc, nothing.

    >>> with steady_heap():
    ...     is_steady()
    True
    >>> is_steady()
    False
    """
    global _depth
    mallopt = mallopt or _mallopt()
    outer = _depth == 0 and mallopt is not None
    if outer:
        _set(mallopt, STEADY_MALLOC)
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if outer:
            _set(mallopt, {k: os.environ.get(k, GLIBC_DEFAULTS[k]) for k in _PARAM})
