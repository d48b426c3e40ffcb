"""Pipeline model shared by ``pipeline`` and ``tessel``: layer costs, partitioning, stage graph.

* :func:`unit_costs`: per layer (module), forward and backward time of one
  micro-batch, from the graph it is given (so it works after earlier
  what-ifs), with parameter and activation bytes from the module table.
* :func:`partition`: contiguous layers per stage, minimising the slowest
  stage (compute or the point-to-point transfer it sends), PipeDream-style.
* :func:`build_graph`: a dependency graph of stage tasks (F/B per stage per
  micro-batch on each rank's compute lane, transfers on one communication lane
  per directed link, the optimizer step and per-iteration input work) in the
  schedule's per-rank order, replayed by :func:`daydream.sim.simulate`.  Where
  the device profile has the host cost of posting a send and a receive
  (``p2p_post``: gloo on CPU), the sender's compute lane posts each send after
  the action that produced it, and the receiver's posts each receive before
  the action that needs it; a runtime that runs sends and receives as actions
  of their own (``tessel``'s, torch's ``_PipelineScheduleRuntime``) adds its
  per-action cost to each.  The transfer starts once *both* are posted (gloo
  moves the data only then), after the profile's handshake
  (``p2p_handshake``: the receiver's notice reaching the sender) from the
  receive's post: a receive posted after its send waits for the handshake and
  the transfer, one posted before it only for the transfer.
* :func:`simulate_pipeline`: simulates a built graph after the hand-over
  effects of :mod:`optimizations._handover` (colliding posts, held and late
  sends) and :mod:`optimizations._resume` (work resumed after a gap).

Time attribution
----------------
The given graph is simulated; in each iteration after the first (rank 0),
the wall time is split among the tasks of the lanes that do the model's work
(GPU streams where the rank has them, else CPU threads): each task owns the
time from its start to the next work task's start.  Gaps (Python, framework
overhead) go to the task before them, so the parts add up to the iteration
time exactly; but the gap before the optimizer's first task goes to the optimizer
(the step call's Python before its first update, paid once an iteration, not per
micro-batch).  Forward/backward tasks whose layer is not a module of the
table (loss, autograd glue) join the module before them in execution order
(forward) or the last module (backward, before any module's backward).

Micro-batch cost: the graph is first scaled to batch ``B/M`` with the
``batch-size`` what-if (per op: a fixed part and a part proportional to the
batch, compute ops along the device's throughput curve, or on a CPU trace
with shapes re-run with ``repeats=M``: the M micro-batches pass over a
stage's weights one after another, later ones finding them in cache), then
attributed.  On a CPU trace the tracer's own cost per recorded op
(``recording_us``, :func:`daydream.overhead.recording_us_per_op`) can be taken
out of each pass: the trace paid it once an iteration, M micro-batches would
repeat it M times, and the run predicted is not traced.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from daydream.graph.graph import DependencyGraph, EdgeKind
from daydream.model import EventKind, Lane, LaneKind, Phase
from daydream.sim import simulate

from ._corun import corun_rates, rate_of, rates_text
from ._handover import add_late_holds, add_post_collisions
from ._optstep import split_step_ns, step_fixed_ns
from ._resume import add_resume_costs
from ._schedules import Action, Kind, ScheduleError, receives_before
from .base import NotApplicable

__all__ = ["UnitCosts", "StageCosts", "unit_costs", "attribute", "partition", "parse_partition",
           "stage_costs", "build_graph", "waited_send", "PipeGraph", "simulate_pipeline",
           "accumulate_ns", "scale_grads_ns", "ACCUMULATE_BYTES_PER_BYTE", "recorded_ops",
           "non_negative", "recording_ns"]


@dataclass(frozen=True)
class UnitCosts:
    """Per layer (in forward order): per-micro-batch times and sizes; per-iteration extras."""

    names: tuple
    fwd_ns: np.ndarray
    bwd_ns: np.ndarray
    param_bytes: np.ndarray
    out_bytes: np.ndarray        # activation a layer outputs, per micro-batch
    optimizer_ns: float          # whole model, per iteration
    pre_ns: float                # input pipeline and other per-iteration work (each rank)
    param_tensors: np.ndarray    # parameter tensors per layer (one where the table has no shapes)
    optimizer_call_ns: float = 0.0   # of optimizer_ns, the call around the updates: each stage pays it all


@dataclass(frozen=True)
class StageCosts:
    """Per stage: micro-batch F/B time, bytes sent to the next stage, parameters, optimizer time."""

    fwd_ns: tuple
    bwd_ns: tuple
    send_bytes: tuple
    param_bytes: tuple
    stash_bytes: tuple           # activations one micro-batch leaves stashed in the stage
    optimizer_ns: tuple
    pre_ns: float
    bounds: tuple = ()           # first unit of each stage, then the unit count
    accumulate_ns: tuple = ()    # adding a micro-batch's gradients into .grad (not after the first)
    comm_action_ns: float = 0.0  # the runtime's own cost per send or receive action (where they are actions)
    scale_grads_ns: tuple = ()   # dividing the stage's gradients by M after its last backward (torch's runtime)


def _work_lanes(g, rank):
    gpu = [i for i, ln in enumerate(g.lanes) if ln.rank == rank and ln.kind == LaneKind.GPU_STREAM]
    return gpu or [i for i, ln in enumerate(g.lanes) if ln.rank == rank and ln.kind == LaneKind.CPU_THREAD]


def attribute(g: DependencyGraph, result=None) -> tuple:
    """Mean per-iteration wall time by (phase, layer id) of rank ``min(g.ranks)``, in ns.

    Returns ``(times, order, step_call)``: ``times`` maps ``(phase, layer)`` to ns
    (layer -1: none), ``order`` lists ``(phase, layer)`` of the work tasks of the
    first counted iteration in execution order, ``step_call`` is the optimizer
    step's part outside its parameter updates
    (:func:`optimizations._optstep.step_fixed_ns`, median over iterations; 0 on a GPU trace).
    """
    if not g.markers:
        raise NotApplicable("pipeline: the graph has no iteration markers")
    result = result or simulate(g)
    rank = min(g.ranks)
    starts = result.start_ns[np.asarray(g.markers[rank], np.int64)]
    if len(starts) < 2:
        raise NotApplicable("pipeline: the trace holds less than one full iteration")
    lanes = _work_lanes(g, rank)
    T = g.tasks
    work = np.concatenate([np.asarray(g.lane_tasks[li], np.int64) for li in lanes])
    work = work[T["kind"][work] != EventKind.MARKER]
    work = work[np.argsort(result.start_ns[work], kind="stable")]
    st = result.start_ns[work]
    first = 1 if len(starts) > 2 else 0
    times: dict = {}
    order = []
    calls = []
    cpu = g.lanes[lanes[0]].kind == LaneKind.CPU_THREAD
    for i in range(first, len(starts) - 1):
        a, b = np.searchsorted(st, [starts[i], starts[i + 1]], side="left")
        ids = work[a:b]
        if not len(ids):
            times[(int(Phase.OTHER), -1)] = times.get((int(Phase.OTHER), -1), 0) + int(starts[i + 1] - starts[i])
            continue
        edges = np.append(st[a:b], starts[i + 1])
        own = np.diff(edges)
        own[0] += int(st[a] - starts[i])     # before the first task: joins it
        _step_prologue_to_step(own, T["phase"][ids], st[a:b], result.end_ns[ids])
        for t, d in zip(ids.tolist(), own.tolist()):
            key = (int(T["phase"][t]), int(T["layer"][t]))
            times[key] = times.get(key, 0) + d
            if i == first:
                order.append(key)
        if cpu:
            calls.append(step_fixed_ns(g, ids, own, result.start_ns[ids], result.end_ns[ids]))
    n = len(starts) - 1 - first
    return {k: v / n for k, v in times.items()}, order, float(np.median(calls)) if calls else 0.0


def _step_prologue_to_step(own, phase, start_ns, end_ns) -> None:
    """Move, in place, the gap before an iteration's first optimizer task from the task before
    it to that task: it is the step call's own Python before its first update (``opt.step()``
    runs once an iteration), where the rule that a gap joins the task before it would charge it
    to the backward's last task (the first layer's), once per micro-batch.

    >>> own = np.array([100, 400, 50]); ph = np.array([Phase.BACKWARD, Phase.BACKWARD, Phase.OPTIMIZER])
    >>> _step_prologue_to_step(own, ph, np.array([0, 100, 500]), np.array([100, 200, 550]))
    >>> own.tolist()
    [100, 100, 350]
    """
    opt = np.flatnonzero(phase == Phase.OPTIMIZER)
    if not len(opt) or opt[0] == 0 or phase[opt[0] - 1] == Phase.OPTIMIZER:
        return
    j = int(opt[0])
    gap = min(max(int(start_ns[j] - np.max(end_ns[:j])), 0), int(own[j - 1]))
    own[j - 1] -= gap
    own[j] += gap


def _units(g, order, modules) -> tuple:
    """Layer ids of the units in forward order, and a map layer id -> unit for F and B tasks."""
    fwd_layers = []
    for ph, ly in order:
        if ph == Phase.FORWARD and ly >= 0 and ly not in fwd_layers and (not modules or g.layers[ly] in modules):
            fwd_layers.append(ly)
    if not fwd_layers:
        raise NotApplicable("pipeline: no forward work attributed to layers in the trace; "
                            "record it with `daydream trace` (module table)")
    return fwd_layers


def recorded_ops(g: DependencyGraph) -> dict:
    """Mean recorded CPU ops per iteration by ``(phase, layer id)`` on the work lanes of rank
    ``min(g.ranks)``, over the iterations after the first where there are several (as
    :func:`attribute` counts them); an op cut into slices by its nested calls counts once.
    Empty where the rank's work runs on GPU streams."""
    lanes = _work_lanes(g, min(g.ranks)) if len(g.ranks) else []
    if not lanes or g.lanes[lanes[0]].kind != LaneKind.CPU_THREAD:
        return {}
    T = g.tasks
    m = np.isin(T["lane"], lanes) & (T["kind"] == EventKind.CPU_OP) & (T["event"] >= 0) & (T["iteration"] >= 0)
    its = np.unique(T["iteration"][m])
    m &= T["iteration"] >= (its[1] if len(its) > 1 else 0)
    cols = np.stack([T[c][m].astype(np.int64) for c in ("phase", "layer", "iteration", "event")])
    ops = np.unique(cols, axis=1)
    keys, counts = np.unique(ops[:2], axis=1, return_counts=True)
    n = max(len(np.unique(ops[2])), 1)
    return {(int(ph), int(ly)): c / n for ph, ly, c in zip(keys[0], keys[1], counts)}


