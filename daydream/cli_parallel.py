"""CLI commands of the parallelism what-ifs (device comparison, configuration searches)."""
from __future__ import annotations

__all__ = ["COMMANDS"]

#: Commands added by the parallelism work (``daydream devices``, ``daydream ptdp-search``, ...).
COMMANDS: list = []
