"""``daydream doctor``: runs everywhere, reports what is missing and why."""
from __future__ import annotations

import json
import sys
import types

import pytest
from click.testing import CliRunner

from daydream.cli import main  # first: cli imports cli_doctor while registering
from daydream import cli_doctor, cupti  # noqa: E402


def _run(*args):
    result = CliRunner().invoke(main, ["doctor", *args])
    assert result.exit_code == 0, result.output
    return result.output


def test_doctor_lists_every_check():
    out = _run()
    for name in ("torch installed", "torch sees a CUDA device", "CUPTI extension built",
                 "CUPTI extension loaded", "CUPTI tracing usable"):
        assert name in out
    status = cupti.extension_status()
    if not status.usable:
        assert f"why: {status.reason}" in out


def test_doctor_json_matches_library_view():
    data = json.loads(_run("--json"))
    status = cupti.extension_status()
    assert data["cupti"]["built"] == status.built
    assert data["cupti"]["loaded"] == status.loaded
    assert data["cupti"]["usable"] == status.usable
    assert data["cupti"]["reason"] == status.reason
    states = {c["name"]: c["state"] for c in data["checks"]}
    assert states["CUPTI tracing usable"] == ("ok" if status.usable else "no")
    assert data["daydream"] and data["python"] == sys.version.split()[0]


def test_doctor_without_torch(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    out = _run()
    assert "torch: torch not installed" in out
    assert "[no] torch installed" in out
    data = json.loads(_run("--json"))
    assert data["torch"] == {"installed": False, "version": None, "cuda_build": None,
                             "hip_build": None, "debug_build": None, "cudnn_version": None,
                             "cuda_available": False, "devices": [],
                             "reason": "torch not installed"}


def test_doctor_reports_why_extension_is_missing(monkeypatch):
    monkeypatch.setattr(cupti, "_ext_cache", (None, "no CUDA toolkit at build time (test)"))
    out = _run()
    assert "[no] CUPTI extension loaded" in out
    assert "[no] CUPTI tracing usable" in out
    assert "why: no CUDA toolkit at build time (test)" in out
    source = json.loads(_run("--json"))["gpu_source"]
    assert f"GPU activity for `daydream trace`: {source}" in out
    assert not source.startswith("daydream.cupti")


@pytest.mark.parametrize("cuda, usable, expected", [
    (False, True, "none: torch sees no CUDA device"),
    (True, True, "daydream.cupti"),
    (True, False, "torch.profiler's CUDA activity: the CUPTI extension cannot run (no driver (test))"),
])
def test_doctor_says_where_trace_takes_gpu_activity_from(cuda, usable, expected):
    report = cli_doctor.DoctorReport("3", "linux", "0", types.SimpleNamespace(cuda_available=cuda),
                                     types.SimpleNamespace(usable=usable, reason="no driver (test)"))
    assert report.gpu_source.startswith(expected)


def _fake_torch(cuda: str | None, available: bool):
    props = types.SimpleNamespace(name="Fake GPU", major=9, minor=0, total_memory=80 * 2**30)
    return types.SimpleNamespace(
        __version__="9.9.9",
        version=types.SimpleNamespace(cuda=cuda, hip=None, debug=False),
        backends=types.SimpleNamespace(cudnn=types.SimpleNamespace(version=lambda: 91000)),
        cuda=types.SimpleNamespace(is_available=lambda: available, device_count=lambda: 2,
                                   get_device_properties=lambda i: props),
    )


@pytest.mark.parametrize("cuda, available, devices, reason", [
    (None, False, (), "torch is a CPU-only build"),
    ("13.0", False, (), "torch has CUDA but sees no device"),
    ("13.0", True, ("Fake GPU (sm_90, 80 GiB)",) * 2, ""),
])
def test_torch_info_build_and_devices(monkeypatch, cuda, available, devices, reason):
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(cuda, available))
    info = cli_doctor.torch_info()
    assert info.installed and info.version == "9.9.9" and info.cuda_build == cuda
    assert info.cuda_available is available and info.devices == devices
    assert info.reason.startswith(reason)
    assert info.cudnn_version == (91000 if cuda else None)