def unit_costs(ctx, microbatches: int, ranks: int = 1, corun: str = "trace", recording_ns: float = 0.0) -> UnitCosts:
    """Per-layer per-micro-batch costs of ``ctx.graph`` (see the module docstring).

    With ``ranks`` > 1 processes on one CPU host, forward and backward run at their phase's
    :func:`optimizations._corun.corun_rates` from ``corun``, at the micro-batch (noted on ``ctx``).
    ``recording_ns``: the tracer's cost per recorded CPU op
    (:func:`daydream.overhead.recording_us_per_op`), taken out of every micro-batch pass of a CPU
    trace once per op it records (:func:`recorded_ops`): the trace paid it once an iteration,
    the model would repeat it per micro-batch, and the real run is not traced.
    """
    from .base import WhatIfContext
    from .batch_size import BatchSize

    from ._layers import meta

    g = ctx.graph
    mods = {m["path"]: m for m in (meta(ctx).get("modules") or [])}
    full, order, step_call = attribute(g)
    units = _units(g, order, mods)
    if microbatches > 1:
        sub = WhatIfContext(graph=g.copy(), trace=ctx.trace, device=ctx.device)
        BatchSize(factor=1.0 / microbatches, repeats=microbatches).apply(sub)
        small, order, _ = attribute(sub.graph)
    else:
        small = full
    index = {ly: i for i, ly in enumerate(units)}
    fwd, bwd = np.zeros(len(units)), np.zeros(len(units))
    ops = recorded_ops(g) if recording_ns > 0 else {}
    cut = {k: n * recording_ns for k, n in ops.items()}
    cur_f, cur_b = 0, len(units) - 1
    seen = set()
    for ph, ly in order:            # which unit each (phase, layer) pair joins
        if (ph, ly) in seen:
            continue
        seen.add((ph, ly))
        own = max(small.get((ph, ly), 0) - cut.get((ph, ly), 0.0), 0.0)
        if ph == Phase.FORWARD:
            cur_f = index.get(ly, cur_f)
            fwd[cur_f] += own
        elif ph == Phase.BACKWARD:
            cur_b = index.get(ly, cur_b)
            bwd[cur_b] += own
    if cut:
        ctx.note(f"{sum(n for (ph, _), n in ops.items() if ph in (Phase.FORWARD, Phase.BACKWARD)):.0f} "
                 f"recorded ops a pass: the tracer's {recording_ns / 1e3:.2f} us each taken out of every micro-batch "
                 "(recording_us)")
    opt = sum(v for (ph, _), v in full.items() if ph == Phase.OPTIMIZER)
    pre = sum(v for (ph, _), v in full.items() if ph in (Phase.DATALOADER, Phase.OTHER))
    names = tuple(g.layers[ly] for ly in units)
    pbytes = np.array([int(mods.get(n, {}).get("param_bytes") or 0) for n in names], np.int64)
    tensors = np.array([len(mods.get(n, {}).get("param_shapes") or ()) or int(b > 0) for n, b in zip(names, pbytes)],
                       np.int64)
    obytes = np.array([int(mods.get(n, {}).get("output_bytes") or 0) for n in names], np.float64) / microbatches
    rates = corun_rates(ctx, corun, 1.0 / microbatches) if ranks > 1 else {None: 1.0}
    rf, rb = rate_of(rates, Phase.FORWARD), rate_of(rates, Phase.BACKWARD)
    if min(rf, rb) < 1.0:
        fwd, bwd = fwd / rf, bwd / rb
        ctx.note(f"{ranks} ranks on one host's cores: their forward and backward run at "
                 f"{rates_text({Phase.FORWARD: rf, Phase.BACKWARD: rb})} the speed alone "
                 f"(corun={corun}; `corun=off` leaves it out)")
    return UnitCosts(names, fwd, bwd, pbytes, obytes.astype(np.int64), float(opt), float(pre), tensors,
                     float(step_call))


