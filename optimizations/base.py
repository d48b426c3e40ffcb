"""What an optimization is: named parameters and an ``apply`` over a graph.

Every optimization edits a copy of the dependency graph with the primitives
of :mod:`daydream.primitives` and durations from :mod:`daydream.cost`; it
never reads the simulator or the files.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from daydream.errors import DaydreamError

__all__ = ["Param", "Optimization", "WhatIfContext", "NotApplicable", "OptionError"]


class NotApplicable(DaydreamError):
    """The optimization does not apply to this trace; says what the trace lacks."""


class OptionError(DaydreamError):
    """Unknown optimization or parameter, or a bad value."""


@dataclass(frozen=True)
class Param:
    """One parameter of an optimization."""

    name: str
    default: Any
    help: str
    type: type = float
    choices: tuple = ()

    def parse(self, opt: str, text: str):
        try:
            if self.type is bool:
                v = text.lower() in ("1", "true", "yes", "on")
            else:
                v = self.type(text)
        except ValueError:
            raise OptionError(f"{opt}: {self.name}={text!r} is not a {self.type.__name__}") from None
        if self.choices and v not in self.choices:
            raise OptionError(f"{opt}: {self.name} must be one of {', '.join(map(str, self.choices))}")
        return v


@dataclass
class WhatIfContext:
    """What an optimization may use: the graph to edit, the trace's metadata, a device profile.

    Attributes
    ----------
    graph : DependencyGraph
        Edited in place.
    trace : Trace
        The loaded trace (metadata: module table, optimizer, dtype, world size).
    device : DeviceProfile
        Cost-model figures of the device the trace ran on.
    notes : list of str
        Assumptions and approximations the optimization reports to the user.
    workers : int or None
        Data-parallel workers assumed by an earlier what-if (``data-parallel``
        sets it), for later ones that cost communication.
    metrics : dict
        Figures an optimization predicts besides the iteration time, by name
        with units in the name (``"bubble_fraction"``, ``"stage0_memory_bytes"``,
        ``"throughput_samples_per_s"``); printed by ``whatif`` and in its JSON.
    """

    graph: Any
    trace: Any
    device: Any
    notes: list = field(default_factory=list)
    workers: Any = None
    metrics: dict = field(default_factory=dict)

    def meta(self, rank: int | None = None) -> dict:
        """The ``"daydream"`` metadata object of a rank (empty if the trace has none)."""
        ranks = self.trace.ranks
        r = ranks[0] if rank is None else next((x for x in ranks if x.rank == rank), ranks[0])
        return r.meta.get("daydream") or {}

    def note(self, text: str) -> None:
        self.notes.append(text)


class Optimization:
    """Base class.  Subclasses set ``name``, ``summary``, ``params``, ``assumptions``
    and implement :meth:`apply`."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    params: ClassVar[tuple] = ()
    assumptions: ClassVar[str] = ""

    def __init__(self, **kwargs):
        known = {p.name: p for p in self.params}
        for k in kwargs:
            if k not in known:
                valid = ", ".join(known) or "none"
                raise OptionError(f"{self.name}: unknown parameter {k!r} (valid: {valid})")
        self.args = {p.name: kwargs.get(p.name, p.default) for p in self.params}

    @classmethod
    def from_spec(cls, text: str) -> "Optimization":
        """``"k=v,k2=v2"`` (the part after ``NAME:``) to an instance."""
        known = {p.name: p for p in cls.params}
        kwargs = {}
        for item in filter(None, (text or "").split(",")):
            if "=" not in item:
                raise OptionError(f"{cls.name}: expected key=value, got {item!r}")
            k, v = item.split("=", 1)
            k = k.strip().replace("-", "_")
            if k not in known:
                valid = ", ".join(known) or "none"
                raise OptionError(f"{cls.name}: unknown parameter {k!r} (valid: {valid})")
            kwargs[k] = known[k].parse(cls.name, v.strip())
        return cls(**kwargs)

    def __getattr__(self, item):
        args = self.__dict__.get("args", {})
        if item in args:
            return args[item]
        raise AttributeError(item)

    def describe(self) -> str:
        args = ",".join(f"{k}={v}" for k, v in self.args.items())
        return f"{self.name}:{args}" if args else self.name

    def apply(self, ctx: WhatIfContext) -> None:  # pragma: no cover - abstract
        raise NotImplementedError
