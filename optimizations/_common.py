"""Helpers shared by the optimization modules (graph queries, metadata)."""
from __future__ import annotations

import dataclasses
import re
from collections import defaultdict

import numpy as np

from daydream.graph import EdgeKind

from .base import NotApplicable

__all__ = ["by_rank_iteration", "launch_of", "module_table", "param_tensors", "layer_mask", "HOW_TO_RECORD",
           "OPTIMIZER_STEP_RE", "optimizer_state_factor", "leaf_paths", "activation_bytes", "cycle_ratio",
           "cycle_now", "forget_cycle_now"]

HOW_TO_RECORD = "record it with `daydream trace -- python train.py ...`, which stores the module table"
OPTIMIZER_STEP_RE = r"^Optimizer\.step#"


def by_rank_iteration(g, tasks) -> dict:
    """Group task ids by (rank, iteration), in lane order within each lane."""
    out = defaultdict(list)
    T = g.tasks
    for t in np.asarray(tasks).tolist():
        out[(int(T["rank"][t]), int(T["iteration"][t]))].append(t)
    return dict(out)


def launch_of(g) -> dict:
    """GPU task -> the runtime call that launched it."""
    E = g.edges
    m = E["kind"] == EdgeKind.LAUNCH
    return dict(zip(E["dst"][m].tolist(), E["src"][m].tolist()))


def module_table(ctx, what: str) -> dict:
    """Module path -> row of the trace's module table; NotApplicable if absent."""
    mods = ctx.meta().get("modules")
    if not mods:
        raise NotApplicable(f"{what} needs parameter sizes per module, which this trace does not have; "
                            f"{HOW_TO_RECORD}")
    return {m["path"]: m for m in mods}


def param_tensors(row: dict) -> int:
    """Parameter tensors a module owns, from its module-table row; without ``param_shapes``
    (traces before they were recorded) a module with parameters counts one.

    >>> param_tensors({"param_bytes": 96, "param_shapes": [[4, 5], [4]]}), param_tensors({"param_bytes": 96})
    (2, 1)
    """
    return len(row.get("param_shapes") or ()) or int(bool(row.get("param_bytes")))


def layer_mask(g, pattern: str) -> np.ndarray:
    rx = re.compile(pattern)
    ok = np.array([rx.search(s) is not None for s in g.layers.strings] + [False], bool)
    L = g.tasks["layer"]
    return ok[np.where(L >= 0, L, len(g.layers.strings))]


def optimizer_state_factor(meta: dict) -> int:
    """Optimizer state per parameter byte: SGD with momentum 1, Adam/AdamW 2, plain SGD 0.

    >>> optimizer_state_factor({"optimizer": {"name": "Adam"}}), optimizer_state_factor({})
    (2, 0)
    """
    opt = meta.get("optimizer") or {}
    name = str(opt.get("name", "")).lower()
    if name.startswith("adam"):
        return 2
    if name == "sgd" and (opt.get("defaults") or {}).get("momentum"):
        return 1
    return 0


def leaf_paths(paths) -> list:
    """The module paths of ``paths`` (a module table's, in its order) that hold no other.

    >>> leaf_paths(["m", "m.a", "m.b", "m.ab"])
    ['m.a', 'm.b', 'm.ab']
    """
    paths = list(paths)
    return [p for p in paths if not any(q.startswith(p + ".") for q in paths)]


def activation_bytes(mods) -> int:
    """Bytes the leaf modules of a module table (``mods``, its rows) output in one forward pass:
    the activations a training step keeps for its backward pass (a module inside another counts
    once, as its own row; 0 where the table records no output sizes).

    >>> activation_bytes([{"path": "m", "output_bytes": 40}, {"path": "m.a", "output_bytes": 30},
    ...                   {"path": "m.b", "output_bytes": 10}, {"path": "m.c", "output_bytes": None}])
    40
    """
    rows = {str(m.get("path", "")): m for m in mods}
    return sum(int(rows[p].get("output_bytes") or 0) for p in leaf_paths(rows))


def cycle_ratio(ctx, copies: int, param_bytes: float | None = None, activations: bool = False,
                now: bool = False, traced_bytes: float | None = None) -> float:
    """The device profile's cycle factor (:meth:`daydream.device.DeviceProfile.cycle_factor`)
    for the parameters and optimizer state of ``copies`` models against one's: how much longer
    a step takes when ``copies`` copies of the traced model keep their state on the host (Hydra's
    devices taking turns, HFTA's fused copies) than the traced one did.  ``param_bytes``: the
    parameters of one copy (default: the traced model's, from its module table; Hydra passes a
    device's shard).  ``activations``: each copy's activations (:func:`activation_bytes`) count
    with its state, for copies whose activations are all live at once (HFTA's fused step; Hydra's
    models run one at a time).  ``now``: the curve measured on this machine now
    (:func:`cycle_now`) instead of the profile's, where torch is here.  ``traced_bytes``: the
    parameters whose state the trace's ops saw pass through the caches each iteration, the
    reference (default: one copy's ``param_bytes``; Hydra passes the whole traced model's, which
    its one process ran).  1.0 off CPU, without the profile's figures, or without the trace's
    module table."""
    dev = ctx.device
    mods = ctx.meta().get("modules") or []
    if dev.kind != "cpu" or not dev.cycle or not mods:
        return 1.0
    if now:
        dev = dataclasses.replace(dev, cycle=cycle_now(dev.threads) or dev.cycle)
    if param_bytes is None:   # each row counts the module's own parameters: the rows add up to the model's
        param_bytes = sum(int(m.get("param_bytes") or 0) for m in mods)
    per_byte = 1 + optimizer_state_factor(ctx.meta())
    extra = activation_bytes(mods) if activations else 0
    state = param_bytes * per_byte + extra
    ref = state if traced_bytes is None else traced_bytes * per_byte + extra
    return dev.cycle_factor(copies * state) / dev.cycle_factor(ref)


#: Curves :func:`cycle_now` measured in this process, per thread count.
_CYCLE_NOW: dict = {}


def cycle_now(threads: int | None = None) -> tuple:
    """The cycle curve (:func:`daydream.calibrate_cycle.cycle_points`, ``daydream calibrate``'s
    probe: about 6 s) measured on this machine now at ``threads`` intra-op threads, once per
    process until :func:`forget_cycle_now`; ``()`` without torch.

    The curve's knee moves with what else fills the host's shared cache: on this project's VM
    one calibration read x1.10 at 16.8 MB and another, 48 minutes later, x1.16 (the 8.4 MB
    point x1.03-1.17 over eight calibrations); a model whose state sits near the knee (the
    validation MLP's 9.5 MB) takes its factor from the minute the curve was measured
    (docs/validation-log.md, "Session 78").
    """
    if threads not in _CYCLE_NOW:
        try:
            import torch
        except ImportError:
            return ()
        from daydream.calibrate_cycle import cycle_points
        from daydream.heapmode import steady_heap

        if threads:
            torch.set_num_threads(threads)
        with steady_heap():      # the probe's steps time without page faults, as the jobs they stand for
            _CYCLE_NOW[threads] = cycle_points(torch)
    return _CYCLE_NOW[threads]


def forget_cycle_now() -> None:
    """Forget the curves :func:`cycle_now` measured: the next one is measured again."""
    _CYCLE_NOW.clear()
