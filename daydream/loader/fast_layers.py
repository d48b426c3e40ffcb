"""Layer and phase mapping of the fast path: :mod:`daydream.loader.layers`, compiled and vectorised.

:func:`assign_layers_and_phases` fills the same columns as
:func:`daydream.loader.layers.assign_layers_and_phases`: the per-lane stack
walk runs in ``daydream._kineto.walk_lanes`` (fed with what the reference's
own :func:`~daydream.loader.layers.phase_hint` and ``_module_of`` say about
each distinct name), the per-event passes after it are numpy.  Equality with
the reference is tested in ``tests/test_fast_loader.py``.
"""
from __future__ import annotations

import numpy as np

from ..model import EventKind, LaneKind, Phase
from . import layers as ref

__all__ = ["assign_layers_and_phases"]

_NO_PHASE = -1


def _name_info(strings):
    """Per name: phase hint, module kind (0 none, 1 fixed path, 2 nested under the parent) and text."""
    hints = np.fromiter((ref.phase_hint(s) for s in strings), np.int8, len(strings))
    kinds = np.zeros(len(strings), np.int8)
    texts = []
    for i, s in enumerate(strings):
        alone = ref._module_of(s, None)
        if alone is not None:
            kinds[i] = 2 if ref._module_of(s, "p") == f"p.{alone}" else 1
        texts.append(alone or "")
    return hints, kinds, texts


def assign_layers_and_phases(cols, names, lanes, layers, boundaries_ns, walk) -> None:
    """Fill the ``layer``, ``phase`` and ``iteration`` columns in place (``layers`` must be empty).

    ``walk`` is the compiled ``walk_lanes``.
    """
    if len(layers):
        raise ValueError("the fast layer pass needs an empty layer table")
    hints, kinds, texts = _name_info(names.strings)
    lane_cpu = np.array([ln.kind == LaneKind.CPU_THREAD for ln in lanes], bool)
    layer, phase, top_col, module_paths, backward_lanes, layer_names = walk(
        cols["lane"], cols["start_ns"], cols["dur_ns"], cols["kind"], cols["name"], lane_cpu,
        names.strings, hints, kinds, texts, int(EventKind.ANNOTATION), int(Phase.BACKWARD),
        int(Phase.OPTIMIZER), int(Phase.DATALOADER))
    for s in layer_names:
        layers.intern(s)
    cpu = lane_cpu[cols["lane"]] if len(lanes) else np.zeros(len(layer), bool)
    cols["layer"][cpu] = layer[cpu]
    cols["phase"][cpu] = phase[cpu]
    ref._iterations_cpu(cols, cpu, boundaries_ns)
    ref._backward_by_sequence(cols, module_paths, top_col)
    _default_phases(cols, cpu, set(backward_lanes))
    _inherit_from_launch(cols, cpu)


def _default_phases(cols, cpu, backward_lanes) -> None:
    """``layers._default_phases`` without the per-event loop."""
    phase, it, lane, start = cols["phase"], cols["iteration"], cols["lane"], cols["start_ns"]
    on_bwd_lane = np.isin(lane, list(backward_lanes)) & cpu
    phase[(phase == _NO_PHASE) & on_bwd_lane] = Phase.BACKWARD
    bwd = np.flatnonzero((phase == Phase.BACKWARD) & cpu & (it >= 0))
    its, first = np.unique(it[bwd], return_index=True)       # first backward row of each iteration
    todo = np.flatnonzero((phase == _NO_PHASE) & cpu)
    k = it[todo]
    out = np.full(len(todo), Phase.OTHER, np.int8)
    inside = k >= 0
    pos = np.searchsorted(its, k[inside])
    found = pos < len(its)
    found[found] = its[pos[found]] == k[inside][found]
    fb = np.full(inside.sum(), np.iinfo(np.int64).max, np.int64)
    fb[found] = start[bwd[first[pos[found]]]]
    out[inside] = np.where(start[todo[inside]] < fb, Phase.FORWARD, Phase.OTHER)
    phase[todo] = out


def _inherit_from_launch(cols, cpu) -> None:
    """``layers._inherit_from_launch`` without the per-event loop (the last launch of a correlation id wins)."""
    corr, kind = cols["corr"], cols["kind"]
    launch = np.flatnonzero(cpu & np.isin(kind, (EventKind.RUNTIME, EventKind.SYNC)) & (corr >= 0))
    gpu = np.flatnonzero(~cpu)
    if not len(gpu):
        return
    keys = corr[launch]
    order = np.argsort(keys, kind="stable")
    keys, rows = keys[order], launch[order]
    last = np.r_[keys[1:] != keys[:-1], True] if len(keys) else np.zeros(0, bool)
    keys, rows = keys[last], rows[last]
    pos = np.searchsorted(keys, corr[gpu])
    ok = pos < len(keys)
    ok[ok] = keys[pos[ok]] == corr[gpu][ok]
    src, dst = rows[pos[ok]], gpu[ok]
    for c in ("layer", "phase", "iteration"):
        cols[c][dst] = cols[c][src]
    cols["phase"][gpu[~ok]] = Phase.OTHER
