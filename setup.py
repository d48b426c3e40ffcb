"""Build hook: the optional C++ extension ``daydream._cupti`` and the package list.

It also lists the packages (see ``daydream_packages``); everything else about
the package lives in ``pyproject.toml``.  The extension
is built when a CUDA toolkit with CUPTI is found (see ``cupti_ext/locate.py``)
and pybind11 is importable; otherwise, or if compiling fails, the package
installs without it and ``daydream doctor`` says why.  Set
``DAYDREAM_REQUIRE_CUPTI=1`` to make a failed build an error instead.
It needs no torch and links libcupti only.
"""
import os
import sys
from pathlib import Path

from setuptools import Extension, find_packages, setup

HERE = Path(__file__).parent.resolve()
sys.path.insert(0, str(HERE / "cupti_ext"))
from locate import locate_cupti, skip_reason  # noqa: E402

sys.path.pop(0)


def _log(message: str) -> None:
    print(f"daydream: {message}", file=sys.stderr)


def cupti_extensions():
    """The extension list: empty when CUPTI or pybind11 is missing."""
    required = os.environ.get("DAYDREAM_REQUIRE_CUPTI", "") not in ("", "0")
    why = skip_reason()
    if not why:
        try:
            import pybind11
        except ImportError:
            why = "pybind11 is not installed in the build environment"
    if why:
        if required:
            raise SystemExit(f"daydream: DAYDREAM_REQUIRE_CUPTI is set but {why}")
        _log(f"not building the CUPTI extension: {why}")
        return []
    loc = locate_cupti()
    _log(f"building the CUPTI extension against {loc.root}")
    sources = sorted(str(p.relative_to(HERE)) for p in (HERE / "cupti_ext").glob("*.cpp"))
    return [
        Extension(
            "daydream._cupti",
            sources=sources,
            include_dirs=[pybind11.get_include(), "cupti_ext", *map(str, loc.include_dirs)],
            library_dirs=[str(loc.library_dir)],
            runtime_library_dirs=[str(loc.library_dir)],
            libraries=["cupti", "dl"],
            language="c++",
            extra_compile_args=["-std=c++17", "-O2", "-g0", "-fvisibility=hidden", "-Wall"],
            optional=not required,
        )
    ]


# ---- BEGIN daydream._simcore (owner: performance/issue 6) -----------------------------
# The compiled simulator core: pure C++17 + pybind11, no CUDA, always optional.  If it
# does not build, daydream falls back to the reference simulator (daydream/sim/reference.py)
# with identical results, only slower.  DAYDREAM_NO_SIMCORE=1 skips it.
def simcore_extensions():
    """The ``daydream._simcore`` extension, or nothing when pybind11 is missing or opted out."""
    if os.environ.get("DAYDREAM_NO_SIMCORE", "") not in ("", "0"):
        _log("not building the simulator core: DAYDREAM_NO_SIMCORE is set")
        return []
    try:
        import pybind11
    except ImportError:
        _log("not building the simulator core: pybind11 is not installed (pure-Python simulator used)")
        return []
    return [
        Extension(
            "daydream._simcore",
            sources=["daydream/sim/_simcore.cpp"],
            include_dirs=[pybind11.get_include()],
            language="c++",
            extra_compile_args=["-std=c++17", "-O2", "-g0", "-fvisibility=hidden", "-Wall"],
            optional=True,
        )
    ]
# ---- END daydream._simcore -------------------------------------------------------------


# ---- BEGIN daydream._kineto (owner: performance/issue 6, loader fast path) ---------------
# The compiled Kineto JSON scanner: pure C++17 + pybind11, always optional.  Without it the
# loader parses with orjson/json (daydream/loader/kineto.py), same results, slower.
# DAYDREAM_NO_KINETO_EXT=1 skips it.
def kineto_extensions():
    """The ``daydream._kineto`` extension, or nothing when pybind11 is missing or opted out."""
    if os.environ.get("DAYDREAM_NO_KINETO_EXT", "") not in ("", "0"):
        _log("not building the Kineto scanner: DAYDREAM_NO_KINETO_EXT is set")
        return []
    try:
        import pybind11
    except ImportError:
        _log("not building the Kineto scanner: pybind11 is not installed (Python loader used)")
        return []
    return [
        Extension(
            "daydream._kineto",
            sources=["daydream/loader/_kineto.cpp", "daydream/loader/_kineto_passes.cpp"],
            include_dirs=[pybind11.get_include()],
            language="c++",
            extra_compile_args=["-std=c++17", "-O2", "-g0", "-fvisibility=hidden", "-Wall"],
            optional=True,
        )
    ]
# ---- END daydream._kineto --------------------------------------------------------------


def daydream_packages():
    """``daydream`` and its subpackages, plus ``optimizations/`` as ``daydream.optimizations``.

    Discovered rather than listed, so a new subpackage cannot be forgotten and a
    planned one that does not exist yet cannot break the build.  The folder
    mapping itself is ``[tool.setuptools.package-dir]`` in pyproject.toml.
    """
    packages = ["daydream"] + [f"daydream.{p}" for p in find_packages(where=str(HERE / "daydream"))]
    if (HERE / "optimizations" / "__init__.py").exists():
        packages.append("daydream.optimizations")
        packages += [f"daydream.optimizations.{p}"
                     for p in find_packages(where=str(HERE / "optimizations"))]
    return packages


setup(packages=daydream_packages(), ext_modules=cupti_extensions() + simcore_extensions() + kineto_extensions())
