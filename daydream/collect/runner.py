"""Child side of ``daydream trace``: set up tracing inside the user's unmodified script.

``daydream trace`` runs the user's command with ``daydream/collect/_boot`` first
on ``PYTHONPATH``; its ``sitecustomize`` calls :func:`bootstrap` in every Python
process of the command (the script, ``torchrun`` workers, ``mp.spawn``
children) when ``DAYDREAM_TRACE_CONFIG`` is set.  Nothing is imported until
the process imports torch; then a lazy :class:`~daydream.collect.tracer.Tracer`
waits for optimizer steps.  A process that never steps (a launcher, a
DataLoader worker) writes nothing.  At exit (normal, exception, Ctrl-C) the
tracer writes the iterations it finished, and a small status file tells the
parent what happened.
"""
from __future__ import annotations

import atexit
import importlib.abc
import importlib.util
import json
import os
import signal
import sys
import time
from pathlib import Path

__all__ = ["CONFIG_ENV", "bootstrap", "cores_for_rank", "pin_rank", "pin_local_rank", "read_statuses"]

CONFIG_ENV = "DAYDREAM_TRACE_CONFIG"
_state: dict = {}


class _TorchImportWatcher(importlib.abc.MetaPathFinder):
    """Calls ``callback`` right after ``import torch`` has finished executing."""

    def __init__(self, callback):
        self.callback = callback

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        original = spec.loader.exec_module
        callback = self.callback

        def exec_module(module):
            original(module)
            spec.loader.exec_module = original
            callback()

        spec.loader.exec_module = exec_module
        return spec


def bootstrap() -> None:
    """Arm tracing in this process according to ``$DAYDREAM_TRACE_CONFIG``."""
    raw = os.environ.get(CONFIG_ENV)
    if not raw or _state:
        return
    _state["config"] = json.loads(raw)
    if _state["config"].get("pin_cores"):
        pin_local_rank()
    if "torch" in sys.modules:
        _start()
    else:
        sys.meta_path.insert(0, _TorchImportWatcher(_start))


def cores_for_rank(cores, rank: int, ranks: int) -> list:
    """The share of ``cores`` that local rank ``rank`` of ``ranks`` gets (``--pin-cores``).

    >>> cores_for_rank({0, 1, 2, 3}, 1, 2)
    [2, 3]
    >>> cores_for_rank({0, 1}, 2, 3)   # more ranks than cores: one core each, round-robin
    [0]
    """
    cores = sorted(cores)
    if ranks <= len(cores):
        per = len(cores) // ranks
        return cores[rank * per:(rank + 1) * per]
    return [cores[rank % len(cores)]]


def pin_rank(rank: int, ranks: int) -> None:
    """Restrict this process (and the threads it starts later) to rank ``rank``'s share of the
    cores it may use (``--pin-cores`` of ``daydream trace`` and of the multi-process workloads)."""
    if not hasattr(os, "sched_setaffinity"):
        print("daydream: --pin-cores: this platform cannot set CPU affinity; ranks not pinned", file=sys.stderr)
        return
    os.sched_setaffinity(0, cores_for_rank(os.sched_getaffinity(0), rank, ranks))


def pin_local_rank() -> None:
    """:func:`pin_rank` with ``LOCAL_RANK`` / ``LOCAL_WORLD_SIZE`` from ``torch.distributed.run``;
    a process without them (the launcher itself) keeps every core.  Runs before the script."""
    pin_rank(int(os.environ.get("LOCAL_RANK", 0)), int(os.environ.get("LOCAL_WORLD_SIZE", 1)))


def _start() -> None:
    try:
        from .activities import parse_activities
        from .tracer import TraceOptions, Tracer

        cfg = _state["config"]
        options = TraceOptions(
            path=Path(cfg["path"]),
            warmup=int(cfg["warmup"]),
            iterations=int(cfg["iterations"]),
            activities=parse_activities(cfg["activities"]),
            record_shapes=bool(cfg.get("record_shapes", True)),
            shapes_every_iteration=bool(cfg.get("shapes_every_iteration", False)),
            backward_ranges=bool(cfg.get("backward_ranges", False)),
            skip_prelude=True,
            use_cupti=bool(cfg.get("use_cupti", True)),
            heap_reserve=bool(cfg.get("heap_reserve", True)),
        )
        tracer = Tracer(options)
        _state["tracer"] = tracer
        tracer.on_finish = _write_status
        tracer.start()
        _patch_user_profiler(tracer)
        _install_sigint_filter()
        _install_sigterm_exit()
        atexit.register(_at_exit)
    except Exception as exc:  # never break the user's import of torch
        print(f"daydream: tracing disabled in this process: {exc}", file=sys.stderr)


