"""Typed exception hierarchy of daydream.

Every expected failure raises a subclass of :class:`DaydreamError`; the CLI
turns these into one line on stderr and exit status 2, never a traceback.

Examples
--------
>>> from daydream.errors import TraceError
>>> str(TraceError("run.json", "not JSON"))
'run.json: not JSON'
"""
from __future__ import annotations

__all__ = [
    "DaydreamError",
    "TraceError",
    "NoIterationsError",
    "GraphError",
    "CycleError",
    "SimulationError",
    "one_line",
]


class DaydreamError(Exception):
    """Base class of every error daydream raises on purpose."""


class TraceError(DaydreamError):
    """A trace file cannot be read or understood.

    Parameters
    ----------
    path : str
        The file (or archive member) at fault.
    problem : str
        What is wrong with it, in a few words.
    """

    def __init__(self, path: str, problem: str):
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


class NoIterationsError(TraceError):
    """The trace has no iteration markers that daydream can find."""


class GraphError(DaydreamError):
    """A dependency graph is malformed or an edit is invalid."""


class CycleError(GraphError):
    """An edit would create a dependency cycle; ``tasks`` names some tasks on it."""

    def __init__(self, message: str, tasks: tuple = ()):
        self.tasks = tuple(tasks)
        super().__init__(message)


class SimulationError(DaydreamError):
    """The simulator cannot finish (e.g. tasks wait on each other forever)."""


def one_line(exc: BaseException, typed: bool = True, limit: int = 500) -> str:
    r"""An exception as one line of at most ``limit`` characters, for one-line errors.

    >>> one_line(ValueError("bad\n  value"))
    'ValueError: bad value'
    >>> one_line(ValueError("x" * 9), typed=False, limit=5)
    'xxxxx...'
    """
    msg = " ".join(str(exc).split())
    text = f"{type(exc).__name__}: {msg}" if typed and msg else msg or type(exc).__name__
    return text if len(text) <= limit else text[:limit] + "..."
