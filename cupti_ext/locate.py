"""Find the CUDA toolkit's CUPTI headers and library for building ``daydream._cupti``.

Used by ``setup.py`` at build time and by the tests (to check that a machine
with the toolkit really got the extension).  Standard library only: it runs
inside pip's isolated build environment.

Environment
-----------
DAYDREAM_NO_CUPTI=1
    Do not build the extension even if CUPTI is found.
CUDA_HOME, CUDA_PATH, CUDA_ROOT
    Toolkit root to use (first set wins); otherwise ``nvcc`` on ``PATH`` and
    then ``/usr/local/cuda``.  A variable pointing at a folder without CUPTI
    means "no CUPTI": the others are not tried.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CuptiLocation", "locate_cupti", "skip_reason"]

_ENV_ROOTS = ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT")
_INCLUDE_SUBDIRS = ("include", "extras/CUPTI/include", "targets/x86_64-linux/include",
                    "targets/sbsa-linux/include")
_LIB_SUBDIRS = ("lib64", "lib", "extras/CUPTI/lib64", "targets/x86_64-linux/lib",
                "targets/sbsa-linux/lib")


@dataclass(frozen=True)
class CuptiLocation:
    """Where CUPTI was found.

    Attributes
    ----------
    root : Path
        The CUDA toolkit root.
    include_dirs : tuple of Path
        Folders holding ``cupti.h`` and ``cuda.h``.
    library_dir : Path
        Folder holding ``libcupti.so``; it is also the extension's rpath.
    """

    root: Path
    include_dirs: tuple
    library_dir: Path


def _candidate_roots() -> list:
    for var in _ENV_ROOTS:
        value = os.environ.get(var)
        if value:
            return [Path(value)]
    roots = []
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(Path(nvcc).resolve().parent.parent)
    roots.append(Path("/usr/local/cuda"))
    return roots


def _first_with(root: Path, subdirs, filename: str):
    for sub in subdirs:
        if (root / sub / filename).exists():
            return root / sub
    return None


def skip_reason() -> str:
    """Why the extension will not be built here, or ``""`` if it will be."""
    if os.environ.get("DAYDREAM_NO_CUPTI", "") not in ("", "0"):
        return "DAYDREAM_NO_CUPTI is set"
    if locate_cupti() is None:
        tried = ", ".join(str(r) for r in _candidate_roots())
        return f"no CUDA toolkit with CUPTI found (looked in {tried})"
    return ""


def locate_cupti():
    """Find CUPTI.

    Returns
    -------
    CuptiLocation or None
        None when no toolkit root has ``cupti.h``, ``cuda.h`` and ``libcupti.so``.
    """
    for root in _candidate_roots():
        cupti_inc = _first_with(root, _INCLUDE_SUBDIRS, "cupti.h")
        cuda_inc = _first_with(root, _INCLUDE_SUBDIRS, "cuda.h")
        lib = _first_with(root, _LIB_SUBDIRS, "libcupti.so")
        if cupti_inc and cuda_inc and lib:
            incs = tuple(dict.fromkeys([cupti_inc, cuda_inc]))
            return CuptiLocation(root=root.resolve(), include_dirs=incs,
                                 library_dir=lib.resolve())
    return None