def _install_sigint_filter() -> None:
    """Ignore a second SIGINT within 1 s (terminal and wrapper both deliver Ctrl-C)."""
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return
    try:
        last = [0.0]

        def handler(signum, frame):
            now = time.monotonic()
            if now - last[0] < 1.0:
                return
            last[0] = now
            raise KeyboardInterrupt

        signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread
        pass


def _install_sigterm_exit() -> None:
    """SIGTERM unwinds the script (``SystemExit(143)``) so that finished iterations are written.

    Only where the script left SIGTERM at its default (killing the process
    at once, writing nothing); a handler of the script's own is kept.  Further
    SIGTERMs are ignored while the script unwinds and the trace is written:
    ``kill -TERM -PGID`` reaches the script both directly and forwarded by
    ``daydream trace``, and the duplicate must not kill the write (SIGKILL
    still does).
    """
    try:
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return

        def handler(signum, frame):
            signal.signal(signal.SIGTERM, signal.SIG_IGN)   # duplicates (group kill + forwarding)
            raise SystemExit(128 + signum)

        signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        pass


def _at_exit() -> None:
    tracer = _state.get("tracer")
    if tracer is None:
        return
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # let the write finish
    except ValueError:
        pass
    try:
        tracer.finish()
    except BaseException as exc:  # noqa: BLE001 - report, never crash at exit
        _write_status(tracer, error=str(exc))
        print(f"daydream: could not write the trace: {exc}", file=sys.stderr)


def _overhead_line(tracer) -> str | None:
    """What recording cost this process (None: too few untraced warm-up iterations to say)."""
    from daydream.overhead import describe

    o = tracer.overhead()
    return describe(o) if o is not None else None


def _write_status(tracer, error: str | None = None) -> None:
    """Tell the parent ``daydream trace`` what this process did (atomic write)."""
    status_dir = _state.get("config", {}).get("status_dir")
    res = tracer.result
    error = error or (res.error if res else None)
    boundaries = res.boundaries if res else tracer.boundaries
    if not status_dir or (boundaries == 0 and error is None):
        return
    doc = {
        "pid": os.getpid(),
        "boundaries": boundaries,
        "path": str(res.path) if res and res.path else None,
        "recorded": res.iterations_recorded if res else 0,
        "complete": bool(res and res.complete),
        "marker": res.marker if res else None,
        "error": error,
        "overhead": _overhead_line(tracer) if res and res.path else None,
    }
    final = Path(status_dir) / f"status.{os.getpid()}.json"
    tmp = final.with_suffix(".tmp")
    try:
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, final)
    except OSError:
        pass


def read_statuses(status_dir: os.PathLike | str) -> list[dict]:
    """Status records written by the traced processes, by pid."""
    out = []
    for p in sorted(Path(status_dir).glob("status.*.json")):
        try:
            out.append(json.loads(p.read_text()))
        except (OSError, ValueError):
            continue
    return out


def _patch_user_profiler(tracer) -> None:
    """Make a ``torch.profiler.profile`` in the user's script a pass-through marker.

    Only one Kineto session can run per process, so the script's profiler is
    disabled while daydream traces; its ``step()`` marks iterations.
    """
    import torch.profiler
    from torch.autograd.profiler_util import EventList

    from .steps import MarkerSource

    cls = torch.profiler.profile
    if getattr(cls, "_daydream_patched", False):
        return
    originals = {name: getattr(cls, name) for name in ("start", "stop", "step", "key_averages", "events", "export_chrome_trace")}
    warned = []

    def mine(self):
        return getattr(self, "_daydream_owned", False)

    def notice():
        if not warned:
            warned.append(True)
            print(
                "daydream: the script's torch.profiler.profile is disabled while daydream "
                "traces; its step() marks iterations",
                file=sys.stderr,
            )

    def start(self):
        if mine(self):
            return originals["start"](self)
        notice()

    def stop(self):
        if mine(self):
            return originals["stop"](self)

    def step(self):
        if mine(self):
            return originals["step"](self)
        tracer.step(MarkerSource.PROFILER)

    def key_averages(self, *a, **k):
        return originals["key_averages"](self, *a, **k) if mine(self) else EventList([]).key_averages()

    def events(self):
        return originals["events"](self) if mine(self) else EventList([])

    def export_chrome_trace(self, path, *a, **k):
        if mine(self):
            return originals["export_chrome_trace"](self, path, *a, **k)
        print(f"daydream: not exporting {path}: the script's profiler is disabled", file=sys.stderr)

    patched = {"start": start, "stop": stop, "step": step, "key_averages": key_averages,
               "events": events, "export_chrome_trace": export_chrome_trace}
    for name, fn in patched.items():
        setattr(cls, name, fn)
    cls._daydream_patched = True
