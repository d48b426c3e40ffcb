"""The CUPTI extension: build, decoder (on synthetic in-memory records), errors.

No GPU is needed.  The decoder tests build real ``CUpti_Activity*`` structs in
memory (``daydream._cupti.SyntheticBuffer``) and decode them with the same
code path, including ``cuptiActivityGetNextRecord``, that real CUPTI buffers
go through; every field of every decoded kind is checked.
"""
from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from daydream import cupti, cupti_export
from daydream.errors import DaydreamError

ROOT = Path(__file__).resolve().parents[1]
_ext, _why = cupti.load_extension()
needs_ext = pytest.mark.skipif(_ext is None, reason=f"daydream._cupti not available: {_why}")


def _locate():
    spec = importlib.util.spec_from_file_location("_daydream_locate", ROOT / "cupti_ext" / "locate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses need the module registered
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------
# Build and import


def test_extension_is_built_where_the_toolkit_is():
    """Where CUPTI is found (as in CI), a silently skipped build is a failure."""
    locate = _locate()
    if locate.skip_reason():
        pytest.skip(f"extension not expected here: {locate.skip_reason()}")
    assert _ext is not None, (
        f"CUPTI was found at {locate.locate_cupti().root} but daydream._cupti is missing "
        f"({_why}); reinstall (pip install -e .) or set DAYDREAM_NO_CUPTI=1 to opt out")
    assert _ext.CUPTI_API_VERSION >= 18


def test_locate_honours_opt_out_and_bogus_cuda_home(monkeypatch):
    locate = _locate()
    monkeypatch.setenv("DAYDREAM_NO_CUPTI", "1")
    assert locate.skip_reason() == "DAYDREAM_NO_CUPTI is set"
    monkeypatch.delenv("DAYDREAM_NO_CUPTI")
    monkeypatch.setenv("CUDA_HOME", "/nonexistent/cuda")
    assert locate.locate_cupti() is None
    assert "/nonexistent/cuda" in locate.skip_reason()


def test_import_without_extension_reports_why(monkeypatch):
    """``daydream.cupti`` works with no extension and says why tracing cannot."""
    monkeypatch.setattr(cupti, "_ext_cache", (None, "because of a test"))
    ok, reason = cupti.available()
    assert (ok, reason) == (False, "because of a test")
    status = cupti.extension_status()
    assert status.loaded is False and status.usable is False
    with pytest.raises(cupti.CuptiUnavailableError, match="because of a test"):
        cupti.CuptiTracer().start()
    with pytest.raises(cupti.CuptiUnavailableError):
        cupti.make_collector()


def test_package_imports_with_extension_blocked():
    """A fresh interpreter where the extension cannot import still imports daydream.cupti."""
    code = textwrap.dedent("""
        import sys
        sys.modules["daydream._cupti"] = None   # import raises ImportError
        from daydream import cupti
        ok, reason = cupti.available()
        assert not ok and "daydream._cupti" in reason, reason
        assert cupti.decode is not None and cupti.extension_status().loaded is False
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


@needs_ext
def test_enums_match_cupti_headers():
    for enum_cls, table in [(cupti.ActivityKind, _ext.ACTIVITY_KINDS),
                            (cupti.MemcpyKind, _ext.MEMCPY_KINDS),
                            (cupti.SyncType, _ext.SYNC_TYPES),
                            (cupti.ExternalKind, _ext.EXTERNAL_KINDS)]:
        assert {m.name: m.value for m in enum_cls} == dict(table)


@needs_ext
def test_api_names_resolve_to_the_headers_callback_ids():
    root = _locate().locate_cupti()
    header = {}
    for name in ("cupti_runtime_cbid.h", "cupti_driver_cbid.h"):
        for inc in root.include_dirs:
            if (inc / name).exists():
                header[name] = (inc / name).read_text()
    def cbid(file, symbol):
        return int(re.search(rf"{symbol}\s*=\s*(\d+)", header[file]).group(1))
    assert _ext.api_cbids(["cudaGetDevice", "noSuchApi"]) == [
        cbid("cupti_runtime_cbid.h", "CUPTI_RUNTIME_TRACE_CBID_cudaGetDevice_v3020")]
    assert _ext.api_cbids(["cuKernelGetName"], driver=True) == [
        cbid("cupti_driver_cbid.h", "CUPTI_DRIVER_TRACE_CBID_cuKernelGetName")]
    # every version of a name is taken (cudaLaunchKernel has _v7000 and per-thread-stream forms)
    launch = _ext.api_cbids(["cudaLaunchKernel"])
    assert launch and all(_ext.api_name(c) == "cudaLaunchKernel" for c in launch)
    # the default skip list resolves where this CUPTI knows its names, and skips no launch
    runtime, driver = cupti._skipped_cbids(_ext, cupti.DEFAULT_SKIPPED_APIS, strict=False)
    names = {_ext.api_name(c) for c in runtime} | {_ext.api_name(c, True) for c in driver}
    assert {"cudaGetDevice", "cudaGetLastError", "cuKernelGetName"} <= names <= set(cupti.DEFAULT_SKIPPED_APIS)
    assert not any("Launch" in n or "Memcpy" in n or "Synchronize" in n for n in names)


@needs_ext
def test_an_unknown_api_to_skip_is_refused_before_tracing_starts():
    with pytest.raises(ValueError, match="cudaNoSuchCall"):
        cupti.CuptiTracer(skip_apis=["cudaGetDevice", "cudaNoSuchCall"]).start()
    assert not cupti.CuptiTracer().active


@needs_ext
def test_extension_links_cupti_not_torch():
    libs = subprocess.run(["ldd", _ext.__file__], capture_output=True, text=True).stdout
    assert "libcupti" in libs
    assert "torch" not in libs and "libcudart" not in libs and "libcuda.so" not in libs


# --------------------------------------------------------------------------
# Decoder: every field of every kind

CONCURRENT = int(cupti.ActivityKind.CONCURRENT_KERNEL)


def _row(records, i):
    return {name: records[name][i].item() for name in records.keys()}


def _blank():
    return dict(cupti.sentinels())


@needs_ext
def test_columns_dtypes_and_sentinels():
    buf = _ext.SyntheticBuffer()
    records = cupti.decode(buf)
    assert len(records) == 0
    assert tuple(records.keys()) == tuple(_ext.COLUMNS)
    expected_dtypes = {"kind": np.int16, "start_ns": np.int64, "end_ns": np.int64,
                       "correlation_id": np.uint32, "name_id": np.int32, "bytes": np.int64,
                       "external_id": np.uint64, "graph_node_id": np.uint64, "copy_kind": np.int8}
    for name, dtype in expected_dtypes.items():
        assert records[name].dtype == dtype, name
    assert records.names == () and records.dropped_records == 0


@needs_ext
def test_decode_kernel_every_field():
    buf = _ext.SyntheticBuffer()
    buf.add_kernel(kind=CONCURRENT, start_ns=1_000, end_ns=4_500, correlation_id=17,
                   device_id=2, context_id=3, stream_id=13, name="volta_sgemm_128x64_nn",
                   grid=(80, 2, 1), block=(256, 1, 1), static_shared_bytes=4096,
                   dynamic_shared_bytes=8192, registers_per_thread=96, graph_id=5,
                   graph_node_id=123456789012)
    buf.add_kernel(kind=int(cupti.ActivityKind.KERNEL), start_ns=5_000, end_ns=6_000,
                   correlation_id=18, name="volta_sgemm_128x64_nn")
    records = cupti.decode(buf)
    assert len(records) == 2 and records.names == ("volta_sgemm_128x64_nn",)
    expected = _blank()
    expected.update(kind=CONCURRENT, start_ns=1_000, end_ns=4_500, correlation_id=17,
                    device_id=2, context_id=3, stream_id=13, name_id=0, grid_x=80, grid_y=2,
                    grid_z=1, block_x=256, block_y=1, block_z=1, static_shared_bytes=4096,
                    dynamic_shared_bytes=8192, registers_per_thread=96, graph_id=5,
                    graph_node_id=123456789012)
    assert _row(records, 0) == expected
    second = _row(records, 1)
    assert second["kind"] == int(cupti.ActivityKind.KERNEL)
    assert second["name_id"] == 0  # one string-table entry for both
    assert (second["start_ns"], second["end_ns"], second["correlation_id"]) == (5_000, 6_000, 18)
    assert records.name(1) == "volta_sgemm_128x64_nn"


@needs_ext
def test_decode_memcpy_every_field():
    buf = _ext.SyntheticBuffer()
    buf.add_memcpy(start_ns=10, end_ns=2_010, correlation_id=40, device_id=1, context_id=2,
                   stream_id=7, bytes=1 << 33, copy_kind=int(cupti.MemcpyKind.HTOD),
                   src_kind=2, dst_kind=3, flags=1, graph_id=9, graph_node_id=77)
    records = cupti.decode(buf)
    expected = _blank()
    expected.update(kind=int(cupti.ActivityKind.MEMCPY), start_ns=10, end_ns=2_010,
                    correlation_id=40, device_id=1, context_id=2, stream_id=7,
                    bytes=1 << 33, copy_kind=int(cupti.MemcpyKind.HTOD), src_kind=2,
                    dst_kind=3, flags=1, graph_id=9, graph_node_id=77)
    assert _row(records, 0) == expected
    assert records.name(0) is None


@needs_ext
def test_decode_peer_to_peer_memcpy_every_field():
    buf = _ext.SyntheticBuffer()
    buf.add_memcpy_ptop(start_ns=100, end_ns=900, correlation_id=41, device_id=0,
                        context_id=1, stream_id=21, bytes=4096, src_device_id=0,
                        dst_device_id=3, src_kind=3, dst_kind=3, flags=1)
    expected = _blank()
    expected.update(kind=int(cupti.ActivityKind.MEMCPY2), start_ns=100, end_ns=900,
                    correlation_id=41, device_id=0, context_id=1, stream_id=21, bytes=4096,
                    copy_kind=int(cupti.MemcpyKind.PTOP), src_kind=3, dst_kind=3,
                    src_device_id=0, dst_device_id=3, flags=1, graph_id=0, graph_node_id=0)
    assert _row(cupti.decode(buf), 0) == expected


@needs_ext
def test_decode_memset_every_field():
    buf = _ext.SyntheticBuffer()
    buf.add_memset(start_ns=50, end_ns=75, correlation_id=42, device_id=1, context_id=4,
                   stream_id=8, bytes=1024, value=0xAB, memory_kind=3, flags=1, graph_id=2,
                   graph_node_id=3)
    expected = _blank()
    expected.update(kind=int(cupti.ActivityKind.MEMSET), start_ns=50, end_ns=75,
                    correlation_id=42, device_id=1, context_id=4, stream_id=8, bytes=1024,
                    memset_value=0xAB, memory_kind=3, flags=1, graph_id=2, graph_node_id=3)
    assert _row(cupti.decode(buf), 0) == expected


@needs_ext
def test_decode_runtime_and_driver_api_every_field():
    buf = _ext.SyntheticBuffer()
    buf.add_api(cbid=211, start_ns=300, end_ns=340, correlation_id=43, process_id=4242,
                thread_id=777, return_value=0)
    buf.add_api(kind=int(cupti.ActivityKind.DRIVER), cbid=307, start_ns=310, end_ns=330,
                correlation_id=44, process_id=4242, thread_id=777, return_value=1)
    buf.add_api(cbid=211, start_ns=400, end_ns=420, correlation_id=45)
    records = cupti.decode(buf)
    assert records.names == ("cudaLaunchKernel", "cuLaunchKernel")  # version suffix cut
    expected = _blank()
    expected.update(kind=int(cupti.ActivityKind.RUNTIME), start_ns=300, end_ns=340,
                    correlation_id=43, cbid=211, process_id=4242, thread_id=777,
                    return_value=0, name_id=0)
    assert _row(records, 0) == expected
    expected.update(kind=int(cupti.ActivityKind.DRIVER), start_ns=310, end_ns=330,
                    correlation_id=44, cbid=307, return_value=1, name_id=1)
    assert _row(records, 1) == expected
    assert records["name_id"][2] == 0


@needs_ext
def test_decode_synchronization_every_field():
    buf = _ext.SyntheticBuffer()
    buf.add_sync(sync_type=int(cupti.SyncType.STREAM_SYNCHRONIZE), start_ns=500, end_ns=800,
                 correlation_id=46, context_id=1, stream_id=7, return_value=0)
    buf.add_sync(sync_type=int(cupti.SyncType.EVENT_SYNCHRONIZE), start_ns=900, end_ns=950,
                 correlation_id=47, context_id=1, cuda_event_id=12, return_value=0)
    buf.add_sync(sync_type=int(cupti.SyncType.CONTEXT_SYNCHRONIZE), start_ns=1000,
                 end_ns=1100, correlation_id=48, context_id=2, return_value=3)
    records = cupti.decode(buf)
    expected = _blank()
    expected.update(kind=int(cupti.ActivityKind.SYNCHRONIZATION), start_ns=500, end_ns=800,
                    correlation_id=46, context_id=1, stream_id=7,
                    sync_type=int(cupti.SyncType.STREAM_SYNCHRONIZE), return_value=0)
    assert _row(records, 0) == expected
    expected.update(start_ns=900, end_ns=950, correlation_id=47, stream_id=-1,
                    cuda_event_id=12, sync_type=int(cupti.SyncType.EVENT_SYNCHRONIZE))
    assert _row(records, 1) == expected
    # "not applicable" (CUPTI_SYNCHRONIZATION_INVALID_VALUE) becomes -1
    expected.update(start_ns=1000, end_ns=1100, correlation_id=48, context_id=2,
                    stream_id=-1, cuda_event_id=-1, return_value=3,
                    sync_type=int(cupti.SyncType.CONTEXT_SYNCHRONIZE))
    assert _row(records, 2) == expected


@needs_ext
def test_decode_external_correlation_every_field():
    buf = _ext.SyntheticBuffer()
    buf.add_external_correlation(external_kind=int(cupti.ExternalKind.CUSTOM1),
                                 external_id=2**63 + 5, correlation_id=49)
    expected = _blank()
    expected.update(kind=int(cupti.ActivityKind.EXTERNAL_CORRELATION), correlation_id=49,
                    external_kind=int(cupti.ExternalKind.CUSTOM1), external_id=2**63 + 5)
    assert _row(cupti.decode(buf), 0) == expected


@needs_ext
def test_undecoded_kinds_are_counted_not_rows():
    buf = _ext.SyntheticBuffer()
    buf.add_overhead(start_ns=1, end_ns=2)
    buf.add_kernel(start_ns=3, end_ns=4, correlation_id=1, name="k")
    records = cupti.decode(buf)
    assert len(records) == 1
    assert dict(records.skipped_by_kind) == {int(cupti.ActivityKind.OVERHEAD): 1}
    assert records.stats["records_seen"] == 2 and records.stats["walk_error"] == 0


@needs_ext
def test_row_limit_drops_and_counts():
    buf = _ext.SyntheticBuffer()
    for i in range(5):
        buf.add_kernel(start_ns=i, end_ns=i + 1, correlation_id=i + 1, name=f"k{i % 2}")
    records = cupti.decode(buf, max_rows=3)
    assert len(records) == 3 and records.dropped_records == 2
    assert records["correlation_id"].tolist() == [1, 2, 3]
    assert records.names == ("k0", "k1")


@needs_ext
def test_mixed_buffer_order_mask_and_readonly_arrays():
    buf = _ext.SyntheticBuffer()
    buf.add_api(cbid=211, start_ns=1, end_ns=2, correlation_id=1)
    buf.add_kernel(start_ns=3, end_ns=9, correlation_id=1, name="a")
    buf.add_memcpy(start_ns=10, end_ns=12, correlation_id=2, bytes=8, copy_kind=2)
    buf.add_memset(start_ns=13, end_ns=14, correlation_id=3, bytes=8)
    buf.add_sync(sync_type=3, start_ns=15, end_ns=20, correlation_id=4, stream_id=7)
    buf.add_external_correlation(external_kind=3, external_id=99, correlation_id=1)
    assert len(buf) == 6 and buf.size_bytes % 8 == 0
    records = cupti.decode(buf)
    assert records["kind"].tolist() == [5, 10, 1, 2, 38, 39]
    assert records.mask(cupti.ActivityKind.CONCURRENT_KERNEL,
                        cupti.ActivityKind.MEMCPY).tolist() == [False, True, True, False,
                                                                 False, False]
    with pytest.raises(ValueError):
        records["start_ns"][0] = 5
    as_dict = records.as_dict()
    assert as_dict["names"] == ["cudaLaunchKernel", "a"] and as_dict["dropped_records"] == 0


@needs_ext
def test_attach_external_ids_joins_kernels_to_cpu_ops():
    buf = _ext.SyntheticBuffer()
    buf.add_api(cbid=211, start_ns=1, end_ns=2, correlation_id=10)
    buf.add_kernel(start_ns=5, end_ns=9, correlation_id=10, name="relu")
    buf.add_api(cbid=211, start_ns=3, end_ns=4, correlation_id=11)
    buf.add_kernel(start_ns=9, end_ns=12, correlation_id=11, name="add")
    buf.add_kernel(start_ns=12, end_ns=13, correlation_id=12, name="untagged")
    buf.add_external_correlation(external_kind=3, external_id=1001, correlation_id=10)
    buf.add_external_correlation(external_kind=4, external_id=5, correlation_id=10)
    buf.add_external_correlation(external_kind=3, external_id=1002, correlation_id=11)
    records = cupti.decode(buf)
    ids = cupti.attach_external_ids(records, cupti.ExternalKind.CUSTOM0)
    assert ids.tolist()[:5] == [1001, 1001, 1002, 1002, 0]
    ids1 = cupti.attach_external_ids(records, cupti.ExternalKind.CUSTOM1)
    assert ids1.tolist()[:5] == [5, 5, 0, 0, 0]
    events = cupti_export._chrome_events(records)
    kernels = {e["name"]: e for e in events if e["cat"] == "kernel"}
    assert kernels["relu"]["args"]["External id"] == 5  # no kind: the last record wins
    assert kernels["add"] == {"ph": "X", "cat": "kernel", "name": "add", "pid": 0, "tid": 7,
                              "ts": 0.009, "dur": 0.003,
                              "args": {"correlation": 11, "External id": 1002, "device": 0,
                                       "stream": 7, "grid": [1, 1, 1], "block": [1, 1, 1],
                                       "registers per thread": 0, "shared memory": 0}}
    runtime = [e for e in events if e["cat"] == "cuda_runtime"]
    assert [(e["name"], e["pid"], e["tid"]) for e in runtime] == [("cudaLaunchKernel", 100, 200)] * 2


@needs_ext
def test_exported_kernels_are_named_as_kineto_names_them():
    """CUPTI gives the mangled symbol; Kineto's traces (and the H200 pair in tests/data) the
    demangled one.  Names that are not mangled pass through."""
    buf = _ext.SyntheticBuffer()
    mangled = "_ZN2at6native29vectorized_elementwise_kernelILi4EfEEviT0_"
    buf.add_kernel(start_ns=1, end_ns=2, correlation_id=1, name=mangled)
    buf.add_kernel(start_ns=2, end_ns=3, correlation_id=2, name="sm80_xmma_gemm_f32f32")
    records = cupti.decode(buf)
    assert list(records.names) == [mangled, "sm80_xmma_gemm_f32f32"]  # the records keep CUPTI's name
    names = [e["name"] for e in cupti_export._chrome_events(records) if e["cat"] == "kernel"]
    assert names == ["void at::native::vectorized_elementwise_kernel<4, float>(int, float)",
                     "sm80_xmma_gemm_f32f32"]


def test_export_names_are_reexported_whichever_module_is_imported_first():
    for name in cupti.__all__:
        assert getattr(cupti, name) is not None
    assert cupti.make_collector is cupti_export.make_collector
    assert "make_collector" in cupti.__all__ and "make_collector" in cupti_export.__all__
    with pytest.raises(AttributeError):
        cupti.no_such_name  # noqa: B018
    code = ("import daydream.cupti_export as e; from daydream.cupti import *; "
            "assert CuptiKernelCollector is e.CuptiKernelCollector")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


# --------------------------------------------------------------------------
# Tracing without a GPU: a clear error, never a crash


def _has_gpu() -> bool:
    return _ext is not None and _ext.probe_driver()[0] == ""


@needs_ext
@pytest.mark.skipif(_has_gpu(), reason="a GPU is present")
def test_start_without_gpu_raises_clear_error():
    tracer = cupti.CuptiTracer()
    with pytest.raises(cupti.CuptiUnavailableError) as info:
        tracer.start()
    assert isinstance(info.value, DaydreamError)
    assert "unavailable" in str(info.value) and ("libcuda" in str(info.value)
                                                 or "device" in str(info.value))
    assert tracer.active is False
    with pytest.raises(cupti.CuptiStateError, match="not running"):
        tracer.stop()
    status = cupti.extension_status()
    assert status.built and status.loaded and not status.usable
    assert status.reason == str(info.value).split("unavailable: ", 1)[1]


@needs_ext
@pytest.mark.skipif(_has_gpu(), reason="a GPU is present")
def test_external_correlation_without_gpu_is_typed_cupti_error():
    with pytest.raises(cupti.CuptiError) as info:
        cupti.push_external_correlation_id(7)
    err = info.value
    assert err.call == "cuptiActivityPushExternalCorrelationId"
    assert err.result.startswith("CUPTI_ERROR_") and isinstance(err.code, int)
    assert err.result in str(err)


@needs_ext
@pytest.mark.skipif(_has_gpu(), reason="a GPU is present")
def test_interpreter_exit_after_failed_start_does_not_hang():
    code = textwrap.dedent("""
        from daydream import cupti
        try:
            cupti.CuptiTracer().start()
        except cupti.CuptiUnavailableError:
            pass
        cupti._shutdown_at_exit()
        print("exited")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "exited"


def test_tracer_rejects_bad_options():
    with pytest.raises(ValueError):
        cupti.CuptiTracer(buffer_bytes=1000)
    with pytest.raises(ValueError):
        cupti.CuptiTracer(max_buffers=0)
    assert cupti.CuptiTracer(kinds=[10]).kinds == (cupti.ActivityKind.CONCURRENT_KERNEL,)


@needs_ext
@pytest.mark.skipif(not _has_gpu(), reason="needs a CUDA GPU and torch with CUDA")
def test_trace_real_kernels_on_gpu():  # pragma: no cover - runs only on GPU machines
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    x = torch.randn(256, 256, device="cuda")
    torch.cuda.synchronize()
    tracer = cupti.CuptiTracer()
    with tracer:
        with cupti.external_correlation(4242):
            y = x @ x
        torch.cuda.synchronize()
    records = tracer.records
    kernels = records.mask(cupti.ActivityKind.CONCURRENT_KERNEL)
    assert kernels.any()
    assert (records["end_ns"][kernels] >= records["start_ns"][kernels]).all()
    assert 4242 in cupti.attach_external_ids(records)[kernels].tolist()
    assert records.dropped_records == 0
    del y
