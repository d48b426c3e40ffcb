"""``tessel`` what-if: repetend unrolling, deadlock refusal, search optimum, Ctrl-C, CSV output."""
from __future__ import annotations

import dataclasses

import pytest

from daydream.optimizations import WhatIfContext, get
from daydream.optimizations import _schedules as sch
from daydream.optimizations import tessel as ts
from daydream.optimizations._pipegraph import build_graph
from daydream.optimizations.base import OptionError
from test_pipeline import costs, device, iteration_ns, layered_graph, recorded

F, B = sch.Kind.F, sch.Kind.B


def test_unroll_gives_gpipe_and_1f1b():
    o = [[(0, F), (0, B)], [(1, F), (1, B)]]
    assert sch.unroll(o, {(0, F): 0, (0, B): 4, (1, F): 0, (1, B): 4}, 4) == sch.gpipe(2, 4)
    o = [[(0, B), (0, F)], [(1, F), (1, B)]]
    assert sch.unroll(o, {(0, F): 0, (0, B): 2, (1, F): 1, (1, B): 1}, 4) == sch.one_f_one_b(2, 4)


def test_cyclic_wait_is_found():
    # rank 0 waits for 1B0 before 0F0; rank 1 waits for 0F0 before 1F0: a cycle
    acts = sch.from_csv("0B0,0F0\n1F0,1B0\n")
    assert sch.blocked(acts, 2) == ["0B0", "1F0"]
    assert sch.blocked(sch.one_f_one_b(3, 5), 3) == []


def test_placement_parsing_and_refusals():
    assert ts.parse_placement("1:0", 2) == [1, 0]
    with pytest.raises(sch.ScheduleError, match="must use each of the 2 devices"):
        ts.parse_placement("0:2", 2)
    with pytest.raises(sch.ScheduleError, match="not a ':'-separated list"):
        ts.parse_placement("0,a", 2)


def test_search_reaches_the_optimum_with_fewest_activations():
    # equal stages, free transfers: nothing beats (M+S-1)(f+b); among those 1F1B stashes least
    sc = costs(2, 10, 20)
    sc = sc.__class__(**{**sc.__dict__, "stash_bytes": (1, 1)})
    best, costed, cut = ts.search(sc, [0, 1], 4, device(), max_lag=4)
    assert best[0] == (4 + 2 - 1) * 30 and best[1] == 2 and not cut and costed > 1
    assert best[2] == sch.one_f_one_b(2, 4)


def test_search_keeps_the_best_so_far_on_ctrl_c(monkeypatch):
    calls = []
    real = ts.simulate_pipeline

    def interrupted(pg, dev):
        calls.append(1)
        if len(calls) > 3:
            raise KeyboardInterrupt
        return real(pg, dev)

    monkeypatch.setattr(ts, "simulate_pipeline", interrupted)
    best, costed, cut = ts.search(costs(2, 10, 20), [0, 1], 4, device(), max_lag=4)
    assert cut == "interrupted (Ctrl-C)" and costed == 3 and best is not None


def test_budget_and_progress_reported():
    lines = []
    _, costed, cut = ts.search(costs(2, 10, 20), [0, 1], 4, device(), max_lag=12, budget=1500,
                               progress=lines.append)
    assert cut == "budget of 1500 candidates reached"   # of 1820
    assert len(lines) == 1 and lines[0].startswith("tessel: 1000/")


def test_memory_limit_prunes_schedules():
    sc = costs(2, 10, 20)
    sc = sc.__class__(**{**sc.__dict__, "stash_bytes": (1, 1)})
    best, _, _ = ts.search(sc, [0, 1], 4, device(), max_lag=4, memory_bytes=1)
    assert best[:2] == (4 * 30 * 2, 1)   # one micro-batch in flight: the stages cannot overlap
    best, _, _ = ts.search(sc, [0, 1], 4, device(), max_lag=4, memory_bytes=2)
    assert best[:2] == (5 * 30, 2)


def whatif(spec, g=None):
    ctx = WhatIfContext(graph=g or layered_graph(), trace=None, device=device())
    get(spec).apply(ctx)
    return ctx


