"""``ptd-p``: configurations, composition of the what-ifs it chains, the search and its CLI."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from daydream.optimizations import OptionError, get
from daydream.graph import build_graph
from daydream.optimizations.base import WhatIfContext
from daydream.optimizations.ptdp import Config, configurations, get_class, pipeline_available
from daydream.whatif import predict

from conftest import REPO, flat_profile

MLP = REPO / "traces" / "mlp.trace.json.gz"


@pytest.fixture(scope="module")
def mlp():
    from daydream import load_trace

    return load_trace(MLP)


def test_configurations_cover_every_factorisation():
    cs = configurations(8, microbatches=(4, 8))
    assert all(c.devices == 8 for c in cs)
    assert {(c.pipeline, c.tensor, c.data) for c in cs} == {
        (p, t, 8 // (p * t)) for p in (1, 2, 4, 8) for t in (1, 2, 4, 8) if 8 % (p * t) == 0}
    assert len([c for c in cs if c.pipeline == 1]) == 4           # micro-batches only vary with a pipeline
    assert all(c.tensor <= 2 for c in configurations(8, max_tensor=2))
    assert all(c.pipeline == 1 for c in configurations(8, pipeline=False))


@pytest.mark.parametrize("spec, msg", [("ptd-p:devices=6,tensor=4", "does not divide 6 devices"),
                                       ("ptd-p:devices=0", "at least 1"),
                                       ("ptd-p:devices=4,pipeline=3", "does not divide 4 devices")])
def test_impossible_configurations_are_refused(mlp, spec, msg):
    with pytest.raises(OptionError, match=msg):
        predict(mlp, [spec], device=flat_profile())
    with pytest.raises(OptionError, match="must be at least 1|positive|not a int"):
        configurations(0)


def test_single_axis_configurations_equal_the_what_if_they_chain(mlp):
    prof = flat_profile()
    dp, _ = predict(mlp, ["ptd-p:devices=2"], device=prof)
    ref, _ = predict(mlp, ["data-parallel:workers=2"], device=prof)
    assert dp.predicted_ms == ref.predicted_ms
    tp, _ = predict(mlp, ["ptd-p:devices=2,tensor=2"], device=prof)
    ref, _ = predict(mlp, ["tensor-parallel:degree=2,api=megatron"], device=prof)
    assert tp.predicted_ms == ref.predicted_ms
    assert tp.metrics["devices"] == 2


def test_data_parallel_after_tensor_split_reduces_only_the_local_gradients(mlp):
    rep, res = predict(mlp, ["ptd-p:devices=4,tensor=2"], device=flat_profile())
    g = res.graph
    ar = [t for t in range(g.n_tasks) if g.task_name(t) == "all-reduce" and g.tasks["iteration"][t] == 1]
    assert int(g.tasks["bytes"][ar].sum()) == rep.metrics["param_bytes_per_rank"]
    mods = mlp.ranks[0].meta["daydream"]["modules"]
    paths = [m["path"] for m in mods]
    leaves = {m["path"]: m["output_bytes"] or 0 for m in mods if not any(q.startswith(m["path"] + ".") for q in paths)}
    leaves_act = sum(leaves.values())
    tp = get_class("tensor-parallel")(degree=2)
    tp.apply(WhatIfContext(build_graph(mlp), mlp, flat_profile()))
    split_act = sum(b for p, b in leaves.items() if p in tp.split_paths)
    assert 0 < split_act < leaves_act
    state = 2 + 1       # weights, gradients, SGD momentum: split outputs are held half per device
    assert rep.metrics["memory_bytes_per_device"] == \
        rep.metrics["param_bytes_per_rank"] * state + leaves_act - split_act // 2
    full, _ = predict(mlp, ["ptd-p:devices=2"], device=flat_profile())
    total = sum(m["param_bytes"] or 0 for m in mods)
    assert full.metrics["memory_bytes_per_device"] == total * state + leaves_act


@pytest.mark.skipif(not pipeline_available(), reason="pipeline what-if not installed")
def test_pipeline_with_data_parallel_adds_one_allreduce_per_rank_before_its_step(mlp):
    prof = flat_profile()
    rep, res = predict(mlp, ["ptd-p:devices=4,pipeline=2,microbatches=4"], device=prof)
    g = res.graph
    ar = [t for t in range(g.n_tasks) if g.task_name(t) == "DP all-reduce"]
    assert ar
    for t in ar:
        rank = int(g.tasks["rank"][t])
        nbytes = int(rep.metrics[f"rank{rank}_weights_bytes"])
        assert int(g.tasks["bytes"][t]) == nbytes
        assert int(g.tasks["dur_ns"][t]) == int(prof.allreduce_ns(nbytes, 2))
    alone, _ = predict(mlp, ["pipeline:stages=2,microbatches=4"], device=prof)
    assert rep.predicted_ms > alone.predicted_ms


def test_search_ranks_by_time_and_keeps_the_best_on_interrupt(mlp, monkeypatch):
    from daydream import cli_parallel

    results, interrupted, _ = cli_parallel.ptdp_search(mlp, 4, (4,), device=flat_profile())
    ok = [r for r in results if r.predicted_ms is not None]
    assert not interrupted and [r.predicted_ms for r in ok] == sorted(r.predicted_ms for r in ok)
    assert results[0].config == min(ok, key=lambda r: r.predicted_ms).config

    import daydream.whatif as whatif

    real, calls = whatif.predict, []

    def stop_on_third(*a, **k):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(whatif, "predict", stop_on_third)
    lines = []
    results, interrupted, _ = cli_parallel.ptdp_search(mlp, 4, (4,), device=flat_profile(), progress=lines.append)
    assert interrupted and len(results) == 2 and len(lines) == 2 and "best so far" in lines[-1]


def test_search_without_pipeline_skips_p_greater_than_one(mlp, monkeypatch):
    from daydream import cli_parallel
    import daydream.optimizations.ptdp as ptdp

    monkeypatch.setattr(ptdp, "pipeline_available", lambda: False)
    results, _, notes = cli_parallel.ptdp_search(mlp, 4, (4,), device=flat_profile())
    assert {r.config.split()[0] for r in results} == {"p=1"} and "skipped" in notes[0]


def test_cli_search_json_and_memory_filter(tmp_path):
    from daydream.cli import main
    from daydream.device import save_profile

    prof = save_profile(flat_profile(), str(tmp_path / "p.json"))
    out = CliRunner().invoke(main, ["ptdp-search", str(MLP), "--devices", "2", "--profile", prof, "--json"])
    assert out.exit_code == 0, out.output
    res = json.loads(out.stdout)["results"]
    assert {r["config"] for r in res} >= {"p=1 t=1 d=2", "p=1 t=2 d=1"}
    tight = CliRunner().invoke(main, ["ptdp-search", str(MLP), "--devices", "2", "--profile", prof, "--json",
                                      "--max-memory-gb", "0"])
    assert all(r["predicted_ms"] is None for r in json.loads(tight.stdout)["results"])
    bad = CliRunner().invoke(main, ["ptdp-search", str(MLP), "--devices", "2", "--profile", prof,
                                    "--microbatches", "four"])
    assert bad.exit_code == 2 and "expected integers" in bad.output


def test_config_spec_round_trips():
    c = Config(2, 2, 2, 8)
    opt = get(c.spec())
    assert opt.config() == c and c.label() == "p=2 t=2 d=2 m=8"
    assert np.prod([c.pipeline, c.tensor, c.data]) == c.devices


def test_ctrl_c_stops_the_search_and_prints_the_best_so_far(tmp_path):
    import signal
    import subprocess

    from daydream.device import save_profile

    from conftest import daydream_cmd

    prof = save_profile(flat_profile(), str(tmp_path / "p.json"))
    proc = subprocess.Popen(daydream_cmd("ptdp-search", str(REPO / "traces" / "transformer.trace.json.gz"),
                                         "--devices", "16", "--microbatches", "2,4,8,16", "--profile", prof),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                            # a shell without job control starts background jobs with SIGINT ignored
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    first = proc.stderr.readline()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert first.startswith("[1/45]")
    assert proc.returncode == 130 and "Traceback" not in err
    assert "note: interrupted:" in out and out.splitlines()[1].startswith("1 ")
