"""``hydra``: K models, each split into D shards over D devices; shard-parallel scheduling.

Hydra (Nagrecha & Kumar, 2022) trains many large models that are each split
into shards over the devices (model parallelism).  Trained one at a time,
only one device works at any moment; Hydra interleaves the shards of
different models so that while device 1 runs model A's second shard, device
0 runs model B's first one.

Model
-----
From the traced model (all K models are copies of it), per leaf module (the
*layers*, in forward order): the forward and backward time per iteration
(task durations plus the Python gaps before them, on the thread that runs
training; kernel time on a GPU trace).  Tasks of no module go to the module
that runs around them (input copies to the first, the loss to the last);
data loading to the first shard's forward; the optimizer step's parameter
updates to the shards in proportion to their parameter bytes (module table),
and to each shard the whole call around them, which its own step runs
(:mod:`optimizations._optstep`).  Each shard also zeroes its own gradients and
runs its own backward call, from the loss or from the gradient it receives,
so each pays the trace's ``zero_grad`` call and the backward call's way in and
out (:func:`optimizations._optstep.call_costs`), which a one-process trace
shows once: the way in before the loss's node, the way out inside the
optimizer step's idle time.  Each shard's step also pays the step call's
way out (hooks and frames after its last update), which the trace shows once,
in the idle time before the next iteration's boundary; the rest of that idle
time, from the step call's end to the boundary, is the tracer's bookkeeping
between iterations, which the run predicted does not do, and is left out
(:class:`optimizations._optstep.CallCosts`: 59-62 and 73-83 us an iteration on
the validation's MLP, where they had put the first shard's forward 16-35 %
over the runtime's, ``benchmarks/hydra_terms.py``, session 92).  The layers are split
into D contiguous shards of balanced forward + backward time (the split that
minimises the largest shard, each layer weighed at its median iteration, so
that a stall in one iteration does not move it), or as ``layers=`` says (``4:2``: the first
four layers on device 0, the next two on device 1).

The schedule is a graph of shard tasks on D device lanes simulated by the
project's simulator: per model, forward shards in order, backward shards in
reverse, each shard's optimizer step after its backward; between devices an
activation (forward) or gradient (backward) transfer of the cut layer's
output bytes on a link lane per direction, lasting ``bytes / bw + latency``
with the device profile's point-to-point figures for a receive posted ahead
(:meth:`daydream.device.DeviceProfile.p2p_preposted_ns`: the latency no
higher than the calibrated time of such a send, ``p2p_preposted``, since the
fitted one carries sends stalled by a receive posted late; without
point-to-point figures, one step of the all-reduce model); the sending
device first spends the profile's host cost of posting a send
(``p2p_post``), which the transfer time includes.  Under ``shard-parallel``
each transfer also takes the profile's ``p2p_notify_ns``
(:meth:`daydream.device.DeviceProfile.p2p_notify_ns`): a scheduler that must
not block on one receive learns of arrivals through waiter threads, which
wake it (the real runtime's hand-overs to an idle device took 192-269 us
from the sender's task end against 22-75 us model-parallel, whose
scheduler waits on the receive itself: docs/parallel.md, session 51).
Receives are posted before a step starts (as the real runtime does); one
whose data lands while its device runs another shard lengthens that shard
by the profile's cost of taking a message in on a busy core (``p2p_land``,
:mod:`optimizations._landing`), and costs nothing where the device waits
for it.  A shard that starts after its device sat idle takes
the profile's calibrated factor for work resumed after that gap
(``resume``, :mod:`optimizations._resume`); a device's first shard of the
step counts the gap since its last shard of the step before, the steps
repeating one makespan apart (rank 1's first forward, after its wait for
rank 0's, ran 10-15 % over the trace's: session 42).  Each device runs its K models'
steps in turn, so its caches see the parameters and optimizer state of K
copies of its shard pass each step, where the trace's one process saw the
whole model's: every shard task takes the profile's factor for the one state
against the other, never below 1 (``cycle``,
:meth:`daydream.device.DeviceProfile.cycle_factor`,
:mod:`daydream.calibrate_cycle`, :meth:`Hydra._cycle_factors`; until session
90 over one device only, and against one copy of the shard).

* ``model-parallel``: the models one after another (each device runs its
  shards in model order).
* ``shard-parallel``: devices and links are priority lanes; whenever a
  device is free it runs the ready shard with the longest remaining work
  of its model (Hydra's longest-remaining-first).  All models being copies,
  that is the least advanced model, ties to the lower model index.

The predicted iteration time is the makespan of one training step of all K
models under ``schedule``.  Metrics: both makespans (``*_makespan_ms``), the
speedup of shard-parallel over model-parallel, mean device utilisation of
each, the number of layers per shard (``shardS_layers``) and each device's
cycle factor (``shardS_cycle_factor``, where ``cycle`` applies).

On a CPU the devices are one host's cores, which share its caches and
memory bandwidth: while another device is busy a shard runs at the co-run
rate of its phase (``corun``, :func:`optimizations._corun.corun_rates`: by
default the traced iteration's compute- and memory-bound ops re-run beside a
twin on the other core, each phase's timed apart: an optimizer step's
element-wise updates slow more than matmuls), and only
for the time it overlaps the other's work
(:func:`optimizations._corun.corun_stretch`): shard-parallel keeps both
cores busy, model-parallel mostly one.

Where it stops being valid: one model's shards must fit on one device each
(memory is not modelled); every device is as fast as the traced one and
runs one shard at a time (on a CPU: one process per core; more than two
busy cores slow each other as two do); transfers do not slow the
computation they overlap; Python time of a layer moves with the layer; Hydra's spilling of
shards to host memory is not modelled.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from daydream.graph.graph import DependencyGraph, EdgeKind
from daydream.model import EventKind, Lane, LaneKind, Phase
from daydream.primitives import LanePolicy, set_policy

from ._common import cycle_ratio, module_table
from ._corun import PHASE_SOURCES, corun_rates, corun_stretch, rates_text
from ._landing import add_landing_costs
from ._optstep import CallCosts
from ._resume import add_resume_costs
from ._shards import (ShardCosts, Unit, balanced_split, layer_units, parse_layers, shard_calls, shard_costs,
                      step_call_ns)
from .base import NotApplicable, Optimization, OptionError, Param

__all__ = ["Hydra", "OPTIMIZATION", "Unit", "ShardCosts", "layer_units", "balanced_split", "parse_layers",
           "shard_costs", "shard_calls", "step_call_ns", "schedule_graph", "device_lanes", "Schedule", "MAX_MODELS"]

#: More models than this would only make a long, uninformative schedule.
MAX_MODELS = 4096


class Schedule:
    """How the models' shards share the devices."""

    MODEL_PARALLEL = "model-parallel"
    SHARD_PARALLEL = "shard-parallel"