def test_whatif_reports_against_gpipe_and_1f1b_and_writes_runnable_csv(tmp_path):
    path = tmp_path / "best.csv"
    ctx = whatif(f"tessel:stages=2,microbatches=2,max_lag=3,csv={path}")
    m = ctx.metrics
    assert m["tessel_ms"] <= min(m["gpipe_ms"], m["1f1b_ms"])
    acts = sch.from_csv(path.read_text())
    sch.validate(acts, 2, 2)
    assert " / ".join(" ".join(map(str, r)) for r in acts) == m["schedule"]


def test_a_given_schedule_is_costed_as_the_search_costed_it(tmp_path):
    path = tmp_path / "best.csv"
    searched = whatif(f"tessel:stages=2,microbatches=2,max_lag=3,csv={path}").metrics
    given = whatif(f"tessel:stages=2,microbatches=2,schedule_csv={path}").metrics
    assert given["tessel_ms"] == searched["tessel_ms"] and given["schedule"] == searched["schedule"]
    assert given["candidates_costed"] == 1 and given["repetend"].startswith("given")
    (tmp_path / "gpipe.csv").write_text(sch.to_csv(sch.make_schedule("gpipe", 2, 2)))
    gpipe = whatif(f"tessel:stages=2,microbatches=2,schedule_csv={tmp_path / 'gpipe.csv'}").metrics
    assert gpipe["tessel_ms"] == pytest.approx(gpipe["gpipe_ms"])


@pytest.mark.parametrize("text,msg", [
    ("0F0,0B0\n1F0,1B0\n", "0F1 appears 0 times"),                          # micro-batch 1 missing
    ("1F0,1F1,1B0,1B1\n0F0,0F1,0B0,0B1\n", "not placed 0:1"),                # stages on the wrong ranks
    ("0F0,0B0,0F1,0B1\n1B0,1F0,1F1,1B1\n", "runs before"),
    ("0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n", "wait on each other forever"),
    ("0X0\n", "bad action"),
])
def test_a_given_schedule_that_cannot_run_is_refused_naming_the_file(tmp_path, text, msg):
    path = tmp_path / "s.csv"
    path.write_text(text)
    with pytest.raises(OptionError, match=f"tessel: {path}: not a schedule to cost .*{msg}"):
        whatif(f"tessel:stages=2,microbatches=2,schedule_csv={path}")
    with pytest.raises(OptionError, match="not a schedule to cost"):
        whatif(f"tessel:stages=2,microbatches=2,schedule_csv={tmp_path / 'absent.csv'}")


V_SCHEDULE = ("0F0,0F1,3F0,3B0,0F2,3F1,3B1,0F3,0B0,3F2,3B2,0B1,3F3,3B3,0B2,0B3",
              "1F0,2F0,1F1,2F1,2B0,1F2,1B0,2F2,2B1,1F3,1B1,2F3,2B2,1B2,2B3,1B3")


@pytest.mark.parametrize("acts,ahead", [(sch.one_f_one_b(2, 4), True), (sch.gpipe(3, 4), False),
                                        (sch.one_f_one_b(4, 6), True), (sch.interleaved(2, 4, 2), True),
                                        (sch.from_csv("\n".join(V_SCHEDULE)), True)],
                         ids=["1f1b-2x4", "gpipe-3x4", "1f1b-4x6", "interleaved-2x4x2", "v"])
def test_receives_are_posted_where_torch_s_runtime_lowering_posts_them(acts, ahead):
    """A compute-only schedule run by ``_PipelineScheduleRuntime`` (a Tessel CSV) gets its sends
    and receives from torch's lowering; each receive must sit in the model where torch puts it."""
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    if not hasattr(schedules, "_add_send_recv"):
        pytest.skip("this torch has no _add_send_recv lowering")
    where = sch.stage_rank(acts)
    lowered = schedules._add_send_recv({r: [schedules._Action.from_str(str(a)) for a in seq] for r, seq in enumerate(acts)},
                                       stage_to_rank=lambda s: where[s], num_stages=len(where))
    expected = []
    for r in range(len(acts)):
        before, pending = {}, []
        for a in lowered[r]:
            kind = a.computation_type.value
            if kind in ("RECV_F", "RECV_B"):
                pending.append(sch.Action(a.stage_index, sch.Kind(kind[-1]), a.microbatch_index))
            elif kind in ("F", "B"):
                before[sch.Action(a.stage_index, sch.Kind(kind), a.microbatch_index)], pending = pending, []
        expected.append(before)
    assert sch.receives_before(acts) == expected
    assert any(c != a for before in expected for a, cs in before.items() for c in cs) == ahead   # GPipe: none


