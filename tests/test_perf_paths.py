"""Fast paths of issue 6: parallel loading, memory check, progress, amortised graph growth."""
from __future__ import annotations

import gzip
import io
import json

import numpy as np
import pytest

from daydream.errors import TraceError
from daydream.graph.graph import DependencyGraph, EdgeKind
from daydream.loader import fast, load_trace, memory
from daydream.loader.io import _parse_json
from daydream.model import Lane, LaneKind
from daydream.progress import Progress, Stages

from conftest import public_traces


def _sampled():
    ps = [p for p in public_traces() if p.name.startswith("sampled_rank-")]
    if len(ps) < 2:
        pytest.skip("public traces absent")
    return ps


def _same_trace(a, b):
    assert [r.rank for r in a] == [r.rank for r in b]
    for x, y in zip(a, b):
        assert x.names.strings == y.names.strings and x.lanes == y.lanes and x.layers.strings == y.layers.strings
        assert x.cols.keys() == y.cols.keys()
        for k in x.cols:
            np.testing.assert_array_equal(x.cols[k], y.cols[k])
        np.testing.assert_array_equal(x.boundaries_ns, y.boundaries_ns)


def test_parallel_loading_gives_the_serial_result():
    ps = _sampled()
    _same_trace(load_trace(ps, workers=2), load_trace(ps, workers=1))


@pytest.mark.parametrize("fast_loader", ["1", "0"])
def test_too_large_for_memory_is_one_clear_error(tmp_path, monkeypatch, fast_loader):
    monkeypatch.setenv("DAYDREAM_FAST_LOADER", fast_loader)
    p = tmp_path / "big.json"
    p.write_text(json.dumps({"traceEvents": []}) + " " * 100_000)
    need = memory.needed_bytes(str(p))          # the compiled scanner needs far less than Python objects
    assert need == p.stat().st_size * (memory.FAST_BYTES_PER_JSON_BYTE if fast.enabled() else
                                       memory.BYTES_PER_JSON_BYTE)
    monkeypatch.setattr(memory, "available_bytes", lambda: need - 1)
    with pytest.raises(TraceError) as exc:
        load_trace(p)
    msg = str(exc.value)
    assert msg.startswith(str(p)) and "too large for memory" in msg
    assert memory.format_bytes(need) in msg and "available" in msg and "\n" not in msg


def test_a_document_the_scanner_declines_is_checked_again_for_the_reference_parse(tmp_path, monkeypatch):
    if not fast.enabled():
        pytest.skip("the compiled loader is not built")
    p = tmp_path / "nan.json"     # NaN: the scanner declines, the reference loader parses
    p.write_text('{"traceEvents": [{"ph": "X", "name": "a", "ts": NaN, "dur": 1, "pid": 1, "tid": 1}]}'
                 + " " * 100_000)
    size = p.stat().st_size
    monkeypatch.setattr(memory, "available_bytes", lambda: size * memory.FAST_BYTES_PER_JSON_BYTE + 1)
    with pytest.raises(TraceError, match="compiled loader declined it") as exc:
        load_trace(p)
    assert str(exc.value).startswith(str(p)) and "\n" not in str(exc.value)


def test_memory_check_can_be_turned_off(tmp_path, monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda: 10)
    monkeypatch.setenv("DAYDREAM_MEMORY_CHECK", "0")
    memory.check_memory([__file__], 1)
    assert memory.max_workers_for([__file__], 4) == 4


def test_workers_are_capped_by_memory(monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda: memory.needed_bytes(__file__) * 2 + 1)
    assert memory.max_workers_for([__file__] * 8, 8) == 2


def test_json_bytes_reads_the_gzip_trailer(tmp_path):
    raw = b'{"traceEvents": []}' * 1000
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(raw))
    assert memory.json_bytes(str(p)) == len(raw)


def test_stdlib_fallback_accepts_what_orjson_refuses():
    assert _parse_json("x", b'{"a": NaN}')["a"] != 0
    with pytest.raises(TraceError, match="not JSON"):
        _parse_json("x", b'{"a": ')


def test_progress_is_quiet_then_reports(monkeypatch):
    monkeypatch.setenv("DAYDREAM_PROGRESS", "1")
    out = io.StringIO()
    p = Progress("loading", total=2, unit="files", delay_s=0.0, every_s=0.0, stream=out)
    p.step(note="a")
    p.step(note="b")
    p.finish()
    assert out.getvalue().splitlines()[0].startswith("loading: 1/2 files")
    assert "done, 2 files" in out.getvalue()
    quiet = io.StringIO()
    p = Progress("loading", total=2, delay_s=60.0, stream=quiet)
    p.step()
    p.finish()
    assert quiet.getvalue() == ""
    st = Stages("replay", delay_s=0.0, stream=out)
    st.enter("simulating")
    assert "replay: simulating..." in out.getvalue()


def test_add_tasks_and_edges_grow_amortised_and_stay_correct():
    g = DependencyGraph()
    lane = g.add_lane(Lane(0, LaneKind.CPU_THREAD, 1, 1))
    for k in range(300):
        ids = g.add_tasks(lane=[lane, lane], dur_ns=[k, k + 1], name=[0, 0])
        g.lane_tasks[lane].extend(ids.tolist())
        g.add_edges(int(ids[0]), int(ids[1]), EdgeKind.DATA, lag_ns=k)
    assert g.n_tasks == 600 and g.n_edges == 300
    assert g.tasks["dur_ns"][:4].tolist() == [0, 1, 1, 2] and g.edges["lag_ns"][-1] == 299
    h = g.copy()
    g.tasks["dur_ns"] = g.tasks["dur_ns"] * 2        # replaced from outside: growth restarts from it
    g.add_tasks(lane=[lane], dur_ns=[7], name=[0])
    assert g.tasks["dur_ns"][-2:].tolist() == [2 * 300, 7] and len(g.tasks["lane"]) == 601
    assert h.n_tasks == 600 and h.tasks["dur_ns"][-1] == 300
