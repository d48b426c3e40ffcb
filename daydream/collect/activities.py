"""Which activities a trace records, and the seam for the CUPTI extension.

CPU ops always come from ``torch.profiler`` (Kineto).  GPU kernels, memcpys
and runtime calls come from the project's own CUPTI extension when it is
built and importable, else from ``torch.profiler``'s CUDA activity; the
trace metadata records which (``activities.cuda_source``).

The extension plugs in through :class:`KernelCollector`: ``daydream.cupti``
exposes ``make_collector()`` returning an object with ``start()``, ``stop()``
and ``chrome_events()``, and optionally ``mark()``; the tracer starts it when
Kineto prepares (an iteration before the recorded ones, which pays for CUPTI's
costlier first records), marks the start of the recorded window, stops it at
the end of the recorded iterations, and appends its Chrome-trace events
(placed on the clock and threads of Kineto's document, which it is given)
(kernels carrying ``args["External id"]`` that matches the CPU ops'
external correlation ids) to ``traceEvents`` before the atomic write.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

__all__ = ["CudaSource", "ActivityPlan", "KernelCollector", "plan_activities", "parse_activities"]

_KNOWN = ("cpu", "cuda")


class CudaSource(enum.Enum):
    """Where GPU-side events come from."""

    NONE = "none"
    TORCH_PROFILER = "torch.profiler"
    CUPTI_EXTENSION = "daydream.cupti"


class KernelCollector(Protocol):
    """What the CUPTI extension provides to the tracer."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def chrome_events(self, doc: dict) -> list[dict]: ...

    # optional: ``mark()``, the recorded window begins (the tracer starts the
    # collector an iteration earlier; what it recorded before is left out)


@dataclass(frozen=True)
class ActivityPlan:
    """The activities one trace records.

    Attributes
    ----------
    requested : tuple of str
        What the user asked for (``cpu``, ``cuda``).
    torch_activities : tuple
        ``torch.profiler.ProfilerActivity`` members passed to Kineto.
    cuda_source : CudaSource
        Where kernels come from.
    notes : tuple of str
        Human-readable reasons (e.g. "no CUDA device").
    """

    requested: tuple[str, ...]
    torch_activities: tuple
    cuda_source: CudaSource
    notes: tuple[str, ...] = ()

    def as_metadata(self) -> dict:
        """The ``activities`` entry of the trace metadata."""
        names = [str(a).rsplit(".", 1)[-1].lower() for a in self.torch_activities]
        return {
            "requested": list(self.requested),
            "recorded": names,
            "cuda_source": self.cuda_source.value,
            "notes": list(self.notes),
        }


def parse_activities(text: str | tuple | list) -> tuple[str, ...]:
    """``"cpu,cuda"`` → ``("cpu", "cuda")``; raises ``ValueError`` on unknown names."""
    items = text.split(",") if isinstance(text, str) else list(text)
    names = tuple(dict.fromkeys(s.strip().lower() for s in items if s.strip()))
    bad = [n for n in names if n not in _KNOWN]
    if bad or not names:
        raise ValueError(f"unknown activities {bad or items!r}; choose from {', '.join(_KNOWN)}")
    return names


def _cupti_collector() -> tuple[KernelCollector | None, str]:
    """The extension's collector, or None and the reason it cannot be used."""
    try:
        from .. import cupti  # type: ignore[attr-defined]
    except Exception as exc:  # noqa: BLE001
        return None, f"daydream.cupti cannot be imported ({exc})"
    make = getattr(cupti, "make_collector", None)
    if make is None:
        return None, "daydream.cupti has no make_collector()"
    try:
        return make(), ""
    except Exception as exc:  # noqa: BLE001 - unavailable: fall back to torch.profiler
        return None, str(exc)


def plan_activities(requested: tuple[str, ...], use_cupti: bool = False) -> tuple[ActivityPlan, KernelCollector | None]:
    """Decide the activities for this process.

    Parameters
    ----------
    requested : tuple of str
        From :func:`parse_activities`.
    use_cupti : bool
        Try the CUPTI extension for kernels (what ``daydream.trace`` does by
        default); where it cannot run, or without it, torch.profiler's CUDA
        activity, with a note saying why.
    """
    import torch

    acts = []
    notes = []
    collector = None
    source = CudaSource.NONE
    if "cpu" in requested:
        acts.append(torch.profiler.ProfilerActivity.CPU)
    if "cuda" in requested:
        if not torch.cuda.is_available():
            notes.append("cuda requested but no CUDA device is available: CPU activity only")
        else:
            collector, why = _cupti_collector() if use_cupti else (None, "not requested")
            if collector is not None:
                source = CudaSource.CUPTI_EXTENSION
            else:
                acts.append(torch.profiler.ProfilerActivity.CUDA)
                source = CudaSource.TORCH_PROFILER
                notes.append(f"kernels from torch.profiler's CUDA activity (daydream.cupti: {why})")
    if not acts:
        acts.append(torch.profiler.ProfilerActivity.CPU)
    return ActivityPlan(tuple(requested), tuple(acts), source, tuple(notes)), collector