def recording_ns(opt, g: DependencyGraph) -> float:
    """The tracer's cost per recorded op that ``opt`` takes out of each micro-batch pass, in ns:
    its ``recording_us`` in us, or ``auto``: measured on this machine once per process
    (:func:`daydream.overhead.recording_us_here`) where ``g``'s work runs on CPU threads and
    holds recorded ops (:func:`recorded_ops`), else 0.

    >>> from types import SimpleNamespace
    >>> recording_ns(SimpleNamespace(name="pipeline", recording_us="1.5"), DependencyGraph())
    1500.0
    """
    from daydream.overhead import recording_us_here

    from .base import OptionError

    text = str(opt.recording_us).strip()
    if text == "auto":
        return recording_us_here() * 1e3 if recorded_ops(g) else 0.0
    try:
        us = float(text)
    except ValueError:
        us = -1.0
    if not us >= 0:
        raise OptionError(f"{opt.name}: recording_us must be auto or a non-negative number of us, got {text!r}")
    return us * 1e3


def non_negative(opt, *names) -> None:
    """:class:`~optimizations.base.OptionError` naming the first of ``opt``'s parameters ``names`` below 0."""
    from .base import OptionError

    for name in names:
        if getattr(opt, name) < 0:
            raise OptionError(f"{opt.name}: {name} must be non-negative, got {getattr(opt, name)}")


