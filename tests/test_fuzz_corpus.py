"""Regression corpus: every nasty input the fuzzer found ends as recorded in tests/corpus/expected.json.

An expected failure is one clear line (a DaydreamError, exit 2 from the CLI);
an accepted input replays with the invariants holding and exactly the
recorded repairs (over those of the unmutated trace).
"""
from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from daydream import errors
from daydream.cli import main
from daydream.graph import build_graph
from daydream.loader import load_trace
from daydream.sim import simulate

CORPUS = Path(__file__).resolve().parent / "corpus"
sys.path.insert(0, str(CORPUS.parents[1] / "benchmarks"))
from fuzz_loaders import check_invariants, small_doc  # noqa: E402

EXPECTED = json.loads((CORPUS / "expected.json").read_text())


def _replay_repairs(path) -> Counter:
    if path.name.startswith("profile_"):
        from daydream.device import load_profile

        load_profile(str(path))
        return Counter()
    trace = load_trace(path)
    g = build_graph(trace)
    res = simulate(g)
    check_invariants(trace, g, res)
    assert all(len(it.simulated_ns) == len(it.measured_ns) for it in res.iterations())
    return Counter(g.repairs)


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    out = {}
    for steps in (2, 3):
        p = tmp_path_factory.mktemp("base") / "good.json"
        p.write_text(json.dumps(small_doc(steps)))
        out[steps] = _replay_repairs(p)
    return out


def test_corpus_files_match_the_manifest():
    files = {p.name for p in CORPUS.iterdir() if p.name not in ("expected.json", "make_corpus.py", "__pycache__")}
    assert files == set(EXPECTED)


@pytest.mark.parametrize("parser", ["default", "reference"])
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_case(name, parser, baseline, monkeypatch):
    """Both parsers: the compiled fast one where built (default) and the pure-Python reference."""
    if parser == "reference":
        monkeypatch.setenv("DAYDREAM_FAST_LOADER", "0")
    exp, path = EXPECTED[name], CORPUS / name
    if "error" in exp:
        cls = getattr(errors, exp["error"])
        with pytest.raises(cls, match=exp["match"]) as info:
            _replay_repairs(path)
        assert "\n" not in str(info.value)
        return
    got = _replay_repairs(path)
    base = baseline[3 if "stream_order" in name else 2]
    diff = {k: v - base.get(k, 0) for k, v in got.items() if v != base.get(k, 0)}
    assert diff == exp["repairs"]


@pytest.mark.parametrize("name", [n for n in sorted(EXPECTED) if "error" in EXPECTED[n]
                                  and not n.startswith("profile_")][:3])
def test_corpus_errors_are_one_line_in_the_cli(name):
    res = CliRunner().invoke(main, ["replay", str(CORPUS / name)])
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") 
    assert re.search(EXPECTED[name]["match"], lines[0])
