"""Iteration boundaries from the user's optimizer.

A global optimizer step post-hook finds the first optimizer that steps (the
*leader*).  Its post-hook runs inside torch's ``Optimizer.step#...`` range, so
to keep ``ProfilerStep#N`` ranges properly nested the leader's ``step`` is
then wrapped on the instance and later boundaries are signalled after the
step has returned.  Other optimizers (a GAN's second one) do not mark
boundaries but are listed in the metadata.
"""
from __future__ import annotations

import enum
import types
import weakref

from torch.optim import optimizer as _optim_mod

__all__ = ["MarkerSource", "OptimizerWatcher"]


class MarkerSource(enum.Enum):
    """What marked an iteration boundary."""

    OPTIMIZER = "optimizer.step"
    EXPLICIT = "daydream.step"
    PROFILER = "torch.profiler.step"
    CALL = "traced function call"


class OptimizerWatcher:
    """Calls ``on_step(MarkerSource.OPTIMIZER)`` after each step of the leader optimizer.

    Parameters
    ----------
    on_step : callable
        Receives the :class:`MarkerSource`.
    """

    def __init__(self, on_step):
        self._on_step = on_step
        self._handle = None
        self._leader: weakref.ref | None = None
        self._in_wrapper = False
        self._seen: list[weakref.ref] = []
        self._previous = None
        self._in_post_hook = False

    def install(self) -> None:
        """Register the global optimizer hook (idempotent)."""
        if self._handle is None:
            self._handle = _optim_mod.register_optimizer_step_post_hook(self._post_hook)

    def remove(self) -> None:
        """Unregister the hook (the instance wrapper then just calls through)."""
        self._on_step = None
        if self._handle is not None and not self._in_post_hook:
            # inside the hook torch is iterating the hook dict: leave it inert
            self._handle.remove()
            self._handle = None
        leader = self._leader() if self._leader is not None else None
        if leader is not None and getattr(leader.__dict__.get("step"), "_daydream_wrapped", False):
            if self._previous is None:
                del leader.__dict__["step"]
            else:
                leader.__dict__["step"] = self._previous

    def optimizers(self) -> list:
        """Optimizers seen stepping, leader first."""
        return [o for o in (r() for r in self._seen) if o is not None]

    def _post_hook(self, optimizer, args, kwargs) -> None:
        if self._on_step is None:
            return
        if not any(r() is optimizer for r in self._seen):
            self._seen.append(weakref.ref(optimizer))
        if self._leader is None:
            self._leader = weakref.ref(optimizer)
            self._wrap(optimizer)
        elif self._leader() is not optimizer or self._in_wrapper:
            return
        # first step of the leader, or a step that bypassed the instance
        # attribute (e.g. ``type(opt).step(opt)``): signal from inside.
        if self._on_step is not None:
            self._in_post_hook = True
            try:
                self._on_step(MarkerSource.OPTIMIZER)
            finally:
                self._in_post_hook = False

    def _wrap(self, optimizer) -> None:
        inner = optimizer.step  # bound method, or an LR scheduler's wrapper
        self._previous = optimizer.__dict__.get("step")
        watcher = self

        def step(self_opt, *args, **kwargs):
            watcher._in_wrapper = True
            try:
                out = inner(*args, **kwargs)
            finally:
                watcher._in_wrapper = False
            if watcher._on_step is not None:
                watcher._on_step(MarkerSource.OPTIMIZER)
            return out

        # a bound method keeps ``opt.step.__func__`` working for LR schedulers
        bound = types.MethodType(step, optimizer)
        step._daydream_wrapped = True  # type: ignore[attr-defined]
        optimizer.step = bound