def _add(g, lane, dur, name, phase, prio):
    (t,) = g.add_tasks(lane=[lane], kind=[EventKind.KERNEL if g.lanes[lane].kind != LaneKind.COMM
                                          else EventKind.MEMCPY],
                       name=[g.names.intern(name)], dur_ns=[int(round(dur))], rank=[g.lanes[lane].rank],
                       phase=[int(phase)], iteration=[0], priority=[prio])
    g.lane_tasks[lane].append(int(t))
    return int(t)


def schedule_graph(costs: ShardCosts, models: int, transfer_ns, schedule: str,
                   send_post_ns: float = 0.0) -> DependencyGraph:
    """The graph of ``models`` training steps over the shards, on one lane per device.

    ``transfer_ns(nbytes)`` gives a point-to-point transfer time, counted from
    the send's call; ``send_post_ns`` of it is the sending device's own work
    (posting the send), run right after the shard that produced the data.
    Tasks are added model by model, so FIFO lanes run the models one after
    another; ``shard-parallel`` makes device and link lanes priority lanes
    keyed on each task's position in its model's chain (earliest = longest
    remaining).
    """
    D = len(costs.fwd_ns)
    g = DependencyGraph()
    dev = [g.add_lane(Lane(0, LaneKind.CPU_THREAD, "hydra", s, f"device {s}", s)) for s in range(D)]
    fwd_link = [g.add_lane(Lane(0, LaneKind.COMM, "hydra", f"{s}>{s + 1}", f"link {s}->{s + 1}")) for s in range(D - 1)]
    bwd_link = [g.add_lane(Lane(0, LaneKind.COMM, "hydra", f"{s + 1}>{s}", f"link {s + 1}->{s}")) for s in range(D - 1)]
    start = _add(g, dev[0], 0, "start", Phase.OTHER, -1)
    g.tasks["kind"][start] = EventKind.MARKER
    chain_len = 4 * D
    last = []

    def send(after, device, link, nbytes, name, phase, pr):
        if send_post_ns:     # before any other ready shard (priority -1): the runtime posts it at once
            post = _add(g, device, send_post_ns, f"post {name}", phase, -1)
            g.add_edges(after, post, EdgeKind.DATA)
            after = post
        x = _add(g, link, max(transfer_ns(nbytes) - send_post_ns, 0.0), name, phase, pr)
        g.tasks["bytes"][x] = nbytes
        g.add_edges(after, x, EdgeKind.DATA)
        return x

    for k in range(models):
        def prio(pos):
            return pos * models + k
        prev = start
        for s in range(D):
            f = _add(g, dev[s], costs.fwd_ns[s], f"model {k} forward shard {s}", Phase.FORWARD, prio(2 * s))
            g.add_edges(prev, f, EdgeKind.DATA)
            prev = f
            if s < D - 1:
                prev = send(prev, dev[s], fwd_link[s], costs.send_bytes[s], f"model {k} activation {s}->{s + 1}",
                            Phase.FORWARD, prio(2 * s + 1))
        for s in reversed(range(D)):
            b = _add(g, dev[s], costs.bwd_ns[s], f"model {k} backward shard {s}", Phase.BACKWARD,
                     prio(2 * D + 2 * (D - 1 - s)))
            g.add_edges(prev, b, EdgeKind.DATA)
            prev = b
            if s > 0:    # the gradient leaves before this shard's optimizer step, as in the runtime
                prev = send(b, dev[s], bwd_link[s - 1], costs.send_bytes[s - 1], f"model {k} gradient {s}->{s - 1}",
                            Phase.BACKWARD, prio(2 * D + 2 * (D - 1 - s) + 1))
            o = _add(g, dev[s], costs.opt_ns[s], f"model {k} optimizer shard {s}", Phase.OPTIMIZER, prio(chain_len))
            g.add_edges(b, o, EdgeKind.DATA)
            last.append(o)
    end = _add(g, dev[0], 0, "end", Phase.OTHER, 2 ** 30)
    g.tasks["kind"][end] = EventKind.MARKER
    g.add_edges(np.asarray(last), np.full(len(last), end), EdgeKind.DATA)
    g.markers = {0: [start, end]}
    g.measured_boundaries_ns = {0: np.zeros(2, np.int64)}
    if schedule == Schedule.SHARD_PARALLEL:
        for lane in range(len(g.lanes)):
            set_policy(g, lane, LanePolicy.PRIORITY)
    return g


