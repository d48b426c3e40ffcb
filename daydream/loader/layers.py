"""Layer and phase mapping.

Each CPU event gets the innermost module path among its enclosing ranges
(``daydream.fwd:``/``daydream.bwd:`` ranges written by ``daydream trace``, or
``nn.Module: X`` python_function frames), else the enclosing optimizer-step or
DataLoader range (``Optimizer.step#Adam.step``), else its top-level op.  Backward ops
without a module take the layer of the forward op with the same autograd
sequence number.  Phases come from enclosing annotations (optimizer step,
DataLoader, autograd engine), the thread (an autograd thread is backward) and
position in the iteration (before the first backward op: forward).  GPU
events inherit layer, phase and iteration from their launch by correlation id.
"""
from __future__ import annotations

import re

import numpy as np

from ..model import EventKind, LaneKind, Phase

__all__ = ["assign_layers_and_phases", "FWD_PREFIX", "BWD_PREFIX", "phase_hint"]

FWD_PREFIX = "daydream.fwd:"
BWD_PREFIX = "daydream.bwd:"
_MODULE_PREFIX = "nn.Module: "
_BACKWARD_PREFIXES = ("autograd::engine::evaluate_function", BWD_PREFIX)
# autograd node names (2021 traces have no evaluate_function wrapper)
_BACKWARD_NODE_RE = re.compile(r"(Backward\d*|AccumulateGrad)$")
_NO_PHASE = -1


def phase_hint(name: str) -> int:
    """Phase implied by an enclosing range's name, or -1.

    >>> phase_hint("Optimizer.step#SGD.step") == Phase.OPTIMIZER
    True
    >>> phase_hint("aten::mm")
    -1
    """
    if name.startswith(("Optimizer.step#", "Optimizer.zero_grad#")):
        return Phase.OPTIMIZER
    if name.startswith("enumerate(DataLoader)") or (".__next__" in name and "DataLoader" in name):
        return Phase.DATALOADER
    if name.startswith(_BACKWARD_PREFIXES) or _BACKWARD_NODE_RE.search(name):
        return Phase.BACKWARD
    if name.startswith(FWD_PREFIX):
        return Phase.FORWARD
    return _NO_PHASE


def _module_of(name: str, parent_path: str | None) -> str | None:
    if name.startswith((FWD_PREFIX, BWD_PREFIX)):
        return name.split(":", 1)[1]
    if name.startswith(_MODULE_PREFIX):
        leaf = name[len(_MODULE_PREFIX):]
        return f"{parent_path}.{leaf}" if parent_path else leaf
    return None


def _walk_lane(idx, cols, names, layers, hints, module_paths, backward_names, top_col):
    """Stack walk over one CPU lane's events (sorted by start, longest first).

    Fills layer, phase and ``top_col`` (row of the outermost CPU op, -1 if
    none); returns whether the lane looks like an autograd (backward) thread.
    """
    idx = np.asarray(idx, np.int64)
    strings, annotation = names.strings, int(EventKind.ANNOTATION)
    rows = zip(idx.tolist(), cols["start_ns"][idx].tolist(), cols["dur_ns"][idx].tolist(),
               cols["kind"][idx].tolist(), cols["name"][idx].tolist())
    out_layer, out_phase, out_top, with_path = [], [], [], []   # written to the columns at the end
    stack: list[tuple[int, str | None, int, int, int]] = []  # (end, path, phase, top layer, top row)
    n_backward_top = n_top = 0
    for i, s, d, k, n_id in rows:
        while stack and stack[-1][0] <= s:
            stack.pop()
        name = strings[n_id]
        path, ph, top, top_i = stack[-1][1:] if stack else (None, _NO_PHASE, -1, -1)
        h = hints[n_id]
        if h != _NO_PHASE:
            ph = h
        mod = _module_of(name, path) if k == annotation else None
        if mod is None and path is None and h in (Phase.OPTIMIZER, Phase.DATALOADER):
            mod = name              # e.g. "Optimizer.step#Adam.step" is the layer of what it encloses
        if mod is not None:
            path = mod
        if top < 0 and k != annotation:
            top, top_i = layers.intern(name), i
            n_top += 1
            n_backward_top += name in backward_names
        out_layer.append(layers.intern(path) if path is not None else top)
        if path is not None:
            with_path.append(i)
        out_phase.append(ph)
        out_top.append(top_i)
        stack.append((s + d, path, ph, top, top_i))
    cols["layer"][idx] = out_layer
    cols["phase"][idx] = out_phase
    top_col[idx] = out_top
    module_paths[with_path] = True
    return n_top > 0 and 2 * n_backward_top >= n_top


