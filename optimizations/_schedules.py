"""Pipeline schedules as per-rank action lists (shared by ``pipeline`` and ``tessel``).

An :class:`Action` is one compute step of one pipeline stage on one
micro-batch: ``F`` (forward) or ``B`` (full backward).  A schedule is a list
per rank (pipeline device) of actions in execution order; a rank may hold
several stages (interleaved/virtual stages: stage ``k`` on rank ``k % ranks``).
The text form of an action is torch's (``torch.distributed.pipelining``
``_Action``): ``"1F0"`` is stage 1, forward, micro-batch 0, so
:func:`to_csv` writes a file that ``_PipelineScheduleRuntime._load_csv``
executes.

Examples
--------
>>> [" ".join(map(str, r)) for r in one_f_one_b(2, 3)]
['0F0 0F1 0B0 0F2 0B1 0B2', '1F0 1B0 1F1 1B1 1F2 1B2']
>>> [" ".join(map(str, r)) for r in gpipe(2, 2)]
['0F0 0F1 0B0 0B1', '1F0 1F1 1B0 1B1']
"""
from __future__ import annotations

import enum
import re
from collections import Counter
from dataclasses import dataclass

from .base import OptionError

__all__ = ["Kind", "Action", "ScheduleError", "gpipe", "one_f_one_b", "interleaved", "two_bw", "make_schedule",
           "SCHEDULES", "validate", "in_flight", "to_csv", "from_csv", "stage_rank", "blocked", "unroll",
           "receives_before"]


class ScheduleError(OptionError):
    """A schedule or a pipeline configuration that cannot run, with the reason."""


class Kind(str, enum.Enum):
    """What an action computes."""

    F = "F"
    B = "B"


_ACTION_RE = re.compile(r"^(\d+)([FB])(\d+)$")


@dataclass(frozen=True, order=True)
class Action:
    """One compute step: ``stage`` runs ``kind`` on ``microbatch``.

    >>> Action.parse("1B0")
    Action(stage=1, kind=<Kind.B: 'B'>, microbatch=0)
    >>> str(Action(0, Kind.F, 3))
    '0F3'
    """

    stage: int
    kind: Kind
    microbatch: int

    def __str__(self) -> str:
        return f"{self.stage}{self.kind.value}{self.microbatch}"

    @classmethod
    def parse(cls, text: str) -> "Action":
        m = _ACTION_RE.match(text.strip())
        if not m:
            raise ScheduleError(f"bad action {text!r} (expected STAGE F|B MICROBATCH, e.g. 1F0)")
        return cls(int(m.group(1)), Kind(m.group(2)), int(m.group(3)))


def _check(stages: int, microbatches: int) -> None:
    if stages < 1 or microbatches < 1:
        raise ScheduleError(f"stages ({stages}) and microbatches ({microbatches}) must be at least 1")


def gpipe(stages: int, microbatches: int) -> list:
    """GPipe: all forwards, then all backwards (in micro-batch order, as torch's ScheduleGPipe)."""
    _check(stages, microbatches)
    return [[Action(s, Kind.F, m) for m in range(microbatches)] + [Action(s, Kind.B, m) for m in range(microbatches)]
            for s in range(stages)]


def one_f_one_b(stages: int, microbatches: int) -> list:
    """1F1B (PipeDream-Flush): ``stages - s`` warm-up forwards, then backward/forward pairs.

    Same order as torch's ``Schedule1F1B``.  Needs ``microbatches >= stages``
    (torch refuses fewer).
    """
    _check(stages, microbatches)
    if microbatches < stages:
        raise ScheduleError(f"1f1b needs at least as many micro-batches as stages ({microbatches} < {stages})")
    out = []
    for s in range(stages):
        warm = min(stages - s, microbatches)
        seq = [Action(s, Kind.F, m) for m in range(warm)]
        f = warm
        for b in range(microbatches):
            seq.append(Action(s, Kind.B, b))
            if f < microbatches:
                seq.append(Action(s, Kind.F, f))
                f += 1
        out.append(seq)
    return out


