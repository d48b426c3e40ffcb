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


def optional_extension(name: str, sources: list, opt_out: str, what: str, without: str) -> list:
    """A pure C++17 + pybind11 extension ``daydream.<name>`` that daydream can do without.

    Nothing when pybind11 is missing or the environment variable ``opt_out`` is
    set; a failed compile only logs (``optional=True``) and ``without`` says
    what daydream then does instead.
    """
    if os.environ.get(opt_out, "") not in ("", "0"):
        _log(f"not building {what}: {opt_out} is set")
        return []
    try:
        import pybind11
    except ImportError:
        _log(f"not building {what}: pybind11 is not installed ({without})")
        return []
    return [
        Extension(
            f"daydream.{name}",
            sources=sources,
            include_dirs=[pybind11.get_include()],
            language="c++",
            extra_compile_args=["-std=c++17", "-O2", "-g0", "-fvisibility=hidden", "-Wall"],
            optional=True,
        )
    ]


#: The optional extensions besides CUPTI: the simulator core (fallback: the reference
#: simulator, daydream/sim/reference.py, identical results, slower), the Kineto JSON
#: scanner (fallback: orjson/json in daydream/loader/kineto.py, same results, slower)
#: and the core-to-core probe (fallback: none; validate and doctor then leave the
#: figure out, see daydream/corelink.py).
OPTIONAL_EXTENSIONS = [
    ("_simcore", ["daydream/sim/_simcore.cpp"], "DAYDREAM_NO_SIMCORE", "the simulator core",
     "pure-Python simulator used"),
    ("_kineto", ["daydream/loader/_kineto.cpp", "daydream/loader/_kineto_passes.cpp"], "DAYDREAM_NO_KINETO_EXT",
     "the Kineto scanner", "Python loader used"),
    ("_corelink", ["daydream/_corelink.cpp"], "DAYDREAM_NO_CORELINK", "the core-to-core probe",
     "no core-to-core figures"),
]


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


setup(packages=daydream_packages(), ext_modules=cupti_extensions() + [e for spec in OPTIONAL_EXTENSIONS for e in optional_extension(*spec)])
