"""Write the regression corpus: nasty inputs found by ``benchmarks/fuzz_loaders.py``.

Each entry of ``CASES`` is a file name, how to make its bytes, and the
expected outcome, saved in ``expected.json`` beside the files.  Run from the
repository root to regenerate (the files are committed)::

    .venv/bin/python tests/corpus/make_corpus.py
"""
from __future__ import annotations

import gzip
import io
import json
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "benchmarks"))
from fuzz_loaders import small_doc  # noqa: E402


def _doc(edit, steps=2) -> bytes:
    d = small_doc(steps)
    edit(d["traceEvents"])
    return json.dumps(d, allow_nan=True).encode()


def _set(i, key, value, args=False):
    def edit(ev):
        (ev[i]["args"] if args else ev[i])[key] = value
    return edit


def _out_of_stream_order(ev):
    # a timestamp swapped: step 2's cudaMemcpyAsync stamped in step 1, its (pageable) copy
    # still after step 2's kernel on the same stream: the call waits for the copy, the
    # copy for the kernel (stream order), the kernel for its launch after the call.
    for e in ev:
        if e.get("name") == "cudaMemcpyAsync" and e["ts"] == 470:
            e["ts"] = 210


def _tar(members, cut=None) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)       # mtime 0: the same bytes on every run
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    raw = buf.getvalue()
    return raw[:cut] if cut else raw


GOOD = json.dumps(small_doc(2)).encode()
_PROFILE = __import__("daydream.published", fromlist=["PUBLISHED"]).PUBLISHED["A100"].to_json()

#: file -> (bytes, expected).  expected: {"error": class, "match": text} or {"repairs": {what: n}}.
CASES = {
    # the compiled fast loader skips what it does not need and finds no events; the reference
    # parser refuses the JSON: both one clear line
    "huge_int_literal.json": (b'{"traceEvents": [' + b"1" * 5000 + b"]}",
                              {"error": "TraceError", "match": "not JSON|empty trace"}),
    "deep_nesting.json": (b'{"traceEvents": ' + b"[" * 5000 + b"]" * 5000 + b"}",
                          {"error": "TraceError", "match": "not JSON|empty trace"}),
    "nan_literal_ts.json": (GOOD.replace(b'"ts": 10, "dur": 50', b'"ts": NaN, "dur": 50', 1),
                            {"repairs": {"events without a valid ts/dur (dropped)": 1}}),
    "infinite_dur.json": (GOOD.replace(b'"ts": 10, "dur": 50', b'"ts": 10, "dur": Infinity', 1),
                          {"repairs": {"events without a valid ts/dur (dropped)": 1}}),
    "dur_2_pow_70.json": (_doc(_set(2, "dur", 2**70)),
                          {"repairs": {"events without a valid ts/dur (dropped)": 1}}),
    "ts_1e300.json": (_doc(_set(2, "ts", 1e300)),
                      {"repairs": {"events without a valid ts/dur (dropped)": 1}}),
    "boolean_ts.json": (_doc(_set(2, "ts", True)),
                        {"repairs": {"events without a valid ts/dur (dropped)": 1}}),
    "correlation_2_pow_70.json": (_doc(_set(4, "correlation", 2**70, args=True)),
                                  {"repairs": {"GPU tasks without a launching call (no launch edge)": 1}}),
    "negative_input_dims.json": (_doc(_set(2, "Input Dims", [[-64, 32], [32, 16]], args=True)),
                                 {"repairs": {"negative or implausible byte/FLOP counts (set to 0)": 1}}),
    "flops_2_pow_70.json": (_doc(_set(2, "flops", 2**70, args=True)),
                            {"repairs": {"negative or implausible byte/FLOP counts (set to 0)": 1}}),
    "pid_is_a_list.json": (_doc(_set(2, "pid", [1, 2])),
                           {"repairs": {"events whose pid/tid is not a number or string (dropped)": 1}}),
    "args_is_a_list.json": (_doc(_set(2, "args", [1])),
                            {"repairs": {"events whose args is not an object (args ignored)": 1}}),
    "thread_name_args_list.json": (_doc(_set(0, "args", ["main"])), {"repairs": {}}),
    "trace_events_is_a_number.json": (b'{"traceEvents": 1.5}',
                                      {"error": "TraceError", "match": "no 'traceEvents' list"}),
    "rank_is_true.json": (json.dumps({**small_doc(2), "distributedInfo": {"rank": True}}).encode(),
                          {"repairs": {"invalid distributedInfo.rank (ignored)": 1}}),
    "flow_id_infinite.json": (_doc(lambda ev: ev.append({"ph": "s", "cat": "fwdbwd", "id": float("inf"),
                                                         "pid": 1, "tid": 1, "ts": 5})),
                              {"repairs": {"malformed fwdbwd flows (dropped)": 1}}),
    "launch_out_of_stream_order.json": (
        _doc(_out_of_stream_order, steps=3),
        {"repairs": {"GPU tasks out of launch order on their stream (launch edge dropped)": 1}}),
    "truncated_archive.tar.gz": (_tar([("rank0.json", GOOD), ("rank1.json", GOOD)], cut=300),
                                 {"error": "TraceError", "match": "truncated or corrupt archive"}),
    "archive_without_traces.tar.gz": (_tar([("notes.txt", b"hello")]),
                                      {"error": "TraceError", "match": "archive holds no"}),
    # device profiles (``daydream calibrate -o``): files named profile_*
    "profile_matmul_is_null.json": (json.dumps({**_PROFILE, "matmul": None}).encode(),
                                    {"error": "DaydreamError", "match": "not a device profile"}),
    "profile_infinite_overhead.json": (json.dumps({**_PROFILE, "op_overhead_ns": float("inf")}).encode(),
                                       {"error": "DaydreamError", "match": "not a device profile"}),
    "profile_negative_throughput.json": (
        json.dumps({**_PROFILE, "matmul": {"float32": [[1.0, -5.0]]}}).encode(),
        {"error": "DaydreamError", "match": "per second > 0"}),
    "profile_deep_nesting.json": (b"[" * 5000 + b"]" * 5000, {"error": "DaydreamError", "match": "not a device profile"}),
    "double_gzip.json.gz": (gzip.compress(gzip.compress(GOOD, mtime=0), mtime=0),
                            {"error": "TraceError", "match": "not JSON"}),
}


def main() -> None:
    expected = {}
    for name, (data, exp) in CASES.items():
        (HERE / name).write_bytes(data)
        expected[name] = exp
    (HERE / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(CASES)} corpus files to {HERE}")


if __name__ == "__main__":
    main()
