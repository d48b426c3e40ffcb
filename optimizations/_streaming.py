"""How a memory-bound op's time per byte changes when its bytes grow or shrink.

``hfta`` fuses N copies of an op into one over N times its bytes; ``tensor-parallel``
splits one over T ranks, each streaming 1/T of them.  The calibrated streaming curve is
measured hot (one buffer in a loop), so it runs faster wherever the buffer fits a cache;
in training an op's data is where the ops before it left it, and an op traced below the
curve's rate (its data already out of the caches, or its work per byte the bound) does not
speed up or slow down as the curve does.  The rules, by name (:data:`STREAMING`):

* ``curve``: the curve's ratio from the traced size to the new one;
* ``roofline``: the op runs at the slower of its traced rate and the curve's at the new
  size (compute and data movement overlap): no op streams faster per byte than traced;
* ``additive``: the traced time past the curve's is work per byte that stays, the curve's
  part changes as the curve does (they do not overlap).

A traced rate above the curve's at its own size is not streaming in the op's own time (a
wrapper whose nested ops move the data): every rule then takes the curve's ratio.
"""
from __future__ import annotations

from .base import OptionError

__all__ = ["MOVED_PER_INPUT_BYTE", "STREAMING", "stream_ratio"]

#: Bytes an elementwise op moves per byte of its inputs (a task's ``bytes``): a binary op
#: reads two inputs and writes one output of the same size.  The calibrated bandwidth
#: curve is indexed by bytes moved (``calibrate``: 3 x elements x size for ``a + b``).
MOVED_PER_INPUT_BYTE = 1.5

#: The rules of :func:`stream_ratio`.
STREAMING = ("curve", "roofline", "additive")


def stream_ratio(moved_bytes: float, stream_ns: float, hot_bytes_per_s: float, new_bytes_per_s: float,
                 streaming: str = "roofline", who: str = "hfta") -> float:
    """Per byte, a memory-bound op's time at a new size over its traced time (at least 1).

    ``stream_ns``: the traced op's time past its fixed cost, moving ``moved_bytes``;
    ``hot_bytes_per_s`` / ``new_bytes_per_s``: the streaming curve at its size and at the
    new one.  ``streaming``: a rule of the module docstring.  ``who`` names the what-if in
    the error for an unknown rule.  Never below 1: an op fused over more bytes does not
    stream faster per byte (the curve's low rate at small sizes is per-op cost, paid once
    already); one split over fewer streams at most as fast as traced under ``roofline``
    and ``additive`` (``tensor-parallel``'s ``streaming=curve`` keeps the curve's speed-up
    at the smaller size by a formula of its own).

    >>> stream_ratio(1e6, 1e5, 1e11, 2.5e10, "curve")        # 10 GB/s traced, curve 100 -> 25 GB/s
    4.0
    >>> stream_ratio(1e6, 1e5, 1e11, 2.5e10)                 # roofline: traced 10 GB/s already below 25
    1.0
    >>> round(stream_ratio(1e6, 2e4, 1e11, 2.5e10), 6)      # traced 50 GB/s: the curve's 25 at N b
    2.0
    >>> round(stream_ratio(1e6, 1e5, 1e11, 2.5e10, "additive"), 2)   # (0.09 + 0.04) / 0.1 ns/B
    1.3
    >>> stream_ratio(5e5, 1e5, 5e10, 1e11)                   # split: 5 GB/s traced, the curve 100 at half
    1.0
    """
    if streaming not in STREAMING:
        raise OptionError(f"{who}: streaming={streaming!r} (valid: {', '.join(STREAMING)})")
    curve = max(1.0, hot_bytes_per_s / new_bytes_per_s)
    if streaming == "curve" or stream_ns <= 0 or moved_bytes <= 0:
        return curve
    traced_s_per_byte = stream_ns * 1e-9 / moved_bytes
    if streaming == "roofline":
        return max(1.0, min(1.0 / traced_s_per_byte, hot_bytes_per_s) / new_bytes_per_s)
    work = max(0.0, traced_s_per_byte - 1.0 / hot_bytes_per_s)
    return max(1.0, (work + 1.0 / new_bytes_per_s) / (work + 1.0 / hot_bytes_per_s))
