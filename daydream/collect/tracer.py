"""The tracer: a state machine driven by iteration boundaries.

Iteration ``i`` is the span between boundary ``i`` and boundary ``i + 1``;
boundary 0 is :meth:`Tracer.start`.  The tracer skips ``warmup`` iterations
(the one two before recording records op shapes in a session of its own, see
:mod:`.shapes`), prepares Kineto one iteration before recording (so its
start-up cost falls outside the recorded ones), records ``iterations``
iterations, each inside a ``ProfilerStep#i`` range, then stops Kineto and
writes the file atomically.

With ``skip_prelude`` (the CLI wrapper, which starts before the user's
script) the span before the first boundary is setup, not an iteration, and
the warm-up count starts after it.
"""
from __future__ import annotations

import enum
import json
import os
import resource
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from . import metadata as md
from .activities import ActivityPlan, plan_activities
from ..errors import one_line
from .errors import CollectionError
from .flow import FlowRecorder, attach_flow, take_flow
from .heap import HeapReserve
from .settle import SETTLE_TIMEOUT_S, settle_threads
from .hooks import LayerMarkers, enter_range, exit_range
from .normalize import normalize_marker_events
from .shapes import ShapeCopy, ShapeSource, copy_shapes
from .steps import MarkerSource, OptimizerWatcher
from .turns import PAUSE_RANGE, Turns
from .writer import add_metadata, rank_path, write_trace_atomic

__all__ = ["TraceOptions", "Tracer", "TracerState", "TraceResult", "current_tracer"]

_ACTIVE: list["Tracer"] = []


def _quietly(fn, *args) -> None:
    """Teardown step that must not stop the rest of the teardown."""
    try:
        fn(*args)
    except Exception:  # noqa: BLE001
        pass


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _thread_minor_faults() -> int:
    """Minor faults of the calling thread alone (0 where the platform cannot tell)."""
    who = getattr(resource, "RUSAGE_THREAD", None)
    return 0 if who is None else resource.getrusage(who).ru_minflt


def _exported(prof, tmp_dir: Path) -> dict:
    """A finished profiler session's Chrome-trace document (via a temporary file in ``tmp_dir``)."""
    fd, tmp = tempfile.mkstemp(prefix=".daydream-kineto-", suffix=".json", dir=tmp_dir)
    os.close(fd)
    try:
        prof.export_chrome_trace(tmp)
        with open(tmp, encoding="utf-8") as fh:
            return json.load(fh)
    finally:
        os.unlink(tmp)


def current_tracer() -> "Tracer | None":
    """The innermost running tracer of this process, if any."""
    return _ACTIVE[-1] if _ACTIVE else None


class TracerState(enum.Enum):
    """Lifecycle of a :class:`Tracer`."""

    CREATED = "created"
    WAITING = "waiting"  # counting warm-up iterations
    RECORDING = "recording"
    DONE = "done"


@dataclass(frozen=True)
class TraceOptions:
    """What to record and where.

    Attributes
    ----------
    path : Path
        Output file (``.json`` or ``.json.gz``); ranks > 1 get ``.rankN``.
    warmup : int
        Iterations to skip before recording.
    iterations : int
        Iterations to record.
    activities : tuple of str
        ``cpu`` and/or ``cuda``.
    record_shapes : bool
        Record op input shapes (needed by shape-based cost models).  Recorded
        in warm-up iteration ``warmup - 2`` and copied to the recorded ops (see
        :mod:`.shapes`) unless ``shapes_every_iteration``.
    shapes_every_iteration : bool
        Record shapes in the recorded iterations themselves (slower; for
        models whose op shapes change from one iteration to the next).
    backward_ranges : bool
        Mark module backward passes with ``daydream.bwd:`` ranges (hooks on
        autograd nodes); off, the loader maps backward ops to modules by
        autograd sequence number.
    skip_prelude : bool
        The span before the first boundary is setup, not an iteration.
    use_cupti : bool
        Take kernels from the ``daydream.cupti`` extension when it can run
        (the default), else from torch.profiler.
    heap_reserve : bool
        Keep pre-faulted free heap for the growth the profiler's records
        cause, so recorded ops do not pay page faults untraced ones do not
        (see :mod:`.heap`).
    """

    path: Path
    warmup: int = 2
    iterations: int = 5
    activities: tuple[str, ...] = ("cpu", "cuda")
    record_shapes: bool = True
    shapes_every_iteration: bool = False
    backward_ranges: bool = False
    skip_prelude: bool = False
    use_cupti: bool = True
    heap_reserve: bool = True

    def __post_init__(self):
        if self.warmup < 0:
            raise CollectionError(f"warmup must be >= 0, got {self.warmup}")
        if self.iterations < 1:
            raise CollectionError(f"iterations must be >= 1, got {self.iterations}")


