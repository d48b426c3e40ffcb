"""daydream.heapmode: operators re-run by what-ifs time without page faults, and the process's
own malloc settings come back afterwards."""
import os
import subprocess
import sys

import numpy as np
import pytest

from daydream import heapmode
from daydream.heapmode import GLIBC_DEFAULTS, STEADY_MALLOC, is_steady, steady_heap

glibc = pytest.mark.skipif(heapmode._mallopt() is None, reason="needs glibc's mallopt")


def test_steady_settings_while_the_block_runs_and_the_process_s_own_after(monkeypatch):
    calls = []
    mallopt = lambda param, value: calls.append((param, value))    # noqa: E731
    monkeypatch.setenv("MALLOC_TOP_PAD_", "4096")                    # the user's own setting
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "lots")             # glibc would ignore it too
    with steady_heap(mallopt):
        with steady_heap(mallopt):                                    # nested: set once
            assert is_steady()
        assert is_steady() and len(calls) == 3
    assert not is_steady()
    assert dict(calls[:3]) == {-3: 32 * 2**20, -1: 2**31 - 1, -2: 64 * 2**20}
    assert dict(calls[3:]) == {-1: GLIBC_DEFAULTS["MALLOC_TRIM_THRESHOLD_"], -2: 4096,
                               -3: GLIBC_DEFAULTS["MALLOC_MMAP_THRESHOLD_"]}
    assert set(STEADY_MALLOC) == set(GLIBC_DEFAULTS)


_FAULTS = """
import ctypes, ctypes.util, resource
from daydream.heapmode import steady_heap
libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]

def faults_touching(nbytes, times):
    # minor page faults of `times` malloc + touch + free of `nbytes`
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(times):
        p = libc.malloc(nbytes)
        ctypes.memset(p, 1, nbytes)
        libc.free(p)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0

with steady_heap():
    faults_touching(8 << 20, 1)                       # the heap grows once
    inside = faults_touching(8 << 20, 10)
after = faults_touching(8 << 20, 10)                  # glibc's defaults: mmap per block
print(inside, after)
"""


@glibc
def test_a_freed_block_is_reused_inside_and_handed_back_after():
    """In a fresh process: the malloc state a test process is left in by the tests before it
    (their libraries and allocations) is not glibc's default, which this is about."""
    env = {k: v for k, v in os.environ.items() if k not in GLIBC_DEFAULTS}
    out = subprocess.run([sys.executable, "-c", _FAULTS], capture_output=True, text=True, env=env, check=True)
    inside, after = map(int, out.stdout.split())
    pages = (8 << 20) // 4096
    assert inside < pages and after > 5 * pages


def test_what_ifs_re_run_ops_in_a_steady_heap(monkeypatch):
    from types import SimpleNamespace

    from optimizations import _layers

    seen = []
    ctx = SimpleNamespace(device=SimpleNamespace(kind="cpu"), note=lambda m: None)
    monkeypatch.setattr(_layers, "signatures_of", lambda c, t: {int(x): "sig" for x in t})
    got = _layers.rerun_ratios(ctx, np.array([4]), lambda sigs: seen.append(is_steady()) or {"sig": 2.0}, "{n}")
    assert got == {4: 2.0} and seen == [True] and not is_steady()
