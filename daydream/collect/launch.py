"""Parent side of ``daydream trace -- COMMAND``: checks, launch, outcome.

The command runs as a child process with its stdin, stdout and stderr
inherited, so its output passes through untouched; its exit status is
returned.  Ctrl-C and SIGTERM are forwarded to it.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .activities import parse_activities
from .errors import MARKER_HINT, CollectionError, NoIterationMarkerError
from .runner import CONFIG_ENV, read_statuses
from .writer import check_output

__all__ = ["TraceRequest", "RunOutcome", "run_traced", "with_nproc", "script_of"]

_BOOT_DIR = Path(__file__).resolve().parent / "_boot"
_PKG_ROOT = Path(__file__).resolve().parents[2]
#: python options that take a value (``-W ignore``), so the script comes later
_PY_OPTS_WITH_VALUE = {"-W", "-X", "--check-hash-based-pycs"}


@dataclass(frozen=True)
class TraceRequest:
    """What ``daydream trace`` was asked to do."""

    command: tuple[str, ...]
    output: Path
    warmup: int = 2
    iterations: int = 5
    activities: tuple[str, ...] = ("cpu", "cuda")
    record_shapes: bool = True
    shapes_every_iteration: bool = False
    backward_ranges: bool = False
    force: bool = False
    nproc: int | None = None
    use_cupti: bool = True
    pin_cores: bool = False
    heap_reserve: bool = True


@dataclass(frozen=True)
class RunOutcome:
    """What happened: the command's exit status and the files written."""

    exit_status: int
    files: tuple[Path, ...]
    statuses: tuple[dict, ...]


def _is_python(exe: str) -> bool:
    return Path(exe).name.startswith("python")


def script_of(command: tuple[str, ...]) -> tuple[int, str] | None:
    """Index and kind (``"script"``, ``"module"``, ``"code"``) of what a python command runs.

    Examples
    --------
    >>> script_of(("python", "-u", "train.py", "--lr", "1"))
    (2, 'script')
    >>> script_of(("python", "-m", "pkg.mod"))
    (2, 'module')
    """
    if not command or not _is_python(command[0]):
        return None
    i = 1
    while i < len(command):
        arg = command[i]
        if arg == "-m":
            return (i + 1, "module") if i + 1 < len(command) else None
        if arg == "-c":
            return (i + 1, "code") if i + 1 < len(command) else None
        if arg in _PY_OPTS_WITH_VALUE:
            i += 2
            continue
        if arg.startswith("-") and arg != "-":
            i += 1
            continue
        return i, "script"
    return None


def with_nproc(command: tuple[str, ...], nproc: int) -> tuple[str, ...]:
    """``python [-m mod | script] ARGS`` → the same under ``torch.distributed.run`` with ``nproc`` workers."""
    found = script_of(command)
    if found is None or found[1] == "code":
        raise CollectionError("--nproc needs a command of the form: python SCRIPT ARGS or python -m MODULE ARGS")
    idx, kind = found
    launcher = (command[0], "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}")
    target = ("-m", *command[idx:]) if kind == "module" else command[idx:]
    return launcher + target


def _precheck(command: tuple[str, ...]) -> None:
    if not command:
        raise CollectionError("no command given; usage: daydream trace [OPTIONS] -- python train.py ARGS")
    if shutil.which(command[0]) is None:
        raise CollectionError(f"{command[0]}: command not found")
    found = script_of(command)
    if found is not None and found[1] == "script":
        script = Path(command[found[0]])
        if not script.is_file():
            raise CollectionError(f"{script}: script not found")


def _child_env(req: TraceRequest, status_dir: str) -> dict:
    env = os.environ.copy()
    config = {
        "path": str(req.output),
        "warmup": req.warmup,
        "iterations": req.iterations,
        "activities": ",".join(req.activities),
        "record_shapes": req.record_shapes,
        "shapes_every_iteration": req.shapes_every_iteration,
        "backward_ranges": req.backward_ranges,
        "use_cupti": req.use_cupti,
        "pin_cores": req.pin_cores,
        "heap_reserve": req.heap_reserve,
        "status_dir": status_dir,
    }
    env[CONFIG_ENV] = json.dumps(config)
    parts = [str(_BOOT_DIR), str(_PKG_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    return env


def _wait_forwarding_signals(proc: subprocess.Popen) -> int:
    def forward(signum, frame):
        try:
            proc.send_signal(signum)
        except ProcessLookupError:
            pass

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        while True:
            try:
                return proc.wait()
            except KeyboardInterrupt:  # pragma: no cover - handler replaced above
                continue
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def run_traced(req: TraceRequest) -> RunOutcome:
    """Run ``req.command`` with tracing armed; return its status and the files written.

    Raises
    ------
    CollectionError
        Before the command runs: missing command or script, bad output path,
        existing output without ``force``.
    """
    command = tuple(req.command)
    _precheck(command)
    if req.nproc is not None:
        if req.nproc < 1:
            raise CollectionError(f"--nproc must be >= 1, got {req.nproc}")
        command = with_nproc(command, req.nproc)
    try:
        parse_activities(req.activities)
    except ValueError as exc:
        raise CollectionError(str(exc)) from None
    output = check_output(req.output, req.force)
    req = TraceRequest(**{**req.__dict__, "output": output, "command": command})
    status_dir = tempfile.mkdtemp(prefix="daydream-trace-")
    try:
        try:
            proc = subprocess.Popen(list(command), env=_child_env(req, status_dir))
        except OSError as exc:
            raise CollectionError(f"{command[0]}: cannot run ({exc.strerror})") from None
        rc = _wait_forwarding_signals(proc)
        statuses = tuple(read_statuses(status_dir))
    finally:
        shutil.rmtree(status_dir, ignore_errors=True)
    if rc < 0:
        rc = 128 - rc  # killed by a signal, as a shell reports it
    files = tuple(sorted({Path(s["path"]) for s in statuses if s.get("path")}))
    return RunOutcome(exit_status=rc, files=files, statuses=statuses)


def explain(outcome: RunOutcome, req: TraceRequest) -> tuple[list[str], CollectionError | None]:
    """Messages for the user and the error to raise (if the run produced nothing useful)."""
    lines = []
    for s in outcome.statuses:
        if s.get("path"):
            note = "" if s.get("complete") else f" of {req.iterations} (interrupted)"
            lines.append(f"daydream: wrote {s['path']} ({s['recorded']} iterations{note}, marked by {s['marker']})")
            if s.get("overhead"):
                lines.append(f"daydream: {s['overhead']}")
        elif s.get("error"):
            lines.append(f"daydream: process {s['pid']}: {s['error']}")
    if outcome.files:
        return lines, None
    failed = [s["error"] for s in outcome.statuses if s.get("error")]
    if failed:
        return lines, CollectionError(f"no trace written: {failed[0]}")
    stepped = max((s.get("boundaries", 0) for s in outcome.statuses), default=0)
    rc = outcome.exit_status
    if rc != 0 and stepped == 0:
        return lines, CollectionError(
            f"the command exited with status {rc} before its first iteration; no trace written")
    if rc != 0:
        return lines, CollectionError(f"the command exited with status {rc} before a recorded iteration finished; no trace written")
    if stepped == 0:
        return lines, NoIterationMarkerError("the command finished without marking an iteration; no trace written")
    need = req.warmup + 2
    return lines, CollectionError(
        f"the command ran only {stepped - 1} full iteration(s) after its first optimizer step; "
        f"--warmup {req.warmup} needs {need} steps to record one (lower --warmup or run longer). {MARKER_HINT}"
        if stepped < need else "no trace written"
    )