def device_lanes(g) -> list:
    """The device lanes of a :func:`schedule_graph`."""
    return [i for i, ln in enumerate(g.lanes) if ln.kind == LaneKind.CPU_THREAD]


def _utilisation(res, devices: int) -> float:
    g = res.graph
    busy = np.zeros(devices)
    for s in range(devices):
        seq = np.asarray(g.lane_tasks[s], np.int64)
        busy[s] = (res.end_ns[seq] - res.start_ns[seq]).sum()
    span = res.makespan_ns
    return float(busy.mean() / span) if span else 0.0


#: ``cycle``'s default, the same as ``true`` since session 90 (until then: on one device only;
#: :meth:`Hydra._cycle_factors`).
CYCLE_AUTO = "auto"


class Hydra(Optimization):
    name = "hydra"
    summary = "K models split into shards over D devices: shard-parallel (Hydra) vs. one model at a time"
    params = (Param("models", 4, "number of models trained together (copies of the traced one)", int),
              Param("devices", 2, "devices each model is split over (one shard per device)", int),
              Param("schedule", Schedule.SHARD_PARALLEL, "schedule whose makespan is the predicted time", str,
                    (Schedule.SHARD_PARALLEL, Schedule.MODEL_PARALLEL)),
              Param("layers", "", "layers per shard, one count per device (e.g. 4:2); default: the split that "
                    "balances the shards' forward + backward time", str),
              Param("corun", "trace", "CPU: devices that are one host's cores run their shards at the co-run rate "
                    "of the trace's ops while another is busy (trace: its ops re-run beside a twin, a rate per "
                    "phase; compute: one rate, of its compute ops only; profile: the device profile's; off)", str,
                    PHASE_SOURCES),
              Param("calls", "trace", "CPU: each shard zeroes its own gradients and runs its own backward call, "
                    "paying the trace's zero_grad and the backward call's way in and out, and its step's way out, "
                    "the tracer's time at the iteration boundary left out (trace) or not (off)", str,
                    ("trace", "off")),
              Param("cycle", CYCLE_AUTO, "CPU: a device runs its K models' steps in turn, so each step finds the "
                    "caches as K copies of the device's shard (parameters and optimizer state) leave them, not "
                    "as the whole model's did in the trace (auto or true: the profile's cycle figures, never "
                    "below 1; false: leave it out)", str,
                    (CYCLE_AUTO, "true", "false")))
    assumptions = __doc__

    def apply(self, ctx):
        K, D = self.models, self.devices
        if K < 1 or D < 1:
            raise OptionError(f"hydra: models and devices must be at least 1 (got models={K}, devices={D})")
        if K > MAX_MODELS:
            raise OptionError(f"hydra: models={K} is more than {MAX_MODELS}")
        table = module_table(ctx, "hydra")
        units, head_ns, opt_ns = layer_units(ctx.graph, table)
        if D > len(units):
            raise OptionError(f"hydra: devices={D} means more shards than the model's {len(units)} layer(s)")
        calls = shard_calls(ctx) if D > 1 and self.calls == "trace" else CallCosts()
        costs = shard_costs(units, head_ns, opt_ns, D, parse_layers(self.layers, D, len(units)),
                            step_call_ns(ctx.graph), calls)
        cycle = self._cycle_factors(ctx, costs.param_bytes)
        costs = dataclasses.replace(costs, **{k: tuple(x * f for x, f in zip(getattr(costs, k), cycle))
                                              for k in ("fwd_ns", "bwd_ns", "opt_ns")})
        dev = ctx.device
        if D > 1 and not (dev.p2p or dev.collective):
            raise NotApplicable(f"hydra: device profile {dev.name!r} has no transfer figures; run daydream calibrate")
        transfer_ns, (send_post_ns, _) = dev.p2p_preposted_ns, dev.p2p_post_ns()
        notify_ns = dev.p2p_notify_ns() if D > 1 else 0.0
        rate = corun_rates(ctx, self.corun) if D > 1 else {None: 1.0}
        graphs, results, resumed, landed = {}, {}, {}, {}
        for sched in (Schedule.MODEL_PARALLEL, Schedule.SHARD_PARALLEL):
            extra_ns = notify_ns if sched == Schedule.SHARD_PARALLEL else 0.0
            handover_ns = lambda nbytes, extra_ns=extra_ns: transfer_ns(nbytes) + extra_ns  # noqa: E731
            graphs[sched] = g = schedule_graph(costs, K, handover_ns, sched, send_post_ns)
            work = g.tasks["dur_ns"].copy()
            results[sched] = res = corun_stretch(g, device_lanes(g), rate)
            resumed[sched] = landed[sched] = (0, 0)
            if dev.resume or dev.p2p_land:   # from the co-run schedule: idle gaps before work, data landing
                g.tasks["dur_ns"][:] = work
                resumed[sched] = add_resume_costs(g, device_lanes(g), res, dev, period_ns=res.makespan_ns)
                landed[sched] = add_landing_costs(g, res, dev)
                results[sched] = corun_stretch(g, device_lanes(g), rate)
        mp, sp = (results[s].makespan_ns / 1e6 for s in (Schedule.MODEL_PARALLEL, Schedule.SHARD_PARALLEL))
        ctx.metrics.update({"model_parallel_makespan_ms": mp, "shard_parallel_makespan_ms": sp,
                            "shard_parallel_speedup": mp / sp if sp else float("inf"),
                            "model_parallel_utilisation": _utilisation(results[Schedule.MODEL_PARALLEL], D),
                            "shard_parallel_utilisation": _utilisation(results[Schedule.SHARD_PARALLEL], D)})
        ctx.metrics.update({f"shard{s}_layers": n for s, n in enumerate(costs.layers)})
        ctx.graph = graphs[self.schedule]
        n, added = resumed[self.schedule]
        if n:
            ctx.note(f"hydra: {n} shard tasks start after their device sat idle: +{added / 1e6:.2f} ms of work "
                     "(the profile's resume factors)")
        n, added = landed[self.schedule]
        if n:
            ctx.note(f"hydra: {n} transfers land while their device computes: +{added / 1e6:.2f} ms of work "
                     "(the profile's p2p_land)")
        if any(f != 1.0 for f in cycle):
            ctx.note(f"hydra: each device runs {K} models' steps in turn: its shards' work takes "
                     + " / ".join(f"x{f:.2f}" for f in cycle) + " (the profile's cycle figures, for the "
                     f"parameters and optimizer state of {K} copies of the device's shard against the traced "
                     "model's; `cycle=false` leaves it out)")
        if any(r < 1.0 for r in rate.values()):
            ctx.note(f"hydra: a device's shard runs at {rates_text(rate)} its speed alone while another device is "
                     f"busy (corun={self.corun}; `corun=off` leaves it out)")
        if calls != CallCosts():
            ctx.note(f"hydra: each shard zeroes its own gradients and runs its own backward call: "
                     f"+{calls.zero_grad_ns / 1e3:.0f} us zero_grad (shards after the first), "
                     f"+{calls.backward_entry_ns / 1e3:.0f} us into the call (shards before the last), "
                     f"{calls.backward_exit_ns / 1e3:.0f} us out of it (every shard; the trace has it in the "
                     f"step's idle time), +{calls.step_exit_ns / 1e3:.0f} us out of the step call (every shard; the "
                     f"trace has it before the next iteration's boundary); the tracer's own "
                     f"{calls.boundary_ns / 1e3:.0f} us at each boundary left out (`calls=off` leaves all this out)")
        if notify_ns and self.schedule == Schedule.SHARD_PARALLEL:
            ctx.note(f"hydra: shard-parallel learns of each arrival through a waiter thread: +{notify_ns / 1e3:.0f} us "
                     "a transfer (the profile's p2p_notified)")
        clean_ns, fitted_ns = dev.p2p_preposted_ns(1.0), dev.p2p_ns(1.0)   # a 1-byte send: the latency
        if D > 1 and clean_ns < fitted_ns:
            ctx.note(f"hydra: receives are posted ahead: a hand-over's latency is the profile's send to such a "
                     f"receive, {clean_ns / 1e3:.0f} us, not its fitted {fitted_ns / 1e3:.0f} us (which carries "
                     "sends stalled by a receive posted late)")
        ctx.note(f"hydra: {K} model(s) x {D} shard(s) of {', '.join(map(str, costs.layers))} layer(s); "
                 f"shard forward/backward ms: "
                 + ", ".join(f"{f / 1e6:.2f}/{b / 1e6:.2f}" for f, b in zip(costs.fwd_ns, costs.bwd_ns))
                 + f"; transfers {', '.join(f'{b / 1e3:.0f} kB' for b in costs.send_bytes) or 'none'}")

    def _cycle_factors(self, ctx, shard_param_bytes) -> tuple:
        """Per device, :func:`optimizations._common.cycle_ratio` of K copies of its shard's
        parameters against the whole traced model's, never below 1 (1.0 each with ``cycle`` off).

        A device's process cycles through its own K shards; the trace's one process cycled
        the whole model.  On one device the two references agree.  Over two devices
        (session 90, the Intel host; ``benchmarks/hydra_k_tasks.py --models 1,2,4 --reps 2``)
        the real runtime took 5.20 / 5.31 / 5.78 and 5.30 / 5.58 / 6.24 ms a model
        model-parallel for K = 1 / 2 / 4, each rank's task medians at K = 4 summing to
        x1.09-1.23 of K = 1's, where the profile of run 2026-12-07o read x1.00 / x1.14 for K =
        2 / 4 against the whole model (x1.055 / x1.20 against one copy of the shard).  The floor:
        a shard alone ran no faster than in the trace (session 40; at K = 1 rank 1's backward
        read 1.13 ms in the trace, 1.21-1.23 in the runtime, ``benchmarks/hydra_terms.py
        --models 1``).

        Until session 90 ``cycle=auto`` left it out over several devices, after the AMD host of
        session 42, whose real steps took as long with 2 or 4 models in turn as with one (per
        model 7.15-7.34 ms for K = 4 against 6.98-7.59 for K = 1) where its probe read
        x1.10-1.19; ``cycle=false`` gives that over several devices."""
        if self.cycle == "false":
            return (1.0,) * len(shard_param_bytes)
        model = sum(shard_param_bytes)
        factors = tuple(max(1.0, cycle_ratio(ctx, self.models, b, traced_bytes=model)) for b in shard_param_bytes)
        ctx.metrics.update({f"shard{d}_cycle_factor": f for d, f in enumerate(factors)})
        return factors

OPTIMIZATION = Hydra
