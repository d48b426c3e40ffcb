"""Safe output files: atomic writes that never clobber a user's file by accident.

Every file daydream writes appears complete or not at all (temporary file,
``fsync``, ``os.replace``), is refused if it exists unless ``--force``, and
records what made it (:func:`provenance`): JSON outputs under their
``"daydream"`` key, figures in their metadata (PNG text chunks, SVG
``<metadata>``).

Examples
--------
>>> p = provenance("replay"); sorted(p)
['command', 'created_utc', 'kind', 'tool', 'versions']
>>> p["tool"], sorted(p["versions"])
('daydream', ['daydream', 'numpy', 'python', 'torch'])
"""
from __future__ import annotations

import gzip
import io
import json
import os
import platform
import sys
import tempfile
import time

from .errors import DaydreamError

__all__ = ["OutputError", "check_writable", "atomic_write_bytes", "write_json", "provenance", "versions",
           "save_figure", "figure_metadata"]


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


def _version(dist: str) -> str | None:
    mod = sys.modules.get(dist)
    if mod is not None and getattr(mod, "__version__", None):
        return str(mod.__version__)
    try:
        from importlib.metadata import PackageNotFoundError, version

        return version(dist)
    except (ImportError, PackageNotFoundError, ValueError):
        return None


def versions() -> dict:
    """Versions of daydream, Python, numpy and torch (None where not installed); imports nothing heavy."""
    return {"daydream": _version("daydream"), "python": platform.python_version(),
            "numpy": _version("numpy"), "torch": _version("torch")}


def provenance(kind: str, **extra) -> dict:
    """What made an output file: the command line, versions, time; stored with the output.

    Parameters
    ----------
    kind : str
        Which command wrote it (``"replay"``, ``"whatif"``, ``"plot"``, ...).
    **extra
        Further fields (e.g. ``optimizations``).
    """
    return {"tool": "daydream", "kind": kind, "command": list(sys.argv), "versions": versions(),
            "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **extra}


def figure_metadata(fmt: str, prov: dict) -> dict:
    """Matplotlib ``savefig(metadata=...)`` carrying ``prov``: PNG text chunks, SVG Dublin Core fields."""
    text = json.dumps(prov, separators=(",", ":"))
    tool = f"daydream {prov.get('versions', {}).get('daydream') or ''}".strip()
    if fmt == "png":
        return {"Software": tool, "daydream": text}
    if fmt == "svg":
        return {"Creator": tool, "Description": text}
    return {}


def save_figure(fig, path, prov: dict, force: bool = False, **savefig_kw) -> None:
    """Render ``fig`` with provenance metadata and write it atomically (refusing to clobber without ``force``)."""
    path = os.fspath(path)
    check_writable(path, force)
    fmt = os.path.splitext(path)[1].lstrip(".").lower() or "png"
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, metadata=figure_metadata(fmt, prov), **savefig_kw)
    atomic_write_bytes(path, buf.getvalue())