@dataclass(frozen=True)
class TraceResult:
    """What a finished tracer wrote."""

    path: Path | None
    iterations_recorded: int
    complete: bool
    boundaries: int
    marker: str | None
    iteration_ns: tuple[int, ...] = field(default=())
    error: str | None = None   # why tracing stopped early or nothing was written (one line)


class Tracer:
    """Record ``options.iterations`` iterations after ``options.warmup`` into one file.

    Parameters
    ----------
    options : TraceOptions
    """

    def __init__(self, options: TraceOptions):
        self.options = options
        self.state = TracerState.CREATED
        self.boundaries = 0
        self.marker: MarkerSource | None = None
        self.result: TraceResult | None = None
        self.markers = LayerMarkers(backward_ranges=options.backward_ranges)
        self.watcher = OptimizerWatcher(self.step)
        first = options.warmup + (1 if options.skip_prelude else 0)
        self._first_record = first
        self._end = first + options.iterations
        self._plan: ActivityPlan | None = None
        self._collector = None
        self._prof = None
        self._shape_prof = None     # the shape iteration's profiler session (see .shapes)
        self._shape_file: str | None = None   # ... exported when it stops
        self._shapes = ShapeCopy(ShapeSource.NONE)
        self._flow_rec = FlowRecorder()   # which tensor each op read, beside the shape session (see .flow)
        self._flow: dict = {}
        self._root_inputs: dict[int, list] = {}   # iteration -> its root modules' input shapes
        self._prepared = False
        self._step_range = None
        self._recorded: list[int] = []
        self._iter_ns: list[int] = []
        self._iter_faults: list[int] = []   # minor page faults of the process per recorded iteration
        self._iter_thread_faults: list[int] = []   # ... of the training thread alone
        self._thread_faults0 = 0
        self._faults0 = 0
        self._t_boundary_ns = 0
        # untraced warm-up iterations before any profiler session: (iteration, wall ns, minor faults)
        self._untraced: list[tuple[int, int, int]] = []
        self._explicit_seen = False
        self.on_finish = None  # callable(tracer), run once the result is known
        self._notes: list[str] = []
        self.error: str | None = None
        self.markers.on_error = lambda exc: self._fail("in a module hook", exc)
        self._turns = Turns.from_env()  # run in turns with other traced processes (daydream validate)
        self._heap = HeapReserve(options.iterations) if options.heap_reserve else None

    # -- lifecycle ----------------------------------------------------------
    def start(self) -> "Tracer":
        """Install the hooks; boundary 0 (iteration 0 begins now)."""
        if self.state is not TracerState.CREATED:
            raise CollectionError("this tracer was already started; create a new daydream.trace()")
        try:
            self._plan, self._collector = plan_activities(self.options.activities, self.options.use_cupti)
            self.watcher.install()
            _ACTIVE.append(self)
            self.state = TracerState.WAITING
            self._advance_to(0)
        except Exception as exc:  # noqa: BLE001 - a profiler must never break training
            self._fail("while starting", exc)
        return self

    def step(self, source: MarkerSource = MarkerSource.EXPLICIT) -> None:
        """Mark an iteration boundary (called by hooks, ``daydream.step()``, ...).

        Never raises: a failure inside tracing is logged once and tracing
        stops (see :meth:`_fail`), so the user's training goes on.
        """
        try:
            self._step(source)
        except Exception as exc:  # noqa: BLE001 - a profiler must never break training
            self._fail("at an iteration boundary", exc)

    def _fail(self, where: str, exc: BaseException) -> None:
        """Stop tracing after an internal error: one line on stderr, nothing more is recorded."""
        if self.error is None:
            self.error = f"tracing stopped after an error {where}: {one_line(exc)}"
            print(f"daydream: {self.error}; the script goes on untraced", file=sys.stderr, flush=True)
        self._write_allowed = False
        try:
            self.finish()
        except Exception:  # noqa: BLE001
            pass

    def _step(self, source: MarkerSource) -> None:
        self.markers.report_pending()      # a hook failure inside the last backward pass
        if self.state is not TracerState.WAITING and self.state is not TracerState.RECORDING:
            return
        if source is MarkerSource.OPTIMIZER:
            if self.marker not in (None, MarkerSource.OPTIMIZER):
                return
        elif self.marker is MarkerSource.OPTIMIZER and not self._explicit_seen:
            # an explicit marker right after optimizer-driven boundaries (e.g.
            # ``opt.step(); daydream.step()``): it takes over from here, and
            # this call coincides with the boundary the optimizer just made.
            self._explicit_seen = True
            self.marker = source
            return
        self._explicit_seen = self._explicit_seen or source is not MarkerSource.OPTIMIZER
        self.marker = self.marker or source
        self.boundaries += 1
        self._advance_to(self.boundaries)

    def _advance_to(self, b: int) -> None:
        now = time.perf_counter_ns()
        if self.markers.enabled:
            self._root_inputs[b - 1] = self.markers.take_root_inputs()
        if self._step_range is not None:  # iteration b-1 finished
            exit_range(self._step_range)
            self._step_range = None
            self._recorded.append(b - 1)
            self._iter_ns.append(now - self._t_boundary_ns)
            self._iter_faults.append(_minor_faults() - self._faults0)
            self._iter_thread_faults.append(_thread_minor_faults() - self._thread_faults0)
        elif self.state is TracerState.WAITING and 1 <= b <= self._first_record - 2:
            # iteration b-1 ran untraced, before the shape session and the profiler's preparation
            self._untraced.append((b - 1, now - self._t_boundary_ns, _minor_faults() - self._faults0))
        self._t_boundary_ns = now
        if b >= self._end:
            if self._turns is not None:
                self._turns.finish()       # idle until the others are done too
            self.finish()
            return
        lazy_start = self.options.skip_prelude and b == 0  # nothing known to train yet
        if b == self._first_record - 2 and not lazy_start and self._shapes_once:
            self._start_shape_session()
        if (b == self._first_record - 1 and not lazy_start) or (b == self._first_record and not self._prepared):
            self._stop_shape_session()
            self._prepare()
        if b == self._first_record:
            self._take_turn()
            self._prof.start_trace()
            self._mark_collector()
            self.markers.enabled = True
            self.state = TracerState.RECORDING
        elif self.state is TracerState.RECORDING:
            self._between_iterations()
        if self.state is TracerState.RECORDING:
            self._step_range = enter_range(f"ProfilerStep#{b}")
        self._faults0 = _minor_faults()
        self._thread_faults0 = _thread_minor_faults()
        self._t_boundary_ns = time.perf_counter_ns()

    def _between_iterations(self) -> None:
        """Turns and heap top-ups, inside a range the loader cuts out of the timeline."""
        turn = self._turns is not None and self._turns.due()
        grow = self._heap.boundary() if self._heap is not None else 0
        if turn or grow:
            paused = enter_range(PAUSE_RANGE)
            if grow:
                self._heap.top_up(grow)
            if turn:
                self._take_turn()
            exit_range(paused)

    def _take_turn(self) -> None:
        """Wait until this process's turn (only under ``DAYDREAM_TURNS``; see :mod:`.turns`)."""
        if self._turns is not None:
            self._turns.wait()

    def _start_collector(self) -> None:
        if self._collector is None:
            return
        try:
            self._collector.start()
        except Exception as exc:  # noqa: BLE001 - trace CPU activity regardless
            self._collector = None
            self._notes.append(f"daydream.cupti failed to start, no kernels recorded: {exc}")

    def _mark_collector(self) -> None:
        """The recorded window begins: the collector leaves out what it recorded before."""
        mark = getattr(self._collector, "mark", None)
        if mark is not None:
            mark()

    def _profiler(self, record_shapes: bool, cpu_only: bool = False):
        acts = [torch.profiler.ProfilerActivity.CPU] if cpu_only else list(self._plan.torch_activities)
        prof = torch.profiler.profile(activities=acts, record_shapes=record_shapes)
        prof._daydream_owned = True
        return prof

    @property
    def _shapes_once(self) -> bool:
        return self.options.record_shapes and not self.options.shapes_every_iteration

    def _start_shape_session(self) -> None:
        """Record ops with shapes in the iteration two before recording (see :mod:`.shapes`).

        Not the one just before: the boundary ending the shape iteration
        may lie inside an open op range (``Optimizer.step#...`` around
        optimizer hooks) that began in the shape session; if the recording
        session started before that range ends, Kineto would write its end
        into the stopped session's freed records.
        """
        self._shape_prof = self._profiler(True, cpu_only=True)
        self._shape_prof.prepare_trace()
        self._shape_prof.start_trace()
        self._flow_rec.start()
        self.markers.install()
        self.markers.enabled = True     # the model's input shapes, to check the recorded ones against

    def _stop_shape_session(self) -> None:
        """Stop the shape session and export it at once (Kineto reuses its buffers).

        If it cannot be exported (no room for the temporary file), the
        recording session records shapes itself.
        """
        prof, self._shape_prof = self._shape_prof, None
        if prof is None:
            return
        self.markers.enabled = False
        self._flow_rec.stop()
        self._stop_session(prof)
        fd, path = tempfile.mkstemp(prefix="daydream-shapes-", suffix=".json")
        os.close(fd)
        try:
            prof.export_chrome_trace(path)
            self._shape_file = path
        except Exception as exc:  # noqa: BLE001 - shapes can still be recorded while recording
            _quietly(os.unlink, path)
            self._notes.append(f"op shapes recorded in every iteration: the shape iteration could not be kept "
                               f"({one_line(exc)})")

    def _stop_session(self, prof) -> None:
        """Stop a Kineto session once other threads have closed their ranges (:mod:`.settle`)."""
        note = (f"other threads still ran {SETTLE_TIMEOUT_S * 1e3:.0f} ms after a profiler session's "
                "last iteration; the session stopped regardless")
        if not settle_threads() and note not in self._notes:
            self._notes.append(note)
        prof.stop_trace()

    def _prepare(self) -> None:
        """Set up Kineto (and the heap reserve) one iteration before recording."""
        self._prof = self._profiler(self.options.record_shapes and self._shape_file is None)
        self._prof.prepare_trace()
        # with Kineto's CUPTI set-up: the costlier first records fall in this warm-up iteration
        self._start_collector()
        if self._heap is not None:   # a warm-up iteration absorbs its cost (and ranks' differences in it)
            self._heap.start()
        self._prepared = True
        self.markers.install()

    def finish(self) -> TraceResult:
        """Stop recording and write the file if at least one iteration finished.

        Called automatically after the last recorded iteration, at the end of
        a ``with daydream.trace(...)`` block and at interpreter exit.
        Idempotent.
        """
        if self.result is None:
            self.markers.report_pending()   # a hook failed in the last backward pass: finishes via _fail
        if self.result is not None:
            return self.result
        self.state = TracerState.DONE
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        self.markers.enabled = False
        _quietly(self.markers.close_all)
        if self._step_range is not None:  # interrupted iteration: not kept
            _quietly(exit_range, self._step_range)
            self._step_range = None
        _quietly(self.watcher.remove)
        _quietly(self.markers.remove)
        _quietly(self._stop_shape_session)
        path = None
        try:
            if self._prof is not None and self._prof.profiler is not None:
                if self._collector is not None:
                    try:
                        self._collector.stop()
                    except Exception as exc:  # noqa: BLE001
                        self._notes.append(f"daydream.cupti failed to stop: {exc}")
                        self._collector = None
                self._stop_session(self._prof)
                if self._recorded and self._write_allowed:
                    path = self._write()
        except Exception as exc:  # noqa: BLE001 - a full disk, a profiler failure: say so, go on
            path = None
            if self.error is None:
                self.error = f"could not write the trace: {one_line(exc)}"
                print(f"daydream: {self.error}", file=sys.stderr, flush=True)
        finally:
            self._prof = None
            if self._shape_file is not None:
                _quietly(os.unlink, self._shape_file)
            _quietly(self._flow_rec.close)
            self.result = TraceResult(
                path=path,
                iterations_recorded=len(self._recorded),
                complete=len(self._recorded) == self.options.iterations,
                boundaries=self.boundaries,
                marker=self.marker.value if self.marker else None,
                iteration_ns=tuple(self._iter_ns),
                error=self.error,
            )
            if self._turns is not None:
                self._turns.leave()        # after writing: the others' iterations ran undisturbed
            if self.on_finish is not None:
                try:
                    self.on_finish(self)
                except Exception:  # noqa: BLE001 - reporting must not mask the trace
                    pass
        return self.result

    def _iterations_metadata(self) -> dict:
        return {
            "marker": self.marker.value if self.marker else None,
            "warmup": self.options.warmup,
            "requested": self.options.iterations,
            "recorded": len(self._recorded),
            "complete": len(self._recorded) == self.options.iterations,
            "steps": list(self._recorded),
            "names": [f"ProfilerStep#{i}" for i in self._recorded],
            "wall_ns": list(self._iter_ns),
            "minor_faults": list(self._iter_faults),
            "thread_minor_faults": list(self._iter_thread_faults),
            "untraced_steps": [i for i, _, _ in self._untraced],
            "untraced_wall_ns": [ns for _, ns, _ in self._untraced],
            "untraced_minor_faults": [f for _, _, f in self._untraced],
            "skipped_prelude": self.options.skip_prelude,
        }

    def overhead(self):
        """What recording cost, as :func:`daydream.overhead.tracing_overhead` reads it from the trace."""
        from ..overhead import tracing_overhead

        return tracing_overhead({"daydream": {"iterations": self._iterations_metadata()}})

    # -- output -------------------------------------------------------------
    _write_allowed = True   # False once tracing failed: a half-recorded state is not written

    def _write(self) -> Path:
        rank, world, dist_details = md.distributed_info()
        out = rank_path(self.options.path, rank, world)
        doc = _exported(self._prof, out.parent)
        if self._collector is not None:
            doc.setdefault("traceEvents", []).extend(self._collector.chrome_events(doc))
        normalize_marker_events(doc.get("traceEvents", []))
        self._copy_shapes(doc.get("traceEvents", []))
        if world > 1 and not isinstance(doc.get("distributedInfo"), dict):
            doc["distributedInfo"] = {"rank": rank, "world_size": world, "backend": dist_details["backend"]}
        meta = self._metadata(rank, world, dist_details)
        doc = add_metadata(doc, meta, keep_steps=set(self._recorded))
        return write_trace_atomic(doc, out)

    def _copy_shapes(self, events: list) -> None:
        """Give the recorded ops the shapes of the shape iteration (:mod:`.shapes`)."""
        if self._shape_file is None:
            self._shapes = ShapeCopy(ShapeSource.EVERY if self.options.record_shapes else ShapeSource.NONE)
            return
        with open(self._shape_file, encoding="utf-8") as fh:
            shape_events = json.load(fh).get("traceEvents", [])
        normalize_marker_events(shape_events)
        ref = self._first_record - 2
        differ = [k for k in self._recorded if self._root_inputs.get(k) != self._root_inputs.get(ref)]
        linked = attach_flow(shape_events, self._flow_rec.flows())
        self._shapes = copy_shapes(events, shape_events, ref, differ)
        ops = take_flow(events)
        if ops:
            self._flow = {"source": f"execution trace of warm-up iteration {ref}", "ops_linked": linked, "ops": ops}
        elif self._flow_rec.problem:
            self._notes.append(f"no data flow recorded (the execution trace failed: {self._flow_rec.problem})")

    def _activities_metadata(self) -> dict:
        meta = self._plan.as_metadata()
        meta["notes"] += self._notes
        dropped = int(getattr(self._collector, "dropped_records", 0) or 0)
        if dropped:
            meta["dropped_records"] = dropped
            msg = (f"{dropped} GPU activity records were dropped (CUPTI buffers full); "
                   f"that GPU work is missing from the trace")
            meta["notes"].append(msg)
            print(f"daydream: warning: {msg}", file=sys.stderr, flush=True)
        alignment = getattr(self._collector, "alignment", None)
        if alignment:
            meta["cupti_alignment"] = alignment
            meta["cupti_skipped_apis"] = list(getattr(self._collector, "skipped_apis", ()))
        if self._collector is None and meta["cuda_source"] == "daydream.cupti":
            meta["cuda_source"] = "none"
        return meta

    def _metadata(self, rank: int, world: int, dist_details: dict) -> dict:
        roots = self.markers.roots()
        optimizers = self.watcher.optimizers()
        return {
            "schema_version": md.SCHEMA_VERSION,
            "tool": "daydream",
            "versions": md.versions(),
            "command": list(sys.argv),
            "rank": rank,
            "world_size": world,
            "distributed": dist_details,
            "device": md.device_info(),
            "activities": self._activities_metadata(),
            "iterations": self._iterations_metadata(),
            "optimizers": [md.optimizer_info(o) for o in optimizers],
            "optimizer": md.optimizer_info(optimizers[0]) if optimizers else None,
            "parameter_dtype": md.parameter_dtype(optimizers, roots),
            "modules": md.module_table(roots, self.markers.output_bytes, self.markers.input_shapes),
            "layer_markers": {"forward_prefix": "daydream.fwd:", "backward_prefix": "daydream.bwd:"},
            "record_shapes": self.options.record_shapes,
            "shapes": self._shapes.as_metadata(),
            **({"flow": self._flow} if self._flow else {}),
            "backward_ranges": self.options.backward_ranges,
            **({"heap_reserve": self._heap.as_metadata()} if self._heap is not None else {}),
        }
