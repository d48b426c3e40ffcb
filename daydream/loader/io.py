"""Reading trace documents from disk: plain or gzip JSON, directories, tar archives.

Every failure becomes a :class:`~daydream.errors.TraceError` naming the file.

Examples
--------
>>> import json, tempfile, os
>>> d = tempfile.mkdtemp(); p = os.path.join(d, "t.json")
>>> _ = open(p, "w").write(json.dumps({"traceEvents": []}))
>>> [(os.path.basename(name), doc) for name, doc in read_documents([p])]
[('t.json', {'traceEvents': []})]
"""
from __future__ import annotations

import gzip
import json
import os
import tarfile
import zlib
from typing import Iterator

from ..errors import TraceError, one_line

try:  # optional fast JSON parser
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None

__all__ = ["read_documents", "decode_document", "inflate", "expand_paths", "is_archive", "TRACE_SUFFIXES"]

#: File name endings recognised as traces inside directories and archives.
TRACE_SUFFIXES = (".json", ".json.gz")
_ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar")


def is_archive(path: str) -> bool:
    """Whether ``path`` names a tar archive of ranks."""
    return os.fspath(path).endswith(_ARCHIVE_SUFFIXES)


def expand_paths(paths) -> list[str]:
    """Turn files and directories into a sorted list of trace files/archives."""
    out: list[str] = []
    for p in paths:
        p = os.fspath(p)
        if os.path.isdir(p):
            found = sorted(
                os.path.join(p, f)
                for f in os.listdir(p)
                if f.endswith(TRACE_SUFFIXES) or is_archive(f)
            )
            if not found:
                raise TraceError(p, "directory holds no .json, .json.gz or .tar.gz traces")
            out.extend(found)
        elif os.path.exists(p):
            out.append(p)
        else:
            raise TraceError(p, "no such file or directory")
    return out


def _parse_json(name: str, raw: bytes):
    """JSON bytes to Python objects: orjson when installed (3-4x faster), else the stdlib.

    orjson is stricter (no NaN, UTF-8 only, 64-bit integers); whatever it
    refuses goes through the stdlib, so both accept the same documents.
    """
    if _orjson is not None:
        try:
            return _orjson.loads(raw)
        except _orjson.JSONDecodeError:
            pass
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError, int digit limit, nesting
        raise TraceError(name, f"not JSON ({one_line(exc, typed=False, limit=300)})") from None


def inflate(name: str, raw: bytes) -> bytes:
    """The JSON bytes of a file's contents: gzip decompressed where it is gzip."""
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (EOFError, OSError, zlib.error) as exc:
            raise TraceError(name, f"truncated or corrupt gzip ({one_line(exc, typed=False, limit=300)})") from None
    return raw


def decode_document(name: str, raw: bytes) -> dict:
    """A file's contents (gzip or plain JSON) to its trace document (``traceEvents`` checked)."""
    return _decode(name, raw)


def _decode(name: str, raw: bytes) -> dict:
    raw = inflate(name, raw)
    if not raw.strip():
        raise TraceError(name, "empty file")
    doc = _parse_json(name, raw)
    if isinstance(doc, list):  # bare Chrome-trace array
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise TraceError(name, "not a Chrome/Kineto trace (no 'traceEvents' list)")
    return doc


def _read_archive(path: str, raw: bool = False) -> Iterator[tuple[str, dict]]:
    try:
        with tarfile.open(path) as tar:
            members = sorted(
                (m for m in tar.getmembers() if m.isfile() and m.name.endswith(TRACE_SUFFIXES)),
                key=lambda m: m.name,
            )
            if not members:
                raise TraceError(path, "archive holds no .json or .json.gz traces")
            for m in members:
                name = f"{path}:{m.name}"
                data = tar.extractfile(m).read()
                yield name, (data if raw else _decode(name, data))
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise TraceError(path, f"truncated or corrupt archive ({one_line(exc, typed=False, limit=300)})") from None


def read_documents(paths, raw: bool = False) -> Iterator[tuple[str, dict]]:
    """Yield ``(name, document)`` for every trace in ``paths``.

    Parameters
    ----------
    paths : iterable of str or os.PathLike
        Files (``.json``, ``.json.gz``), directories of them, or tar archives.
    raw : bool
        Yield each trace's file contents (bytes, possibly gzip) instead of the
        parsed document (:func:`decode_document` parses them); used by the
        fast loader (:mod:`daydream.loader.fast`).
    """
    for path in expand_paths(paths):
        if is_archive(path):
            yield from _read_archive(path, raw)
            continue
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise TraceError(path, f"cannot read ({exc.strerror})") from None
        yield path, (data if raw else _decode(path, data))