def assign_layers_and_phases(cols, names, lanes, layers, boundaries_ns) -> None:
    """Fill the ``layer``, ``phase`` and ``iteration`` columns in place."""
    n = len(cols["kind"])
    hints = [phase_hint(s) for s in names.strings]
    backward_names = {s for s, h in zip(names.strings, hints) if h == Phase.BACKWARD}
    module_paths = np.zeros(n, bool)
    lane_col = cols["lane"]
    cpu = np.array([lanes[l].kind == LaneKind.CPU_THREAD for l in lane_col], bool) if n else np.zeros(0, bool)
    backward_lanes = set()
    top_col = np.full(n, -1, np.int64)
    for lane_id, lane in enumerate(lanes):
        if lane.kind != LaneKind.CPU_THREAD:
            continue
        idx = np.flatnonzero(lane_col == lane_id)
        if _walk_lane(idx, cols, names, layers, hints, module_paths, backward_names, top_col):
            backward_lanes.add(lane_id)
    _iterations_cpu(cols, cpu, boundaries_ns)
    _backward_by_sequence(cols, module_paths, top_col)
    _default_phases(cols, cpu, backward_lanes)
    _inherit_from_launch(cols, cpu)


def _iterations_cpu(cols, cpu, boundaries_ns) -> None:
    it = np.searchsorted(boundaries_ns, cols["start_ns"], side="right") - 1
    it[(it < 0) | (it >= len(boundaries_ns) - 1)] = -1
    cols["iteration"][cpu] = it[cpu]


def _backward_by_sequence(cols, module_paths, top_col) -> None:
    """Backward ops take the layer of the forward op with the same sequence number.

    The sequence number is read from each event's outermost op (e.g.
    ``autograd::engine::evaluate_function: AddmmBackward0``), so everything
    nested in a backward node moves with it.
    """
    seq, phase, layer = cols["seq"], cols["phase"], cols["layer"]
    fwd = (seq >= 0) & (phase != Phase.BACKWARD)
    in_module = fwd & module_paths
    if in_module.any():
        fwd = in_module
    by_seq = dict(zip(seq[fwd].tolist(), layer[fwd].tolist()))
    if not by_seq:
        return
    bwd = np.flatnonzero((phase == Phase.BACKWARD) & ~module_paths & (top_col >= 0))
    top_seq = seq[top_col[bwd]]
    mapped = module_paths.copy()
    for i, s in zip(bwd.tolist(), top_seq.tolist()):
        lay = by_seq.get(s)
        if lay is not None:
            layer[i] = lay
            mapped[i] = True
    if in_module.any():
        _backward_between_modules(cols, mapped, top_col)


def _backward_between_modules(cols, mapped, top_col) -> None:
    """Backward ops that no module's forward explains take the module whose backward ran last.

    Gradient accumulation into parameters (``AccumulateGrad``) has no forward
    op; it runs right after the module's backward that produced the gradient.
    So, on each thread and within each iteration, a backward op left without
    a module takes the layer of the latest backward op with one (ops before
    the first, such as the loss's backward, keep their own).
    """
    phase, layer, lane, it = cols["phase"], cols["layer"], cols["lane"], cols["iteration"]
    rows = np.flatnonzero((phase == Phase.BACKWARD) & (top_col >= 0) & (it >= 0))
    if not len(rows):
        return
    rows = rows[np.lexsort((cols["start_ns"][rows], it[rows], lane[rows]))]
    pos = np.arange(len(rows))
    has = mapped[rows]
    last = np.maximum.accumulate(np.where(has, pos, -1))
    ln, itr = lane[rows], it[rows]
    new_group = np.ones(len(rows), bool)
    new_group[1:] = (ln[1:] != ln[:-1]) | (itr[1:] != itr[:-1])
    group_start = np.maximum.accumulate(np.where(new_group, pos, 0))
    take = ~has & (last >= group_start)
    layer[rows[take]] = layer[rows[last[take]]]


def _default_phases(cols, cpu, backward_lanes) -> None:
    phase, it, lane = cols["phase"], cols["iteration"], cols["lane"]
    on_bwd_lane = np.isin(lane, list(backward_lanes)) & cpu
    phase[(phase == _NO_PHASE) & on_bwd_lane] = Phase.BACKWARD
    # first backward event of each iteration splits forward from "other"
    first_bwd = {}
    for i in np.flatnonzero((phase == Phase.BACKWARD) & cpu & (it >= 0)):
        first_bwd.setdefault(int(it[i]), int(cols["start_ns"][i]))
    todo = np.flatnonzero((phase == _NO_PHASE) & cpu)
    start = cols["start_ns"]
    for i in todo:
        k = int(it[i])
        if k < 0:
            phase[i] = Phase.OTHER
        else:
            fb = first_bwd.get(k)
            phase[i] = Phase.FORWARD if fb is None or start[i] < fb else Phase.OTHER


def _inherit_from_launch(cols, cpu) -> None:
    corr, kind = cols["corr"], cols["kind"]
    launch = cpu & np.isin(kind, (EventKind.RUNTIME, EventKind.SYNC)) & (corr >= 0)
    src = dict(zip(corr[launch].tolist(), np.flatnonzero(launch).tolist()))
    for i in np.flatnonzero(~cpu):
        j = src.get(int(corr[i]))
        if j is not None:
            cols["layer"][i] = cols["layer"][j]
            cols["phase"][i] = cols["phase"][j]
            cols["iteration"][i] = cols["iteration"][j]
        else:
            cols["phase"][i] = Phase.OTHER