def test_v_placement_searches_two_stages_per_device():
    ctx = whatif("tessel:stages=2,microbatches=2,placement=0:1:1:0,max_lag=2,budget=500")
    acts = sch.from_csv(ctx.metrics["schedule"].replace(" / ", "\n").replace(" ", ","))
    sch.validate(acts, 4, 2)
    assert sch.stage_rank(acts) == {0: 0, 1: 1, 2: 1, 3: 0}


def test_tessel_takes_the_tracer_s_cost_per_recorded_op_out_of_every_pass():
    spec = "tessel:stages=2,microbatches=2,max_lag=3"
    kept = whatif(f"{spec},recording_us=0", recorded(layered_graph()))
    cut = whatif(f"{spec},recording_us=0.005", recorded(layered_graph()))
    # per micro-batch each stage's F 40 -> 30 and B 80 -> 70 ns (two layers, one recorded op each, 5 ns)
    assert cut.metrics["tessel_ms"] < kept.metrics["tessel_ms"]
    assert any("recorded ops a pass" in n for n in cut.notes) and not any("recorded ops" in n for n in kept.notes)
    with pytest.raises(OptionError, match="recording_us must be auto or a non-negative"):
        whatif(f"{spec},recording_us=-1")


@pytest.mark.parametrize("spec,msg", [
    ("tessel:stages=2,placement=0:1:1:0:1:0", "6 stages but the model has only 4 layers"),
    ("tessel:stages=0", "at least 1"),
])
def test_impossible_configurations_refused(spec, msg):
    g = layered_graph()
    with pytest.raises(OptionError, match=msg):
        whatif(spec, g)


def test_searched_v_schedule_runs_on_torch_runtime_with_two_processes(tmp_path):
    """Multi-process (2 gloo processes, tiny model, 2 steps): a V schedule from the search executes."""
    import json
    import subprocess
    import sys

    path = tmp_path / "v.csv"
    whatif(f"tessel:stages=2,microbatches=2,placement=0:1:1:0,max_lag=2,budget=300,csv={path}")
    proc = subprocess.run([sys.executable, "-m", "daydream.workloads.pipeline", "--schedule", "csv", "--csv",
                           str(path), "--microbatches", "2", "--hidden", "32", "--in-features", "16",
                           "--batch-size", "8", "--steps", "2", "--warmup", "1"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("{")))
    assert out["world"] == 2 and len(out["step_ms"]) == 2 and out["mean_ms"] > 0


def test_a_receive_posted_ahead_lets_its_transfer_overlap_the_receiver_s_work():
    """The 1F1B chain run from a CSV: torch posts stage 1's receive of 1F1 before its 1B0, so the
    activations travel while 1B0 runs; posted right before 1F1 (until session 87) the transfer
    waited for 1B0 to end and the iteration took longer."""
    sc = dataclasses.replace(costs(2, 1_000_000, 2_000_000, send=1000), comm_action_ns=10_000)
    dev, acts = device(bw=1e9, lat=300_000.0), sch.one_f_one_b(2, 4)
    ahead = ts.runtime_graph(sc, acts, dev, 4)
    g = ahead.graph
    lane = g.lane_tasks[int(g.tasks["lane"][ahead.task[(0, sch.Action(1, sch.Kind.B, 0))]])]
    names = [g.task_name(t) for t in lane]
    assert names.index("post receive 1F1") < names.index("1B0") < names.index("1F1")
    late = build_graph(sc, acts, ts.ITERATIONS, dev, True, 4)
    assert iteration_ns(ahead) < iteration_ns(late)
