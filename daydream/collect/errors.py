"""Errors raised by trace collection."""
from __future__ import annotations

from ..errors import DaydreamError

__all__ = ["CollectionError", "NoIterationMarkerError"]

#: How to mark iterations, quoted by every "no iterations found" message.
MARKER_HINT = (
    "daydream finds iterations from optimizer.step() calls; if your script "
    "steps no torch.optim optimizer, call daydream.step() once at the end of "
    "every iteration (or prof.step() of a torch.profiler.profile you already "
    "use), or wrap one iteration in a function and trace it with "
    "daydream.trace(PATH)(step_fn)"
)


class CollectionError(DaydreamError):
    """Collecting a trace failed (bad output path, script missing, ...)."""


class NoIterationMarkerError(CollectionError):
    """The traced code never marked an iteration boundary."""

    def __init__(self, detail: str = "no iterations were found"):
        super().__init__(f"{detail}: {MARKER_HINT}")