def parse_partition(text: str, names: tuple, stages: int) -> list:
    """Stage boundaries (first unit of each stage) from ``"n0:n1:..."`` (layers per stage) or
    ``"path1:path2:..."`` (first layer of stages 1..S-1: the first unit whose name starts with it)."""
    items = [x.strip() for x in text.split(":") if x.strip()]
    if all(x.isdigit() for x in items):
        counts = [int(x) for x in items]
        if len(counts) != stages or sum(counts) != len(names) or min(counts) < 1:
            raise ScheduleError(f"partition {text!r}: need {stages} positive layer counts summing to {len(names)}")
        return list(np.cumsum([0] + counts[:-1]))
    if len(items) != stages - 1:
        raise ScheduleError(f"partition {text!r}: need {stages - 1} boundary layer names for {stages} stages")
    bounds = [0]
    for p in items:
        hit = next((i for i, n in enumerate(names) if n.startswith(p)), None)
        if hit is None or hit <= bounds[-1]:
            raise ScheduleError(f"partition: no layer named {p!r} after {names[bounds[-1]]!r} "
                                f"(layers: {', '.join(names[:8])}{' ...' if len(names) > 8 else ''})")
        bounds.append(hit)
    return bounds


def partition(cost_ns, comm_ns, stages: int) -> list:
    """Contiguous split of units into ``stages``, minimising the slowest stage.

    A stage costs the sum of its units' ``cost_ns`` and at least the transfer
    ``comm_ns[k]`` of the boundary after its last unit ``k`` (a link is its
    own resource: PipeDream's ``max(compute, communication)``).  Ties go to
    the split with the smaller sum of squared stage costs.  Returns the first
    unit of each stage.

    >>> partition([1, 1, 1, 1], [0, 0, 0, 0], 2)
    [0, 2]
    >>> partition([3, 1, 1, 1], [0, 0, 0, 0], 2)
    [0, 1]
    """
    n = len(cost_ns)
    if stages > n:
        raise ScheduleError(f"{stages} stages but the model has only {n} layers")
    pre = np.concatenate([[0.0], np.cumsum(np.asarray(cost_ns, float))])
    INF = (float("inf"), float("inf"))
    best = [[INF] * (n + 1) for _ in range(stages + 1)]
    arg = [[0] * (n + 1) for _ in range(stages + 1)]
    best[0][0] = (0.0, 0.0)
    for s in range(1, stages + 1):
        for j in range(s, n - (stages - s) + 1):
            for i in range(s - 1, j):
                if best[s - 1][i] == INF:
                    continue
                c = pre[j] - pre[i]
                c = max(c, comm_ns[j - 1]) if j < n else c
                cand = (max(best[s - 1][i][0], c), best[s - 1][i][1] + c * c)
                if cand < best[s][j]:
                    best[s][j], arg[s][j] = cand, i
    bounds, j = [], n
    for s in range(stages, 0, -1):
        j = arg[s][j]
        bounds.append(j)
    return [int(b) for b in bounds[::-1]]


