"""Python API: ``daydream.trace`` and ``daydream.step``.

Examples
--------
Around a loop (iterations found from ``optimizer.step()``)::

    with daydream.trace("out.json", warmup=2, iterations=5):
        for x, y in loader:
            ...
            opt.step()

Wrapping a step function (each call is one iteration; the file is written
after ``warmup + iterations`` calls and later calls run untraced)::

    train_step = daydream.trace("out.json", iterations=5)(train_step)
    for batch in loader:
        train_step(batch)
"""
from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

from .activities import parse_activities
from .errors import CollectionError, NoIterationMarkerError
from .steps import MarkerSource
from .tracer import TraceOptions, Tracer, TraceResult, current_tracer
from .writer import check_output

__all__ = ["trace", "step", "TraceSession"]


def step() -> None:
    """Mark the end of one training iteration for the running tracer.

    Only needed when the loop steps no ``torch.optim`` optimizer (or when
    one iteration steps it several times).  A no-op when nothing traces.
    """
    tracer = current_tracer()
    if tracer is not None:
        tracer.step(MarkerSource.EXPLICIT)


class TraceSession:
    """Handle returned by :func:`trace`: a context manager and a decorator.

    Attributes
    ----------
    result : TraceResult or None
        Set once the trace is finished (the path written, iterations, ...).
    """

    def __init__(self, options: TraceOptions, strict: bool):
        self.options = options
        self.strict = strict
        self.result: TraceResult | None = None
        self._tracer: Tracer | None = None
        self._inert = False

    def _new_tracer(self) -> Tracer | None:
        if current_tracer() is not None:
            self._inert = True
            print(
                f"daydream: a trace is already being recorded in this process; "
                f"not tracing again into {self.options.path}",
                file=sys.stderr,
            )
            return None
        return Tracer(self.options).start()

    @property
    def path(self) -> Path | None:
        """The file written, once finished."""
        return self.result.path if self.result else None

    def step(self) -> None:
        """Mark an iteration boundary (same as :func:`daydream.step`)."""
        if self._tracer is not None:
            self._tracer.step(MarkerSource.EXPLICIT)

    # -- context manager ------------------------------------------------------
    def __enter__(self) -> "TraceSession":
        self._tracer = self._new_tracer()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if self._tracer is None:  # another trace owns the profiler
            return False
        self.result = self._tracer.finish()
        if exc_type is None and self.strict:
            self._check()
        return False

    def _check(self) -> None:
        res = self.result
        if res.error is not None:   # tracing failed and said so on stderr; the user's code goes on
            return
        if res.boundaries == 0:
            raise NoIterationMarkerError("the traced block finished without marking an iteration")
        if res.path is None:
            raise CollectionError(
                f"only {res.boundaries} iteration(s) ran; warmup={self.options.warmup} "
                f"needs at least {self.options.warmup + 1} to record one"
            )
        if not res.complete:
            print(
                f"daydream: recorded {res.iterations_recorded} of {self.options.iterations} "
                f"iterations into {res.path} (the loop ended early)",
                file=sys.stderr,
            )

    # -- decorator ----------------------------------------------------------
    def __call__(self, fn):
        """Wrap ``fn`` so that each call is one traced iteration."""
        session = self

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            tracer = session._tracer
            if session.result is not None or session._inert:
                return fn(*args, **kwargs)
            if tracer is None:
                tracer = session._tracer = session._new_tracer()
                if tracer is None:
                    return fn(*args, **kwargs)
                tracer.marker = MarkerSource.CALL
            try:
                out = fn(*args, **kwargs)
            except BaseException:
                session.result = tracer.finish()
                raise
            tracer.step(MarkerSource.CALL)
            if tracer.result is not None:
                session.result = tracer.result
            return out

        wrapper.session = session  # type: ignore[attr-defined]
        return wrapper

    def close(self) -> TraceResult | None:
        """Finish a decorator-style trace early (writes what was recorded)."""
        if self._tracer is not None and self.result is None:
            self.result = self._tracer.finish()
        return self.result


def trace(
    path: str | os.PathLike = "trace.json",
    warmup: int = 2,
    iterations: int = 5,
    activities: str | tuple[str, ...] = ("cpu", "cuda"),
    record_shapes: bool = True,
    backward_ranges: bool = False,
    force: bool = True,
    strict: bool = True,
    use_cupti: bool = True,
    heap_reserve: bool = True,
    shapes_every_iteration: bool = False,
) -> TraceSession:
    """Trace ``iterations`` training iterations after ``warmup`` into ``path``.

    Parameters
    ----------
    path : path-like
        Output file, ``.json`` or ``.json.gz``.  Under ``torchrun`` each rank
        writes ``NAME.rankR.json``.
    warmup : int
        Iterations to run untraced first (iteration 0 starts when the
        ``with`` block is entered or the wrapped function is first called).
        With 2 or more, iteration ``warmup - 2`` records the ops' shapes for
        the recorded ones (``record_shapes``).
    iterations : int
        Iterations to record.
    activities : str or tuple of str
        ``"cpu"``, ``"cuda"`` or both (``cuda`` is ignored without a GPU).
    record_shapes : bool
        Record op input shapes: in a warm-up iteration, copied to the same
        ops of the recorded iterations (an iteration whose model inputs
        have other shapes gets none; the metadata's ``shapes`` says).
    backward_ranges : bool
        Also mark each module's backward pass (``daydream.bwd:`` ranges, from
        hooks on autograd nodes: ~15 us per module call).  Without them the
        loader gives backward ops the module of the forward op with the same
        autograd sequence number.
    force : bool
        Overwrite an existing file.
    strict : bool
        Raise at the end of a ``with`` block that recorded nothing.
    use_cupti : bool
        On a CUDA device, take GPU activity from the ``daydream.cupti``
        extension (the default) instead of ``torch.profiler``'s; where the
        extension cannot run, ``torch.profiler``'s is used and the trace's
        ``activities.notes`` say why.
    heap_reserve : bool
        Keep pre-faulted free heap for the growth that the profiler's
        records cause (glibc), so recorded ops pay no page faults that
        untraced ones would not; the trace metadata says how much.
    shapes_every_iteration : bool
        Record shapes in every recorded iteration instead (slower: Kineto's
        cost per op nearly doubles), for models whose shapes vary.

    Returns
    -------
    TraceSession
        Use as a context manager, or call it on a step function.

    Raises
    ------
    CollectionError
        Output not writable or existing (``force=False``), bad counts.
    """
    try:
        acts = parse_activities(activities)
    except ValueError as exc:
        raise CollectionError(str(exc)) from None
    out = check_output(path, force=force)
    options = TraceOptions(
        path=out,
        warmup=int(warmup),
        iterations=int(iterations),
        activities=acts,
        record_shapes=record_shapes,
        backward_ranges=backward_ranges,
        use_cupti=use_cupti,
        heap_reserve=heap_reserve,
        shapes_every_iteration=shapes_every_iteration,
    )
    return TraceSession(options, strict=strict)
