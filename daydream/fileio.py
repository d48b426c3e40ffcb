"""Safe output files: atomic writes that never clobber a user's file by accident."""
from __future__ import annotations

import gzip
import json
import os
import tempfile

from .errors import DaydreamError

__all__ = ["OutputError", "check_writable", "atomic_write_bytes", "write_json"]


class OutputError(DaydreamError):
    """An output file cannot be written (exists without --force, or unwritable)."""


def check_writable(path: str, force: bool = False) -> None:
    """Fail early if ``path`` exists (without ``force``) or its folder is not writable."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise OutputError(f"{path}: is a directory")
    if os.path.exists(path) and not force:
        raise OutputError(f"{path}: exists (use --force to overwrite)")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise OutputError(f"{path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise OutputError(f"{path}: folder {folder} is not writable")


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file and ``os.replace``.

    A crash leaves either the old file or the complete new one; the file gets
    the permissions a plain ``open`` would give it (umask respected).
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write ({exc.strerror})") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise OutputError(f"{path}: cannot write ({exc.strerror})") from None
        raise


def write_json(path: str, obj) -> None:
    """Atomically write ``obj`` as JSON (gzip-compressed if ``path`` ends in ``.gz``)."""
    data = json.dumps(obj, separators=(",", ":")).encode()
    if os.fspath(path).endswith(".gz"):
        data = gzip.compress(data, compresslevel=6, mtime=0)
    atomic_write_bytes(path, data)
