"""Trace collection: ``daydream.trace``, ``daydream.step`` and the ``daydream trace`` wrapper.

The package records a Kineto (Chrome-trace) JSON file with ``torch.profiler``,
adds layer markers (``daydream.fwd:PATH`` ranges; ``daydream.bwd:PATH`` on request) and
one ``ProfilerStep#N`` range per recorded iteration, and stores model,
optimizer and device metadata under a top-level ``"daydream"`` key (schema in
docs/trace_format.md).  torch is imported lazily so that ``import
daydream.collect`` works on analysis-only installs.
"""
from __future__ import annotations

from .errors import CollectionError, NoIterationMarkerError

__all__ = ["trace", "step", "CollectionError", "NoIterationMarkerError"]


def trace(*args, **kwargs):
    """Trace training iterations into a file; see :func:`daydream.collect.api.trace`."""
    from .api import trace as _trace

    return _trace(*args, **kwargs)


def step() -> None:
    """Mark an iteration boundary; see :func:`daydream.collect.api.step`."""
    import sys

    if "daydream.collect.tracer" not in sys.modules:
        return  # nothing can be tracing
    from .api import step as _step

    _step()
