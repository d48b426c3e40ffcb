"""Loader formats and bad input: one line naming the file, exit 2, no traceback."""
from __future__ import annotations

import gzip
import json
import tarfile

import pytest
from click.testing import CliRunner

from daydream import load_trace
from daydream.cli import main
from daydream.errors import NoIterationsError, TraceError


def _doc(extra=(), steps=2):
    ev, t = [], 0
    for s in range(steps):
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 1, "tid": 1,
                   "ts": t, "dur": 100})
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t + 10, "dur": 50})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                   "ts": t + 20, "dur": 5, "args": {"correlation": 100 + s}})
        ev.append({"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": t + 30, "dur": 40,
                   "args": {"correlation": 100 + s, "device": 0, "stream": 7}})
        t += 100
    return {"traceEvents": ev + list(extra)}


def _write(path, doc, gz=False):
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def run_cli(*args):
    return CliRunner().invoke(main, list(map(str, args)))


def assert_one_line_error(res, *needles):
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    assert "Traceback" not in res.output
    for n in needles:
        assert n in lines[0]


def test_plain_gzip_directory_and_tar_load(tmp_path):
    a = _write(tmp_path / "rank0.json", _doc())
    b = _write(tmp_path / "rank1.json.gz", _doc(), gz=True)
    assert [r.rank for r in load_trace([a, b])] == [0, 1]
    assert len(load_trace(tmp_path)) == 2
    tar = tmp_path / "ranks.tar.gz"
    with tarfile.open(tar, "w:gz") as tf:
        for p in (a, b):
            tf.add(p, arcname=f"job/{p.name}")
    t = load_trace(tar)
    assert [r.rank for r in t] == [0, 1] and t.ranks[0].source.endswith("job/rank0.json")
    r = load_trace(a).ranks[0]
    assert r.n_iterations == 2 and list(r.iteration_times_ns()) == [100_000, 100_000]


def test_times_become_integer_nanoseconds(tmp_path):
    doc = _doc()
    doc["traceEvents"][1]["ts"] = 10.001
    r = load_trace(_write(tmp_path / "t.json", doc)).ranks[0]
    assert r.cols["start_ns"].dtype.kind == "i"
    assert 10_001 in r.cols["start_ns"].tolist()


@pytest.mark.parametrize("content,needle", [
    (b"this is not json", "not JSON"),
    (b"", "empty file"),
    (b'{"foo": 1}', "no 'traceEvents'"),
    (b'{"traceEvents": []}', "empty trace"),
])
def test_bad_files_give_one_line(tmp_path, content, needle):
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    with pytest.raises(TraceError, match=needle):
        load_trace(p)
    assert_one_line_error(run_cli("replay", p), str(p), needle)


def test_truncated_gzip(tmp_path):
    p = tmp_path / "cut.json.gz"
    p.write_bytes(gzip.compress(json.dumps(_doc()).encode())[:-30])
    assert_one_line_error(run_cli("replay", p), str(p), "truncated or corrupt gzip")


def test_missing_file(tmp_path):
    assert_one_line_error(run_cli("info", tmp_path / "nope.json"), "nope.json", "no such file")


def test_no_iterations_says_how_to_mark(tmp_path):
    doc = _doc()
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not e["name"].startswith("ProfilerStep")]
    p = _write(tmp_path / "t.json", doc)
    with pytest.raises(NoIterationsError):
        load_trace(p)
    assert_one_line_error(run_cli("replay", p), str(p), "--iteration-marker")
    res = run_cli("replay", p, "--iteration-marker", "^aten::mm$")
    assert res.exit_code == 0, res.output


def test_bad_marker_regex(tmp_path):
    p = _write(tmp_path / "t.json", _doc())
    assert_one_line_error(run_cli("replay", p, "--iteration-marker", "("), "bad --iteration-marker")


def test_missing_and_duplicated_correlations_are_repaired_and_reported(tmp_path):
    doc = _doc()
    ev = doc["traceEvents"]
    ev.append({"ph": "X", "cat": "kernel", "name": "orphan", "pid": 0, "tid": 7, "ts": 75, "dur": 3,
               "args": {"correlation": 999, "device": 0, "stream": 7}})
    ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
               "ts": 80, "dur": 2, "args": {"correlation": 100}})
    p = _write(tmp_path / "t.json", doc)
    res = run_cli("replay", p)
    assert res.exit_code == 0
    assert "1 x GPU tasks without a launching call" in res.stderr
    assert "1 x duplicated correlation ids" in res.stderr


def test_output_not_overwritten_without_force(tmp_path):
    p = _write(tmp_path / "t.json", _doc())
    out = tmp_path / "sim.json"
    out.write_text("precious")
    assert_one_line_error(run_cli("replay", p, "-o", out), "exists", "--force")
    assert out.read_text() == "precious"
    assert run_cli("replay", p, "-o", out, "--force").exit_code == 0
    assert json.loads(out.read_text())["daydream"]["kind"] == "replay"


def test_same_rank_twice(tmp_path):
    p = _write(tmp_path / "rank0.json", _doc())
    q = _write(tmp_path / "rank0.json.gz", _doc(), gz=True)
    assert_one_line_error(run_cli("replay", p, q), "rank 0 given twice")
