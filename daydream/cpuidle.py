"""Keep the CPUs out of deep idle states while measuring (Linux PM QoS).

On a virtual machine an idle virtual CPU halts, and waking it goes through the
host's scheduler: on the 2-core VM this project is developed on, a blocked
rank woke milliseconds after its data arrived (gloo 64 KiB round trip between
two processes pinned to a core each: median 4.6 ms, max 13.8; with idle CPUs
polling: median 0.47, max 0.68; ``python benchmarks/gloo_p2p.py --kb 64
--busy-ms 10 --pin``).  One-process runs never block and never see it, so
every prediction of a multi-process job came out low.  Real clusters (bare
metal, GPUs) do not pay this, so measurements are taken without it.

Writing 0 to ``/dev/cpu_dma_latency`` and keeping the file open asks the
kernel for a 0 us wake-up latency: the cpuidle governor then only polls.
This is the mechanism of tuned's ``latency-performance`` profile and of
cyclictest; it needs root and is released when the file is closed.  Only a
cpuidle driver's governor reads the request: where the kernel has none
(``/sys/devices/system/cpu/cpuidle/current_driver`` reads ``none``, as in the
Firecracker guest of session 45-46) idle CPUs halt whatever it asks, and
:func:`polling_idle` says so.
"""
from __future__ import annotations

import contextlib
import os
import struct

__all__ = ["polling_idle", "cpuidle_driver", "no_polling_note", "PM_QOS_PATH", "CPUIDLE_DRIVER_PATH"]

PM_QOS_PATH = "/dev/cpu_dma_latency"
CPUIDLE_DRIVER_PATH = "/sys/devices/system/cpu/cpuidle/current_driver"


def cpuidle_driver(path: str = CPUIDLE_DRIVER_PATH) -> str | None:
    """The kernel's cpuidle driver (``"none"`` where it has none), or None where that cannot be read.

    >>> cpuidle_driver("/nonexistent/current_driver") is None
    True
    """
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def no_polling_note(driver_path: str = CPUIDLE_DRIVER_PATH) -> str:
    """Why :func:`polling_idle` could not make idle CPUs poll, as a one-line note for the user.

    >>> no_polling_note("/nonexistent/current_driver").startswith("note: no cpuidle driver")
    True
    """
    drv = cpuidle_driver(driver_path)
    if drv in (None, "none"):
        return (f"note: no cpuidle driver here ({driver_path}: {drv or 'unreadable'}): idle CPUs halt whatever "
                "PM QoS asks, and multi-process runs wake late on a virtual machine")
    return (f"note: could not hold {PM_QOS_PATH} at 0 (needs root on Linux): idle CPUs halt, and "
            "multi-process runs wake late on a virtual machine")


@contextlib.contextmanager
def polling_idle(enabled: bool = True, path: str = PM_QOS_PATH, driver_path: str = CPUIDLE_DRIVER_PATH):
    """Hold the CPU wake-up latency at 0 us for the duration of the block.

    Yields True when the request took effect, False when it could not be made
    (not Linux, not root, ``enabled=False``) or has no effect (no cpuidle
    driver: :func:`cpuidle_driver` ``"none"`` or unreadable): measuring goes on
    either way.

    >>> with polling_idle(enabled=False) as held:
    ...     held
    False
    """
    fd = None
    if enabled:
        try:
            fd = os.open(path, os.O_WRONLY)
            os.write(fd, struct.pack("i", 0))
        except OSError:
            if fd is not None:
                os.close(fd)
            fd = None
    try:
        yield fd is not None and cpuidle_driver(driver_path) not in (None, "none")
    finally:
        if fd is not None:
            os.close(fd)
