"""Trace loading: files to :class:`~daydream.model.Trace`.

>>> from daydream.loader import load_trace   # doctest: +SKIP
>>> trace = load_trace(["rank0.json.gz", "rank1.json.gz"])  # doctest: +SKIP
"""
from __future__ import annotations

import os
import re
from concurrent.futures import ProcessPoolExecutor

from ..model import StringTable, Trace, RankTrace
from ..errors import TraceError
from ..progress import Progress
from .io import decode_document, read_documents, expand_paths, is_archive
from .memory import check_memory, json_bytes, max_workers_for
from .kineto import parse_events
from .iterations import find_iterations
from .layers import assign_layers_and_phases
from .pauses import PAUSES_KEY, cut_pauses, cut_peer_pauses

__all__ = ["load_trace", "load_rank", "assemble_rank", "read_documents", "expand_paths", "PARALLEL_MIN_BYTES"]

#: Below this much JSON in all, files load in this process (workers cost ~0.1 s to start).
PARALLEL_MIN_BYTES = 32 * 2**20

_RANK_RE = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)


#: Ranks at or above this (or negative) are not believed: the next source of the rank is used.
MAX_RANK = 2**20


def _valid_rank(r) -> bool:
    return isinstance(r, int) and not isinstance(r, bool) and 0 <= r < MAX_RANK


def _rank_of(source: str, doc: dict, index: int, repairs=None) -> int:
    info = doc.get("distributedInfo")
    if isinstance(info, dict) and "rank" in info:
        if _valid_rank(info["rank"]):
            return info["rank"]
        if repairs is not None:
            repairs["invalid distributedInfo.rank (ignored)"] += 1
    m = _RANK_RE.findall(source.rsplit("/", 1)[-1])
    return int(m[-1]) if m and int(m[-1]) < MAX_RANK else index