def stage_costs(u: UnitCosts, bounds, device, action_overhead_ns: float = 0.0,
                comm_actions: bool = False, scale_grads: bool = False) -> StageCosts:
    """Sum units into stages (``bounds``: first unit of each); ``action_overhead_ns`` is added to
    every stage's forward and backward (the pipeline runtime's own cost per action) and, with
    ``comm_actions`` (a runtime that runs each send and receive as an action of its own, as
    ``_PipelineScheduleRuntime`` does), to every posting of a send or a receive.  With
    ``scale_grads``, each stage divides its gradients by the micro-batch count after its last
    backward (:func:`scale_grads_ns`)."""
    edges = list(bounds) + [len(u.names)]
    sl = [slice(a, b) for a, b in zip(edges[:-1], edges[1:])]
    params = [int(u.param_bytes[s].sum()) for s in sl]
    total = sum(params)
    work = [float(u.fwd_ns[s].sum() + u.bwd_ns[s].sum()) for s in sl]
    share = [p / total for p in params] if total else [w / (sum(work) or 1) for w in work]
    return StageCosts(fwd_ns=tuple(float(u.fwd_ns[s].sum()) + action_overhead_ns for s in sl),
                      bwd_ns=tuple(float(u.bwd_ns[s].sum()) + action_overhead_ns for s in sl),
                      send_bytes=tuple(int(u.out_bytes[b - 1]) for b in edges[1:]),
                      param_bytes=tuple(params),
                      stash_bytes=tuple(int(u.out_bytes[s].sum()) for s in sl),
                      optimizer_ns=split_step_ns(u.optimizer_ns, u.optimizer_call_ns, share), pre_ns=u.pre_ns,
                      bounds=tuple(edges),
                      accumulate_ns=tuple(sum(accumulate_ns(device, int(p)) for p in u.param_bytes[s]) for s in sl),
                      comm_action_ns=action_overhead_ns if comm_actions else 0.0,
                      scale_grads_ns=tuple(scale_grads_ns(device, u.param_bytes[s], u.param_tensors[s]) for s in sl)
                      if scale_grads else ())


def scale_grads_ns(device, param_bytes, tensors) -> float:
    """torch's pipelining runtime dividing one stage's gradients by the micro-batch count
    (``scale_grads=True``, its default; ``grad.div_(M)`` per parameter after the stage's last
    backward): per tensor the device's op overhead, and an in-place pass over their bytes at
    the device's in-place rate for that many
    (:meth:`~daydream.device.DeviceProfile.inplace_bw_bytes_per_s`).  The last backward has
    just written every one of them, so they are wherever that many bytes stay: in a cache that
    holds them, else in memory.  (Until session 86 the pass was costed from memory, at the
    out-of-place streaming rate: 2.0 ms for the validation MLP's 14.7 MB of gradients, which
    torch's runtime divided in 0.8 ms.)

    >>> from daydream.device import Curve, DeviceProfile
    >>> dev = DeviceProfile("x", "cpu", {}, {"float32": Curve(((1e3, 1e9), (1e8, 1e10)))}, 2000,
    ...                     inplace={"float32": Curve.flat(1e9)})
    >>> scale_grads_ns(dev, np.array([4000, 1000]), np.array([2, 1]))
    16000.0
    """
    nbytes = float(np.sum(param_bytes))
    if nbytes <= 0:
        return 0.0
    moved = 2 * nbytes
    return int(np.sum(tensors)) * device.op_overhead_ns + moved / device.inplace_bw_bytes_per_s(moved) * 1e9


#: Bytes an in-place gradient accumulation (``grad += new``) moves per gradient byte:
#: two reads and one write.
ACCUMULATE_BYTES_PER_BYTE = 3