def interleaved(ranks: int, microbatches: int, virtual: int) -> list:
    """Interleaved 1F1B (Megatron-LM): ``virtual`` stages per rank, stage ``k`` on rank ``k % ranks``.

    Micro-batches go through each rank's chunks in groups of ``ranks``; rank
    ``r`` warms up with ``2 (ranks - r - 1) + (virtual - 1) ranks`` forwards.
    Needs ``microbatches`` a multiple of ``ranks``.

    >>> [" ".join(map(str, r)) for r in interleaved(2, 2, 2)]
    ['0F0 0F1 2F0 2F1 2B0 2B1 0B0 0B1', '1F0 1F1 3F0 3B0 3F1 3B1 1B0 1B1']
    """
    _check(ranks, microbatches)
    if virtual < 1:
        raise ScheduleError("virtual stages per rank must be at least 1")
    if virtual == 1:
        return one_f_one_b(ranks, microbatches)
    if microbatches % ranks:
        raise ScheduleError(f"interleaved needs micro-batches ({microbatches}) to be a multiple of "
                            f"the pipeline ranks ({ranks})")
    total = microbatches * virtual

    def fwd(k):
        chunk = (k // ranks) % virtual
        return chunk, (k // (ranks * virtual)) * ranks + k % ranks

    out = []
    for r in range(ranks):
        warm = min(total, 2 * (ranks - r - 1) + (virtual - 1) * ranks)
        seq = []

        def F(k):
            c, m = fwd(k)
            seq.append(Action(c * ranks + r, Kind.F, m))

        def B(k):
            c, m = fwd(k)
            seq.append(Action((virtual - 1 - c) * ranks + r, Kind.B, m))

        for k in range(warm):
            F(k)
        for i in range(total - warm):
            F(warm + i)
            B(i)
        for i in range(total - warm, total):
            B(i)
        out.append(seq)
    return out


def two_bw(stages: int, microbatches: int, iterations: int) -> list:
    """PipeDream-2BW over ``iterations`` iterations: 1F1B without a flush.

    Micro-batch ids run across iterations (iteration ``i`` has ids
    ``i*M .. (i+1)*M - 1``); each stage updates its weights after its
    backward of an iteration's last micro-batch, while the next iteration's
    forwards use the previous weight version (two versions are kept).
    """
    if iterations < 1:
        raise ScheduleError("iterations must be at least 1")
    return one_f_one_b(stages, microbatches * iterations)


#: Schedule name -> whether it flushes the pipeline at each iteration's end.
SCHEDULES = {"gpipe": True, "1f1b": True, "interleaved": True, "2bw": False}


def make_schedule(name: str, ranks: int, microbatches: int, virtual: int = 1) -> list:
    """Per-rank actions of one iteration of a flushing schedule (``gpipe``, ``1f1b``, ``interleaved``)."""
    if name == "gpipe":
        return gpipe(ranks, microbatches)
    if name == "1f1b":
        return one_f_one_b(ranks, microbatches)
    if name == "interleaved":
        return interleaved(ranks, microbatches, virtual)
    raise ScheduleError(f"unknown schedule {name!r} (valid: {', '.join(SCHEDULES)})")


def stage_rank(actions) -> dict:
    """Stage -> the rank whose list holds it; ScheduleError if a stage is on two ranks."""
    where = {}
    for r, seq in enumerate(actions):
        for a in seq:
            if where.setdefault(a.stage, r) != r:
                raise ScheduleError(f"stage {a.stage} appears on ranks {where[a.stage]} and {r}")
    return where


def receives_before(actions) -> list:
    """Per rank, ``{action: [consumers]}``: the actions whose receives torch's
    ``_PipelineScheduleRuntime`` posts right before ``action`` when it runs a compute-only
    schedule (a CSV): its lowering (``torch.distributed.pipelining.schedules._add_send_recv``)
    walks the ranks in turn, one compute action each while that action's input is there or
    posted for, and puts a receive on the consumer's rank as soon as the producer is placed,
    so a receive is posted ahead of the consumer, behind whatever that rank had placed by then.
    ScheduleError where no rank can go on (a schedule that would hang).

    >>> rows = ("0F0,0F1,0B0,0F2,0B1,0F3,0B2,0B3", "1F0,1B0,1F1,1B1,1F2,1B2,1F3,1B3")   # 1F1B on 2 ranks
    >>> chain = [[Action.parse(x) for x in row.split(",")] for row in rows]
    >>> {str(a): [str(c) for c in cs] for a, cs in receives_before(chain)[1].items() if cs}
    {'1F0': ['1F0'], '1B0': ['1F1'], '1B1': ['1F2'], '1B2': ['1F3']}
    >>> {str(a): [str(c) for c in cs] for a, cs in receives_before(chain)[0].items() if cs}
    {'0B0': ['0B0'], '0B1': ['0B1'], '0B2': ['0B2'], '0B3': ['0B3']}
    """
    where = stage_rank(actions)
    n = max(where) + 1 if where else 0

    def consumer(a):
        nxt = a.stage + 1 if a.kind is Kind.F else a.stage - 1
        return Action(nxt, a.kind, a.microbatch) if 0 <= nxt < n and where[nxt] != where[a.stage] else None

    def ready(a, done) -> bool:
        prev = a.stage - 1 if a.kind is Kind.F else a.stage + 1
        return not 0 <= prev < n or ("recv", a) in done or Action(prev, a.kind, a.microbatch) in done

    todo = [list(seq) for seq in actions]
    done = [set() for _ in actions]
    pending = [[] for _ in actions]
    out = [{} for _ in actions]
    while any(todo):
        moved = False
        for r, seq in enumerate(todo):
            if not seq or not ready(seq[0], done[r]):
                continue
            a = seq.pop(0)
            out[r][a], pending[r] = pending[r], []
            done[r].add(a)
            c = consumer(a)
            if c is not None:
                pending[where[c.stage]].append(c)
                done[where[c.stage]].add(("recv", c))
            moved = True
        if not moved:
            raise ScheduleError("the schedule's sends and receives cannot be placed: its ranks would wait on "
                                "each other forever")
    return out


def validate(actions, stages: int, microbatches: int) -> None:
    """Check that every stage runs F then B of every micro-batch exactly once, on one rank.

    Raises
    ------
    ScheduleError
        Naming the first missing, repeated or out-of-order action.

    >>> validate([[Action(0, Kind.B, 0), Action(0, Kind.F, 0)]], 1, 1)
    Traceback (most recent call last):
    ...
    daydream.optimizations._schedules.ScheduleError: 0B0 runs before 0F0 on rank 0
    """
    where = stage_rank(actions)
    if sorted(where) != list(range(stages)):
        raise ScheduleError(f"stages {sorted(set(range(stages)) - set(where))} have no actions")
    seen = Counter(a for seq in actions for a in seq)
    for s in range(stages):
        for m in range(microbatches):
            for k in Kind:
                n = seen.get(Action(s, k, m), 0)
                if n != 1:
                    raise ScheduleError(f"{Action(s, k, m)} appears {n} times (expected once)")
    extra = [a for a in seen if a.microbatch >= microbatches or a.stage >= stages]
    if extra:
        raise ScheduleError(f"{extra[0]} is outside {stages} stages x {microbatches} micro-batches")
    for r, seq in enumerate(actions):
        done = set()
        for a in seq:
            if a.kind is Kind.B and Action(a.stage, Kind.F, a.microbatch) not in done:
                raise ScheduleError(f"{a} runs before {Action(a.stage, Kind.F, a.microbatch)} on rank {r}")
            done.add(a)


def in_flight(actions, stage: int) -> int:
    """Most micro-batches whose activations ``stage`` holds at once (forwards done, backwards not).

    >>> in_flight(gpipe(2, 4), 0), in_flight(one_f_one_b(2, 4), 0), in_flight(one_f_one_b(2, 4), 1)
    (4, 2, 1)
    """
    live = peak = 0
    for seq in actions:
        for a in seq:
            if a.stage == stage:
                live += 1 if a.kind is Kind.F else -1
                peak = max(peak, live)
    return peak


def to_csv(actions) -> str:
    """One line per rank, actions comma-separated: the compute-only CSV of torch's
    ``_PipelineScheduleRuntime._load_csv``.

    >>> print(to_csv(gpipe(2, 1)), end="")
    0F0,0B0
    1F0,1B0
    """
    return "".join(",".join(map(str, seq)) + "\n" for seq in actions)


def from_csv(text: str) -> list:
    """Inverse of :func:`to_csv`."""
    return [[Action.parse(x) for x in line.split(",") if x.strip()] for line in text.splitlines() if line.strip()]


def blocked(actions, stages: int) -> list:
    """Actions left waiting forever when the ranks run ``actions`` in order; [] if the schedule completes.

    ``F`` of stage ``s`` needs ``F`` of stage ``s-1`` (same micro-batch); ``B``
    of ``s`` needs ``B`` of ``s+1`` (and, on the last stage, its own ``F``).
    A non-empty answer is a cyclic wait: each rank's next action waits on an
    action queued behind another rank's.

    >>> blocked([[Action.parse("0B0"), Action.parse("0F0")], [Action.parse("1F0"), Action.parse("1B0")]], 2)
    ['0B0', '1F0']
    """
    done = set()
    pos = [0] * len(actions)

    def ready(a):
        if a.kind is Kind.F:
            return a.stage == 0 or Action(a.stage - 1, Kind.F, a.microbatch) in done
        if a.stage == stages - 1:
            return Action(a.stage, Kind.F, a.microbatch) in done
        return Action(a.stage + 1, Kind.B, a.microbatch) in done

    moved = True
    while moved:
        moved = False
        for r, seq in enumerate(actions):
            while pos[r] < len(seq) and ready(seq[pos[r]]):
                done.add(seq[pos[r]])
                pos[r] += 1
                moved = True
    return [str(seq[pos[r]]) for r, seq in enumerate(actions) if pos[r] < len(seq)]


def unroll(orders, lags, microbatches: int) -> list:
    """Per-rank actions from a repetend: in round ``i`` each rank runs its blocks in ``orders[r]``
    (``(stage, Kind)`` pairs), block ``x`` on micro-batch ``i - lags[x]``; rounds where that
    micro-batch does not exist are skipped, which leaves the warm-up and cool-down.

    >>> o = [[(0, Kind.B), (0, Kind.F)], [(1, Kind.F), (1, Kind.B)]]
    >>> lags = {(0, Kind.F): 0, (0, Kind.B): 2, (1, Kind.F): 1, (1, Kind.B): 1}
    >>> unroll(o, lags, 4) == one_f_one_b(2, 4)
    True
    """
    lo = min(lags.values())
    hi = max(lags.values())
    out = []
    for seq in orders:
        acts = []
        for i in range(lo, microbatches + hi):
            for st, k in seq:
                m = i - lags[(st, k)]
                if 0 <= m < microbatches:
                    acts.append(Action(st, k, m))
        out.append(acts)
    return out
