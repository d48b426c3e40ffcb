"""Output paths and the atomic trace write.

A trace file appears under its final name only once it is complete: the JSON
is written to a hidden temporary file in the same directory, flushed to disk
and then renamed over the destination (``os.replace`` is atomic on POSIX and
Windows).  An interrupted write leaves no file under the final name.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ..fileio import OutputError, write_json
from .errors import CollectionError

__all__ = [
    "rank_path",
    "check_output",
    "existing_outputs",
    "write_trace_atomic",
    "add_metadata",
]

_STEP_PREFIX = "ProfilerStep#"


def _split_suffix(path: Path) -> tuple[str, str]:
    name = path.name
    for suffix in (".json.gz", ".json"):
        if name.endswith(suffix):
            return name[: -len(suffix)], suffix
    return name, ""


def rank_path(path: os.PathLike | str, rank: int, world_size: int) -> Path:
    """The file one rank writes: ``out.json`` → ``out.rank3.json`` when ``world_size > 1``.

    Examples
    --------
    >>> str(rank_path("run/out.json", 1, 2))
    'run/out.rank1.json'
    >>> str(rank_path("out.json.gz", 0, 1))
    'out.json.gz'
    """
    path = Path(path)
    if world_size <= 1:
        return path
    stem, suffix = _split_suffix(path)
    return path.with_name(f"{stem}.rank{rank}{suffix}")


def existing_outputs(path: os.PathLike | str) -> list[Path]:
    """Files that a trace to ``path`` would overwrite (single- or multi-rank names)."""
    path = Path(path)
    stem, suffix = _split_suffix(path)
    found = [path] if path.exists() else []
    if path.parent.is_dir():
        found += sorted(path.parent.glob(f"{stem}.rank[0-9]*{suffix}"))
    return found


def check_output(path: os.PathLike | str, force: bool) -> Path:
    """Fail early if ``path`` cannot be written or would clobber a trace.

    Parameters
    ----------
    path : path-like
        The requested output file.
    force : bool
        Allow overwriting existing files.

    Returns
    -------
    Path
        ``path`` made absolute.

    Raises
    ------
    CollectionError
        The directory is missing or not writable, ``path`` is a directory, or
        it exists and ``force`` is false.
    """
    path = Path(path).expanduser().absolute()
    if path.is_dir():
        raise CollectionError(f"{path}: is a directory; give a file name such as {path / 'trace.json'}")
    parent = path.parent
    if not parent.is_dir():
        raise CollectionError(f"{path}: directory {parent} does not exist")
    if not force:
        clash = existing_outputs(path)
        if clash:
            raise CollectionError(f"{clash[0]}: already exists; use --force (force=True) to overwrite")
    try:
        fd, probe = tempfile.mkstemp(prefix=".daydream-probe-", dir=parent)
    except OSError as exc:
        raise CollectionError(f"{path}: cannot write in {parent} ({exc.strerror})") from None
    os.close(fd)
    os.unlink(probe)
    return path


def add_metadata(doc: dict, metadata: dict, keep_steps: set[int] | None = None) -> dict:
    """Put ``metadata`` under ``doc["daydream"]``; optionally drop unfinished steps.

    Parameters
    ----------
    doc : dict
        A Chrome-trace document as exported by ``torch.profiler``.
    metadata : dict
        The ``"daydream"`` object (see docs/trace_format.md).
    keep_steps : set of int, optional
        When given, ``ProfilerStep#N`` ranges whose ``N`` is not in it are
        removed (an iteration interrupted by Ctrl-C or a crash).
    """
    if keep_steps is not None:
        events = doc.get("traceEvents", [])
        doc["traceEvents"] = [e for e in events if not _unfinished_step(e, keep_steps)]
    out = {"daydream": metadata}
    out.update((k, v) for k, v in doc.items() if k != "daydream")
    return out


def _unfinished_step(event: dict, keep_steps: set[int]) -> bool:
    name = event.get("name")
    if not isinstance(name, str) or not name.startswith(_STEP_PREFIX):
        return False
    try:
        return int(name[len(_STEP_PREFIX):]) not in keep_steps
    except ValueError:
        return False


def write_trace_atomic(doc: dict, path: os.PathLike | str) -> Path:
    """Write ``doc`` as JSON (gzip if the name ends in ``.gz``) atomically to ``path``.

    Raises
    ------
    CollectionError
        The file cannot be written; no partial file is left behind.
    """
    path = Path(path)
    try:
        write_json(str(path), doc)
    except OutputError as exc:
        raise CollectionError(str(exc)) from None
    return path
