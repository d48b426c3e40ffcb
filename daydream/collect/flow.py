"""Which tensor each op read and wrote: the shape iteration's execution trace, kept per recorded op.

A re-run of the traced ops (:mod:`daydream.opseq`) hands each op operands,
and in a chained re-run the outputs of the ops before it: on two threads part
of what an op reads was written by the other core.  Kineto's
``record_shapes`` says each input's shape, not which tensor it is, so the
re-run had to guess from layouts (:func:`daydream.opseq.chain_calls`), and
guessed wrong for a backward op's saved activations and for weights.  torch's
execution trace (:class:`torch.profiler.ExecutionTraceObserver`) names each
input's and output's storage and offset.  The tracer records one beside the
shape session (:mod:`.shapes`); :func:`attach_flow` gives each shape-session
op its inputs' and outputs' storages (joined on Kineto's ``Record function
id``), :func:`.shapes.copy_shapes` copies them to the recorded ops with the
shapes, and :func:`take_flow` moves them into the trace metadata's ``flow``
object, keyed by each recorded op's ``External id``
(:func:`daydream.opseq.flow_calls` re-runs along it).

A storage reference is ``[storage id, offset in elements]``; ``None`` where
the input or output is not a single tensor (a scalar, a tensor list, none).
The observer keys storage ids by the data's address: a block freed and
allocated again at the same address keeps its id, so the ids also say which
outputs shared memory in training (:func:`daydream.opseq.flow_calls`'s
``recycle``).
"""
from __future__ import annotations

import contextlib
import json
import os

__all__ = ["FLOW_ARGS", "FLOW_INPUTS", "FLOW_OUTPUTS", "FlowRecorder", "attach_flow", "take_flow", "storage_refs",
           "read_execution_trace", "quiet_stderr"]

#: The shape-session op arguments :func:`attach_flow` adds (and :func:`take_flow` removes).
FLOW_INPUTS, FLOW_OUTPUTS = "Input Storages", "Output Storages"
FLOW_ARGS = (FLOW_INPUTS, FLOW_OUTPUTS)

#: An execution trace tensor: ``[tensor id, storage id, offset, numel, itemsize, device]``.
_TENSOR_FIELDS = 6


def storage_refs(values) -> list:
    """``[storage id, offset]`` per execution-trace value that is one tensor, else ``None``.

    >>> storage_refs([[7, 8, 0, 8192, 4, "cpu"], 0, [[1, 2, 0, 4, 4, "cpu"]], "<None>"])
    [[8, 0], None, None, None]
    """
    return [[int(v[1]), int(v[2])] if _is_tensor(v) else None for v in values or ()]


def _is_tensor(v) -> bool:
    return (isinstance(v, list) and len(v) == _TENSOR_FIELDS and isinstance(v[1], int) and isinstance(v[2], int)
            and isinstance(v[5], str))


def read_execution_trace(path: str) -> dict:
    """``{record function id: (input refs, output refs)}`` of an execution trace file's ops."""
    with open(path, encoding="utf-8") as fh:
        doc = json.load(fh)
    out = {}
    for node in doc.get("nodes") or ():
        attrs = {a.get("name"): a.get("value") for a in node.get("attrs") or () if isinstance(a, dict)}
        rf = attrs.get("rf_id")
        if rf is None:
            continue
        out[int(rf)] = (storage_refs((node.get("inputs") or {}).get("values")),
                        storage_refs((node.get("outputs") or {}).get("values")))
    return out


def attach_flow(shape_events: list, flows: dict) -> int:
    """Give each CPU op of ``shape_events`` its storages from ``flows`` (:func:`read_execution_trace`),
    joined on ``Record function id``; returns how many ops got them.

    >>> ev = {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "args": {"Record function id": 5}}
    >>> attach_flow([ev], {5: ([[3, 0]], [[4, 0]])}), ev["args"]["Input Storages"]
    (1, [[3, 0]])
    """
    done = 0
    for e in shape_events:
        args = e.get("args") if e.get("cat") == "cpu_op" else None
        got = flows.get(args.get("Record function id")) if isinstance(args, dict) else None
        if got is not None:
            args[FLOW_INPUTS], args[FLOW_OUTPUTS] = got
            done += 1
    return done


def take_flow(events: list) -> dict:
    """``{External id (str): [input refs, output refs]}`` of the CPU ops of ``events`` that carry
    storages (:func:`attach_flow`, copied by :func:`.shapes.copy_shapes`), removed from their args.

    >>> ev = {"ph": "X", "cat": "cpu_op", "name": "aten::relu",
    ...       "args": {"External id": 9, "Input Storages": [[3, 0]], "Output Storages": [[4, 0]]}}
    >>> take_flow([ev]), ev["args"]
    ({'9': [[[3, 0]], [[4, 0]]]}, {'External id': 9})
    """
    out = {}
    for e in events:
        args = e.get("args") if e.get("cat") == "cpu_op" else None
        if not isinstance(args, dict) or FLOW_INPUTS not in args:
            continue
        refs = [args.pop(FLOW_INPUTS), args.pop(FLOW_OUTPUTS, [])]
        if "External id" in args:
            out[str(args["External id"])] = refs
    return out


class FlowRecorder:
    """An execution trace of the shape iteration, in a temporary file until :meth:`close`.

    :meth:`start` and :meth:`stop` bracket the shape session; :meth:`flows`
    reads what was recorded (``{}`` when nothing could be: an older torch, a
    full disk; ``problem`` then says why).
    """

    def __init__(self):
        self.path: str | None = None
        self.problem: str | None = None
        self._observer = None

    def start(self) -> None:
        import tempfile

        try:
            from torch.profiler import ExecutionTraceObserver

            fd, self.path = tempfile.mkstemp(prefix="daydream-flow-", suffix=".json")
            os.close(fd)
            with quiet_stderr():
                self._observer = ExecutionTraceObserver().register_callback(self.path)
                self._observer.start()
        except Exception as exc:  # noqa: BLE001 - no data flow, the trace is still good
            self.problem = f"{type(exc).__name__}: {exc}"
            self._observer = None

    def stop(self) -> None:
        obs, self._observer = self._observer, None
        if obs is None:
            return
        try:
            with quiet_stderr():
                obs.stop()
                obs.unregister_callback()
        except Exception as exc:  # noqa: BLE001
            self.problem = f"{type(exc).__name__}: {exc}"

    def flows(self) -> dict:
        """:func:`read_execution_trace` of the recorded file (``{}`` on failure)."""
        if self.path is None or self.problem:
            return {}
        try:
            return read_execution_trace(self.path)
        except (OSError, ValueError) as exc:
            self.problem = f"{type(exc).__name__}: {exc}"
            return {}

    def close(self) -> None:
        self.stop()
        if self.path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
            self.path = None


@contextlib.contextmanager
def quiet_stderr():
    """Process-level stderr silenced (the execution trace observer logs each start and stop there;
    anything another thread writes to stderr in that moment is lost with it)."""
    saved = None
    try:
        saved = os.dup(2)
        with open(os.devnull, "w", encoding="utf-8") as null:
            os.dup2(null.fileno(), 2)
    except OSError:
        saved = None
    try:
        yield
    finally:
        if saved is not None:
            os.dup2(saved, 2)
            os.close(saved)