def accumulate_ns(device, param_bytes: int) -> float:
    """Time to add one micro-batch's gradients of one module into ``.grad``: a streaming add over
    ``param_bytes`` at the device's measured bandwidth for that size (the first micro-batch of an iteration only
    stores them, as the traced single-batch iteration did)."""
    if param_bytes <= 0:
        return 0.0
    moved = ACCUMULATE_BYTES_PER_BYTE * param_bytes
    return moved / device.mem_bw_bytes_per_s(moved) * 1e9


#: The training phase of an action's tasks (its receive's post included).
_PHASE = {Kind.F: Phase.FORWARD, Kind.B: Phase.BACKWARD}


def _source(a: Action, n_stages: int):
    """The action whose output ``a`` takes: the previous stage's F, the next stage's B, or the
    last stage's own F (its loss); None for the first stage's F."""
    if a.kind is Kind.B and a.stage == n_stages - 1:
        return Action(a.stage, Kind.F, a.microbatch)
    prev = a.stage - 1 if a.kind is Kind.F else a.stage + 1
    return Action(prev, a.kind, a.microbatch) if 0 <= prev < n_stages else None


@dataclass
class PipeGraph:
    """A built pipeline graph and where its tasks are."""

    graph: DependencyGraph
    task: dict = field(default_factory=dict)     # (iteration, Action) -> task id
    extra: dict = field(default_factory=dict)    # (rank, iteration) -> [pre, (gradient scaling,) optimizer] task ids
    posts: list = field(default_factory=list)    # (task id, peer rank) of each posting of a send or a receive
    sent: dict = field(default_factory=dict)     # task id of a send's posting -> its transfer's
    received: dict = field(default_factory=dict)  # task id of a transfer -> its receive's posting


