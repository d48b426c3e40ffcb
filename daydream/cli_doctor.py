"""``daydream doctor``: what this machine can trace, and if not, why.

Reports the Python and daydream versions, torch (version, build, CUDA devices)
and the CUPTI extension (built / loaded / usable).  Works without torch and
without CUDA: absent parts are reported, never raised.
"""
from __future__ import annotations

import enum
import importlib
import json
import platform
import sys
from dataclasses import asdict, dataclass, field

import click

from ._cli_util import handle_errors

__all__ = ["doctor", "COMMANDS", "Check", "CheckState", "TorchInfo", "DoctorReport",
           "torch_info", "collect_report", "core_link_check"]


class CheckState(enum.Enum):
    """Outcome of one check."""

    OK = "ok"
    NO = "no"


@dataclass(frozen=True)
class Check:
    """One line of the report: a question, its answer and, when ``NO``, why."""

    name: str
    state: CheckState
    detail: str = ""


@dataclass(frozen=True)
class TorchInfo:
    """What torch says about itself and the GPUs.

    Attributes
    ----------
    installed : bool
    version : str or None
    cuda_build : str or None
        ``torch.version.cuda`` (None for a CPU-only build).
    hip_build : str or None
    debug_build : bool or None
    cudnn_version : int or None
    cuda_available : bool
    devices : tuple of str
        ``"name (sm_XY, N GiB)"`` per visible device.
    reason : str
        Why torch or CUDA is not usable, if it is not.
    """

    installed: bool
    version: str | None = None
    cuda_build: str | None = None
    hip_build: str | None = None
    debug_build: bool | None = None
    cudnn_version: int | None = None
    cuda_available: bool = False
    devices: tuple = ()
    reason: str = ""


@dataclass(frozen=True)
class DoctorReport:
    """Everything ``daydream doctor`` prints."""

    python: str
    platform: str
    daydream: str
    torch: TorchInfo
    cupti: object  # daydream.cupti.ExtensionStatus
    checks: tuple = field(default=())

    @property
    def gpu_source(self) -> str:
        """Where ``daydream trace`` takes GPU activity from on this machine, and why."""
        if not self.torch.cuda_available:
            return "none: torch sees no CUDA device (CPU ops only)"
        if self.cupti.usable:
            return "daydream.cupti, the project's CUPTI extension (--no-cupti: torch.profiler's)"
        return f"torch.profiler's CUDA activity: the CUPTI extension cannot run ({self.cupti.reason})"


def torch_info() -> TorchInfo:
    """Inspect torch without requiring it.

    Returns
    -------
    TorchInfo
        ``installed=False`` with the reason when torch does not import.
    """
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        return TorchInfo(installed=False, reason="torch not installed")
    except Exception as exc:  # a broken install (missing shared library, ...)
        return TorchInfo(installed=False, reason=f"torch failed to import: {exc}")
    version = getattr(torch, "__version__", None)
    tv = getattr(torch, "version", None)
    cuda_build = getattr(tv, "cuda", None)
    hip_build = getattr(tv, "hip", None)
    debug = getattr(tv, "debug", None)
    try:
        cudnn = torch.backends.cudnn.version() if cuda_build else None
    except Exception:
        cudnn = None
    devices = []
    reason = ""
    try:
        available = bool(torch.cuda.is_available())
    except Exception as exc:
        available, reason = False, f"torch.cuda.is_available() failed: {exc}"
    if available:
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            devices.append(f"{props.name} (sm_{props.major}{props.minor}, "
                           f"{props.total_memory / 2**30:.0f} GiB)")
    elif not reason:
        reason = ("torch is a CPU-only build" if not (cuda_build or hip_build)
                  else "torch has CUDA but sees no device (driver missing or "
                       "CUDA_VISIBLE_DEVICES empty?)")
    return TorchInfo(installed=True, version=version, cuda_build=cuda_build,
                     hip_build=hip_build, debug_build=debug, cudnn_version=cudnn,
                     cuda_available=available, devices=tuple(devices), reason=reason)


def _daydream_version() -> str:
    try:
        from importlib.metadata import version

        return version("daydream")
    except Exception:
        from . import __version__

        return __version__


def collect_report() -> DoctorReport:
    """Run every check.

    Returns
    -------
    DoctorReport
    """
    from . import cupti

    tinfo = torch_info()
    status = cupti.extension_status()

    def check(name, ok, detail_ok, detail_no):
        return Check(name, CheckState.OK if ok else CheckState.NO, detail_ok if ok else detail_no)

    cupti_why = status.reason
    checks = (
        check("torch installed", tinfo.installed, tinfo.version or "", tinfo.reason),
        check("torch sees a CUDA device", tinfo.cuda_available,
              ", ".join(tinfo.devices), tinfo.reason or "torch not installed"),
        check("CUPTI extension built", status.built,
              f"CUPTI API {status.cupti_api_version_built}" if status.cupti_api_version_built
              else "", cupti_why),
        check("CUPTI extension loaded", status.loaded,
              f"libcupti {status.cupti_version_runtime}", cupti_why),
        check("CUPTI tracing usable", status.usable,
              f"{status.device_count} device(s), driver {status.driver_version}", cupti_why),
    )
    checks += (core_link_check(),)
    return DoctorReport(python=sys.version.split()[0], platform=platform.platform(),
                        daydream=_daydream_version(), torch=tinfo, cupti=status, checks=checks)


def core_link_check() -> Check:
    """The core-to-core probe (:mod:`daydream.corelink`): a cache line's round trip now."""
    from .corelink import CoreLinkUnavailable, core_to_core_ns

    try:
        ns = core_to_core_ns()
    except CoreLinkUnavailable as exc:
        return Check("core-to-core probe", CheckState.NO, str(exc))
    return Check("core-to-core probe", CheckState.OK,
                 f"{ns:.0f} ns round trip between the first two CPUs (daydream validate records it per row)")


def _as_json(report: DoctorReport) -> str:
    data = asdict(report)
    data["checks"] = [{"name": c.name, "state": c.state.value, "detail": c.detail}
                      for c in report.checks]
    data["gpu_source"] = report.gpu_source
    return json.dumps(data, indent=2, default=str)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@handle_errors
def doctor(as_json: bool) -> None:
    """Check torch, the CUDA device and the CUPTI extension; say what is missing and why."""
    report = collect_report()
    if as_json:
        click.echo(_as_json(report))
        return
    t = report.torch
    click.echo(f"daydream {report.daydream}  python {report.python}  {report.platform}")
    if t.installed:
        build = (f"CUDA {t.cuda_build}" if t.cuda_build else
                 f"ROCm {t.hip_build}" if t.hip_build else "CPU-only")
        extra = f", cuDNN {t.cudnn_version}" if t.cudnn_version else ""
        click.echo(f"torch {t.version}  build: {build}{extra}"
                   f"{'  (debug)' if t.debug_build else ''}")
    else:
        click.echo(f"torch: {t.reason}")
    for c in report.checks:
        line = f"  [{c.state.value:>2}] {c.name}"
        if c.detail:
            line += f": {c.detail}" if c.state is CheckState.OK else f"\n         why: {c.detail}"
        click.echo(line)
    if report.cupti.library_path:
        click.echo(f"  extension: {report.cupti.library_path}")
    click.echo(f"GPU activity for `daydream trace`: {report.gpu_source}")


COMMANDS = [doctor]
