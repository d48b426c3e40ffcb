"""Raw simulator output shared by the compiled and the reference core."""
from __future__ import annotations

import numpy as np

__all__ = ["Timeline"]


class Timeline:
    """Raw simulator output: start/end per task and what determined them.

    Attributes
    ----------
    start_ns, end_ns : numpy.ndarray of int64
        Per task, relative to the graph's ``origin_ns``.
    start_by : numpy.ndarray of int64
        Task whose time released the start (-1: none).
    start_by_start : numpy.ndarray of bool
        Whether ``start_by`` released it by its start (else by its end).
    end_by : numpy.ndarray of int64
        Task whose end released the end (-1: the task's own duration).
    """

    __slots__ = ("start_ns", "end_ns", "start_by", "start_by_start", "end_by")

    def __init__(self, n):
        self.start_ns = np.zeros(n, np.int64)
        self.end_ns = np.zeros(n, np.int64)
        self.start_by = np.full(n, -1, np.int64)
        self.start_by_start = np.zeros(n, bool)
        self.end_by = np.full(n, -1, np.int64)