def _dropped_records(meta: dict) -> int:
    """Records the tracer's CUPTI buffers dropped (``daydream.activities.dropped_records``)."""
    acts = meta.get("daydream", {}).get("activities") if isinstance(meta.get("daydream"), dict) else None
    n = acts.get("dropped_records") if isinstance(acts, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 0


def load_rank(source: str, doc: dict, index: int = 0, iteration_marker: str | None = None) -> RankTrace:
    """Turn one parsed trace document into a :class:`RankTrace`."""
    p = parse_events(source, doc)
    meta = {k: v for k, v in doc.items() if k != "traceEvents"}
    return assemble_rank(source, meta, p, p.columns(), _flows(p), index, iteration_marker)


def assemble_rank(source, meta, p, cols, fwdbwd, index=0, iteration_marker=None,
                  assign=assign_layers_and_phases) -> RankTrace:
    """Iterations, layers and phases of parsed event columns; the :class:`RankTrace`.

    ``meta`` is the document without ``traceEvents``; ``p`` the parser's
    tables (names, lanes, repairs, signatures); shared by :func:`load_rank` and
    the fast path (:mod:`daydream.loader.fast`, which passes its compiled
    ``assign``).
    """
    paused = cut_pauses(cols, p.names, fwdbwd)  # waits for the turn, heap top-ups: not training
    its = find_iterations(source, cols, p.names, p.lanes, iteration_marker)
    layers = StringTable()
    assign(cols, p.names, p.lanes, layers, its.boundaries_ns)
    rank = _rank_of(source, meta, index, p.repairs)
    dropped = _dropped_records(meta)
    if dropped:
        p.repairs["GPU activity records dropped while tracing (CUPTI buffers full; missing)"] += dropped
    lanes = [type(l)(rank, l.kind, l.pid, l.tid, l.label, l.device) for l in p.lanes]
    meta = dict(meta)
    meta["iteration_source"] = its.source
    if len(paused):
        meta[PAUSES_KEY] = paused.tolist()
    return RankTrace(source=source, rank=rank, cols=cols, names=p.names, layers=layers,
                     lanes=lanes, boundaries_ns=its.boundaries_ns,
                     iteration_names=list(its.names), main_lane=its.lane,
                     repairs=dict(p.repairs), meta=meta, fwdbwd=fwdbwd, signatures=p.sigs)


def _rank_from(src: str, data: bytes, index: int, marker) -> RankTrace:
    """One trace's file contents to a rank: the compiled fast path where built, else the reference."""
    from . import fast

    if fast.enabled():
        return fast.load_rank_bytes(src, data, index, marker)
    return load_rank(src, decode_document(src, data), index, marker)


def _flows(p):
    import numpy as np
    pairs = []
    for pts in p.fwdbwd.values():
        s = [x for x in pts if x[0] == "s"]
        f = [x for x in pts if x[0] == "f"]
        if s and f:
            pairs.append((s[0][1], s[0][2], f[0][1], f[0][2]))
    return np.asarray(pairs, np.int64).reshape(-1, 4)


def _load_file(job):
    """Worker: load every rank of one file (top level so it pickles)."""
    path, index, marker = job
    return [_rank_from(src, data, index + k, marker)
            for k, (src, data) in enumerate(read_documents([path], raw=True))]


def _workers(files, workers):
    if workers is None:
        big = sum(json_bytes(p) for p in files) >= PARALLEL_MIN_BYTES
        workers = min(os.cpu_count() or 1, len(files)) if big else 1
    if any(is_archive(p) for p in files):
        workers = 1   # archive members are numbered in reading order
    return max_workers_for(files, min(max(1, workers), len(files)))


def _load_files(files, marker, workers, progress, on_rank):
    jobs = [(p, i, marker) for i, p in enumerate(files)]
    ranks = []

    def got(r):
        ranks.append(r)
        if on_rank is not None:
            on_rank(r)

    if workers <= 1:
        for path in files:
            for src, data in read_documents([path], raw=True):
                got(_rank_from(src, data, len(ranks), marker))
                progress.step(note=os.path.basename(src))
        return ranks
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for loaded, path in zip(pool.map(_load_file, jobs), files):   # results in order, as they come
            for r in loaded:
                got(r)
            progress.step(note=os.path.basename(path))
    return ranks


def load_trace(paths, iteration_marker: str | None = None, workers: int | None = None,
               on_rank=None) -> Trace:
    """Load Kineto/Chrome traces, one file per rank.

    Parameters
    ----------
    paths : str, os.PathLike or list of them
        ``.json`` / ``.json.gz`` files, directories of them, or ``.tar.gz``
        archives of ranks.
    iteration_marker : str, optional
        Regex naming an annotation that spans each iteration, used where the
        trace has no ``ProfilerStep#N`` ranges.
    workers : int, optional
        Processes parsing files in parallel.  Default: one per CPU core when
        there are several files and at least :data:`PARALLEL_MIN_BYTES` of
        JSON, else 1.  Capped so that the files parsed at once fit in memory
        (peak memory stays bounded as ranks grow: only columnar results are
        kept).
    on_rank : callable, optional
        Called with each :class:`~daydream.model.RankTrace` as soon as it is
        loaded, in file order, while workers go on parsing the next files
        (e.g. :meth:`daydream.graph.GraphBuilder.add_rank`).

    Raises
    ------
    TraceError
        Naming the file and the problem; also when a file is too large for
        the memory available (with the size needed), before anything loads.
    """
    if isinstance(paths, (str, bytes)) or hasattr(paths, "__fspath__"):
        paths = [paths]
    files = expand_paths(paths)
    check_memory(files, 1)
    n_workers = _workers(files, workers)
    check_memory(files, n_workers)
    progress = Progress(f"loading {len(files)} trace file(s)" + (f" on {n_workers} processes" if n_workers > 1 else ""),
                        total=len(files) if not any(is_archive(p) for p in files) else None, unit="files")
    ranks = _load_files(files, iteration_marker, n_workers, progress, on_rank)
    progress.finish()
    if not ranks:
        raise TraceError(", ".join(map(str, paths)), "no traces found")
    seen = {}
    for r in ranks:
        if r.rank in seen:
            raise TraceError(r.source, f"rank {r.rank} given twice (also {seen[r.rank]})")
        seen[r.rank] = r.source
    ranks.sort(key=lambda r: r.rank)
    cut_peer_pauses(ranks)      # a rank's pause stalled the others (graphs built meanwhile: see trace_and_graph)
    return Trace(ranks)