def build_graph(sc: StageCosts, actions_per_iter, iterations: int, device, flush: bool = True,
                microbatches: int = 0, waited_sends: bool = False, lowered_receives: bool = False) -> PipeGraph:
    """Dependency graph of ``iterations`` iterations of a pipeline schedule.

    Parameters
    ----------
    sc : StageCosts
    actions_per_iter : list of list of Action
        Per rank, the actions of one iteration (``flush=True``), or of all
        iterations with micro-batch ids running on (``flush=False``, 2BW; then
        iteration ``i`` owns micro-batches ``i*M .. (i+1)*M - 1``).
    waited_sends : bool
        The runtime waits for a send before its rank's next action where that
        is of the other kind or there is none (torch's ``Schedule1F1B`` posts
        it with the next receive and waits for both; :func:`waited_send`).
        Such a send's hand-over takes the profile's ``p2p_preposted`` latency
        (:meth:`~daydream.device.DeviceProfile.p2p_preposted_ns`: the sender
        blocked, its socket thread runs at once); every other send the
        ``p2p_handover`` mean, stalls included (the sender goes on computing
        and its socket thread waits for the core).
    lowered_receives : bool
        Each receive is posted where torch's ``_PipelineScheduleRuntime`` posts it when it runs
        a compute-only schedule (:func:`optimizations._schedules.receives_before`: as soon as
        its producer is placed, often an action or more before its consumer); otherwise right
        before the action that takes its data.
    """
    g = DependencyGraph()
    kind = LaneKind.GPU_STREAM if device.kind == "gpu" else LaneKind.CPU_THREAD
    P = len(actions_per_iter)
    where = {a.stage: r for r, seq in enumerate(actions_per_iter) for a in seq}
    comp = [g.add_lane(Lane(r, kind, f"pipeline rank {r}", "compute", f"rank {r} compute")) for r in range(P)]
    links: dict = {}
    names = {k: g.names.intern(k) for k in ("iteration boundary", "input", "optimizer step")}
    out = PipeGraph(g)
    M = microbatches or max(a.microbatch for seq in actions_per_iter for a in seq) + 1

    def add(lane, dur, name, phase, it, nbytes=0, kind_=None):
        ln = g.lanes[lane]
        k = kind_ if kind_ is not None else (EventKind.KERNEL if ln.kind == LaneKind.GPU_STREAM else EventKind.CPU_OP)
        (t,) = g.add_tasks(lane=[lane], kind=[k], name=[names.setdefault(name, g.names.intern(name))],
                           dur_ns=[int(round(dur))], rank=[ln.rank], phase=[int(phase)], iteration=[it],
                           bytes=[nbytes])
        g.lane_tasks[lane].append(int(t))
        return int(t)

    def link(a, b, act):
        """The lane of one stage's sends of one kind to rank ``b``: in micro-batch order at both
        ends, so first-come first-served on it never holds a transfer behind one whose receive
        is posted later (gloo matches each send with its own receive, not in one queue)."""
        key = (a, b, act.stage, act.kind)
        if key not in links:
            what = f"{'activations' if act.kind is Kind.F else 'gradients'} of stage {act.stage}"
            links[key] = g.add_lane(Lane(a, LaneKind.COMM, f"pipeline rank {a}", f"p2p to {b}: {what}",
                                         f"p2p {a}->{b} {act.kind.name}{act.stage}"))
        return links[key]

    def handshake(a, b):    # the receiver's notice to the sender: a lane of its own per link
        if ("h", a, b) not in links:
            links[("h", a, b)] = g.add_lane(Lane(a, LaneKind.COMM, f"pipeline rank {a}", f"handshake to {b}",
                                                 f"handshake {a}->{b}"))
        return links[("h", a, b)]

    deps = []
    send_post_ns, recv_post_ns = device.p2p_post_ns() if P > 1 else (0.0, 0.0)
    send_task_ns, recv_task_ns = send_post_ns + sc.comm_action_ns, recv_post_ns + sc.comm_action_ns
    handshake_ns = device.p2p_handshake_ns() if P > 1 else 0.0
    recv_posts = {}
    posted_before = receives_before(actions_per_iter) if lowered_receives else None
    n_iter = iterations if flush else 1
    for r in range(P):
        g.markers[r] = []
    sends = {}
    first_stage = {r: min((a.stage for a in seq), default=0) for r, seq in enumerate(actions_per_iter)}
    for it in range(n_iter):
        for r, seq in enumerate(actions_per_iter):
            if flush or it == 0:
                g.markers[r].append(add(comp[r], 0, "iteration boundary", Phase.OTHER, it, kind_=EventKind.MARKER))
                pre = add(comp[r], sc.pre_ns, "input", Phase.DATALOADER, it)
                out.extra[(r, it)] = [pre]
            for j, a in enumerate(seq):
                i = it if flush else a.microbatch // M
                if not flush and a.kind is Kind.F and a.microbatch % M == 0 and i > 0 and a.stage == first_stage[r]:
                    out.extra[(r, i)] = [add(comp[r], sc.pre_ns, "input", Phase.DATALOADER, i)]
                dur = sc.fwd_ns[a.stage] if a.kind is Kind.F else sc.bwd_ns[a.stage]
                if a.kind is Kind.B and a.microbatch % M and sc.accumulate_ns:
                    dur += sc.accumulate_ns[a.stage]
                ph = _PHASE[a.kind]
                for c in (posted_before[r].get(a, ()) if posted_before else (a,)):
                    prv = _source(c, len(sc.fwd_ns))
                    if recv_task_ns and prv is not None and where[prv.stage] != r:
                        recv_posts[(it, c)] = add(comp[r], recv_task_ns, f"post receive {c}", _PHASE[c.kind], i)
                        out.posts.append((recv_posts[(it, c)], where[prv.stage]))
                t = out.task[(it, a)] = add(comp[r], dur, str(a), ph, i)
                nxt = a.stage + 1 if a.kind is Kind.F else a.stage - 1
                if 0 <= nxt < len(sc.fwd_ns) and where[nxt] != r:
                    nb = sc.send_bytes[min(a.stage, nxt)]
                    src = t
                    if send_task_ns:    # the sending thread's share; the transfer counts from the post's call
                        src = add(comp[r], send_task_ns, f"post send {a}", ph, i)
                        out.posts.append((src, where[nxt]))
                        deps.append((t, src))
                    hand_ns = (device.p2p_preposted_ns(nb) if waited_sends and waited_send(seq, j)
                               else device.p2p_handover_ns(nb))
                    x = add(link(r, where[nxt], a), max(hand_ns - send_post_ns, 0.0), f"send {a}", ph, i,
                            nbytes=nb, kind_=EventKind.COLLECTIVE)
                    deps.append((src, x))
                    sends[(it, a)] = out.sent[src] = x
                if not flush and a.kind is Kind.B and a.microbatch % M == M - 1 and a.stage == first_stage[r]:
                    opt = add(comp[r], sum(sc.optimizer_ns[s] for s in where if where[s] == r),
                              "optimizer step", Phase.OPTIMIZER, i)
                    out.extra[(r, i)].append(opt)
                    if i + 2 < iterations:
                        g.markers[r].append(add(comp[r], 0, "iteration boundary", Phase.OTHER, i + 1,
                                                kind_=EventKind.MARKER))
            if flush:
                scaling = sum(sc.scale_grads_ns[s] for s in where if where[s] == r) if sc.scale_grads_ns else 0.0
                if scaling:
                    out.extra[(r, it)].append(add(comp[r], scaling, "scale gradients by 1/M", Phase.BACKWARD, it))
                out.extra[(r, it)].append(add(comp[r], sum(sc.optimizer_ns[s] for s in where if where[s] == r),
                                              "optimizer step", Phase.OPTIMIZER, it))
    if flush:   # 2BW: the last iteration only drains the pipeline; its end is no steady-state boundary
        for r in range(P):
            g.markers[r].append(add(comp[r], 0, "iteration boundary", Phase.OTHER, iterations, kind_=EventKind.MARKER))
    for (it, a), t in out.task.items():
        src = _source(a, len(sc.fwd_ns))
        if src is not None:
            deps.append((sends.get((it, src), out.task[(it, src)]), t))
        if (it, a) in recv_posts and (it, src) in sends:     # the transfer waits for the receive's post
            post, x = recv_posts[(it, a)], sends[(it, src)]
            out.received[x] = post
            if handshake_ns:
                r, s_ = int(g.tasks["rank"][post]), int(g.tasks["rank"][x])
                post_ = add(handshake(r, s_), handshake_ns, f"handshake {a}", g.tasks["phase"][post],
                            int(g.tasks["iteration"][post]), kind_=EventKind.COLLECTIVE)
                deps.append((post, post_))
                post = post_
            deps.append((post, x))
    s, d = zip(*deps) if deps else ((), ())
    g.add_edges(np.asarray(s, np.int32), np.asarray(d, np.int32), EdgeKind.DATA)
    if not flush:   # tasks of the unbounded tail iterations count in no iteration
        T = g.tasks
        T["iteration"][(T["iteration"] >= iterations - 2) & (T["kind"] != EventKind.MARKER)] = -1
    for r in range(P):
        g.measured_boundaries_ns[r] = np.zeros(len(g.markers[r]), np.int64)
    return out


