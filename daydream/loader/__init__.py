"""Trace loading: files to :class:`~daydream.model.Trace`.

>>> from daydream.loader import load_trace   # doctest: +SKIP
>>> trace = load_trace(["rank0.json.gz", "rank1.json.gz"])  # doctest: +SKIP
"""
from __future__ import annotations

import re

from ..model import StringTable, Trace, RankTrace
from ..errors import TraceError
from .io import read_documents, expand_paths
from .kineto import parse_events
from .iterations import find_iterations
from .layers import assign_layers_and_phases

__all__ = ["load_trace", "load_rank", "read_documents", "expand_paths"]

_RANK_RE = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)


def _rank_of(source: str, doc: dict, index: int) -> int:
    info = doc.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return info["rank"]
    m = _RANK_RE.findall(source.rsplit("/", 1)[-1])
    return int(m[-1]) if m else index


def load_rank(source: str, doc: dict, index: int = 0, iteration_marker: str | None = None) -> RankTrace:
    """Turn one parsed trace document into a :class:`RankTrace`."""
    p = parse_events(source, doc)
    cols = p.columns()
    its = find_iterations(source, cols, p.names, p.lanes, iteration_marker)
    layers = StringTable()
    assign_layers_and_phases(cols, p.names, p.lanes, layers, its.boundaries_ns)
    rank = _rank_of(source, doc, index)
    lanes = [type(l)(rank, l.kind, l.pid, l.tid, l.label, l.device) for l in p.lanes]
    meta = {k: v for k, v in doc.items() if k != "traceEvents"}
    meta["iteration_source"] = its.source
    return RankTrace(source=source, rank=rank, cols=cols, names=p.names, layers=layers,
                     lanes=lanes, boundaries_ns=its.boundaries_ns,
                     iteration_names=list(its.names), main_lane=its.lane,
                     repairs=dict(p.repairs), meta=meta, fwdbwd=_flows(p))


def _flows(p):
    import numpy as np
    pairs = []
    for pts in p.fwdbwd.values():
        s = [x for x in pts if x[0] == "s"]
        f = [x for x in pts if x[0] == "f"]
        if s and f:
            pairs.append((s[0][1], s[0][2], f[0][1], f[0][2]))
    return np.asarray(pairs, np.int64).reshape(-1, 4)


def load_trace(paths, iteration_marker: str | None = None) -> Trace:
    """Load Kineto/Chrome traces, one file per rank.

    Parameters
    ----------
    paths : str, os.PathLike or list of them
        ``.json`` / ``.json.gz`` files, directories of them, or ``.tar.gz``
        archives of ranks.
    iteration_marker : str, optional
        Regex naming an annotation that spans each iteration, used where the
        trace has no ``ProfilerStep#N`` ranges.

    Raises
    ------
    TraceError
        Naming the file and the problem.
    """
    if isinstance(paths, (str, bytes)) or hasattr(paths, "__fspath__"):
        paths = [paths]
    ranks = [load_rank(src, doc, i, iteration_marker)
             for i, (src, doc) in enumerate(read_documents(paths))]
    if not ranks:
        raise TraceError(", ".join(map(str, paths)), "no traces found")
    seen = {}
    for r in ranks:
        if r.rank in seen:
            raise TraceError(r.source, f"rank {r.rank} given twice (also {seen[r.rank]})")
        seen[r.rank] = r.source
    ranks.sort(key=lambda r: r.rank)
    return Trace(ranks)