def waited_send(seq, j: int) -> bool:
    """Whether torch's ``Schedule1F1B`` waits for the send of action ``seq[j]`` before its rank
    computes again: where the next action is of the other kind (the send posted and waited with
    that action's receive) or there is none (the step's end); not in the warm-up (a forward
    followed by a forward: the send fired and waited after the next one) or the cool-down
    (backward after backward).  On this project's VM a sender that went on computing left its
    gloo thread waiting for the core: the runtime's hand-overs averaged 177 us in a logged GPipe
    run (6 of 8 sends so) and 67 us in a 1F1B one (1 of 8), medians 17-65 us in both
    (``benchmarks/pipeline_timeline.py``; docs/validation-log.md, "Session 38").

    >>> from optimizations._schedules import one_f_one_b
    >>> [[str(a) for j, a in enumerate(seq) if waited_send(seq, j)] for seq in one_f_one_b(2, 3)]
    [['0F1', '0B0', '0F2', '0B2'], ['1F0', '1B0', '1F1', '1B1', '1F2', '1B2']]
    """
    return j + 1 >= len(seq) or seq[j + 1].kind is not seq[j].kind


def simulate_pipeline(pg: PipeGraph, device, ctx=None):
    """:func:`daydream.sim.simulate` of ``pg.graph`` after :func:`add_late_holds`,
    :func:`add_post_collisions` and :func:`~optimizations._resume.add_resume_costs` on the ranks'
    compute lanes (each noted on ``ctx`` where given and it adds anything)."""
    n_late, late = add_late_holds(pg, device)
    n, added, n_held, held = add_post_collisions(pg, device)
    notes = [(n_late, f"{n_late} sends whose receive is posted after them wait part of the time until their "
                      f"sender stops computing: +{late / 1e6:.2f} ms of transfer over the simulated iterations "
                      "(p2p_late_hold)"),
             (n, f"{n} posts of a send or receive collide with a post of their peer (within "
                 f"{device.p2p_collision_window_ns() / 1e3:.0f} us): +{added / 1e6:.2f} ms of posting over the "
                 "simulated iterations (p2p_collision)"),
             (n_held, f"{n_held} sends posted near a post of their peer (within "
                      f"{device.p2p_hold_window_ns() / 1e3:.0f} us) hold their data back: +{held / 1e6:.2f} ms of "
                      "transfer over the simulated iterations (p2p_hold)")]
    for k, text in notes:
        if ctx is not None and k:
            ctx.note(f"pipeline: {text}")
    g = pg.graph
    compute = [i for i, ln in enumerate(g.lanes) if ln.kind != LaneKind.COMM]
    n, added = add_resume_costs(g, compute, simulate(g), device)
    if ctx is not None and n:
        ctx.note(f"pipeline: {n} tasks start after their rank sat idle: +{added / 1e6:.2f} ms over the simulated "
                 "iterations (the profile's resume factors)")
    return simulate(g)
