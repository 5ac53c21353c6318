"""Frozen record types shared by the night and the trainer, with a JSON round-trip.

Public API::

    ReferenceKind, Split, Origin, TaskOutcome, EditTarget, EditOp, GateAction, DeltaStatus
    RuleCheck(op, arg)
    TaskRecord(id, intent, ...)            .to_dict() / TaskRecord.from_dict(d)
    RolloutResult(task_id, sample_id, ...) .to_dict() / .from_dict(d)   (night and trainer)
    EditRecord(target, op, content, anchor, rationale)
    JudgeResult(hard, soft, reason, failed)
    TaskDelta(task_id, baseline, candidate, status, finite)
    GateDecision(action, accepted, baseline, candidate, delta, task_deltas, arithmetic, ...)

``to_dict`` gives plain JSON data: enums as their string values, tuples as lists, and
non-finite floats as ``None`` (our JSON writers reject NaN). ``from_dict`` validates and
raises :class:`skillopt.errors.DataError` on a wrong type or an unknown key; the only
leniency is :meth:`TaskRecord.from_dict`, which also reads the reference's legacy task
shape (``replay``/``holdout`` splits, ``judge: {checks: [...]}``, ``context_excerpt``, ...).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any, Self

from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    TypeAdapter,
    ValidationError,
    with_config,
)

from skillopt.errors import DataError

__all__ = [
    "DeltaStatus",
    "EditOp",
    "EditRecord",
    "EditTarget",
    "GateAction",
    "GateDecision",
    "JudgeResult",
    "Origin",
    "ReferenceKind",
    "RolloutResult",
    "RuleCheck",
    "Split",
    "TaskDelta",
    "TaskOutcome",
    "TaskRecord",
]

_STRICT = ConfigDict(extra="forbid")
TaskId = Annotated[str, Field(min_length=1)]  # checked when loading, not on construction


def _null_to_nan(value: Any) -> Any:
    return math.nan if value is None else value


#: A float that ``to_dict`` writes as ``null`` when not finite and ``from_dict`` reads back
#: as NaN, so every record survives its own JSON round trip.
Num = Annotated[float, BeforeValidator(_null_to_nan)]


class ReferenceKind(StrEnum):
    """How a task's response is judged."""

    EXACT = "exact"  # normalised containment of ``reference``
    RUBRIC = "rubric"  # LLM judge against ``reference`` (or the intent when empty)
    RULE = "rule"  # local rule checks in ``checks``
    ANSWER = "answer"  # labelled benchmark answer


class Split(StrEnum):
    TRAIN = "train"
    VAL = "val"
    TEST = "test"


class Origin(StrEnum):
    MINED = "mined"  # from the user's transcripts
    DREAM = "dream"  # a paraphrased variant of a train task
    RECALL = "recall"  # a past task brought back from the archive
    SEED = "seed"  # shipped with a demo or benchmark
    MANUAL = "manual"  # written by the user in a tasks file


class TaskOutcome(StrEnum):
    """What the transcript said happened when the user asked for this."""

    SUCCESS = "success"
    FAIL = "fail"
    MIXED = "mixed"
    UNKNOWN = "unknown"


class EditTarget(StrEnum):
    SKILL = "skill"
    MEMORY = "memory"


class EditOp(StrEnum):
    """The edit operations :mod:`skillopt.skilldoc` understands (``add`` == ``append``)."""

    ADD = "add"
    APPEND = "append"
    INSERT_AFTER = "insert_after"
    REPLACE = "replace"
    DELETE = "delete"


class GateAction(StrEnum):
    ACCEPT_NEW_BEST = "accept_new_best"
    ACCEPT = "accept"  # trainer only: above current, not above best
    REJECT = "reject"
    REJECT_UNVERIFIED = "reject_unverified"  # would accept, but the split leaked
    UNTESTED = "untested"  # no held-out task exercised the edit: carried, not rejected
    GREEDY_APPLIED = "greedy_applied"  # gate off, some edit applied
    GREEDY_NOOP = "greedy_noop"  # gate off, nothing applied
    FORCE_ACCEPT = "force_accept"  # trainer with the gate off


class DeltaStatus(StrEnum):
    IMPROVED = "improved"
    REGRESSED = "regressed"
    UNCHANGED = "unchanged"


_ADAPTERS: dict[str, TypeAdapter[Any]] = {}


def _adapter(cls: type[Any]) -> TypeAdapter[Any]:
    key = f"{cls.__module__}.{cls.__qualname__}"
    adapter = _ADAPTERS.get(key)
    if adapter is None:
        adapter = _ADAPTERS[key] = TypeAdapter(cls)
    return adapter


def _finite_or_none(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite_or_none(v) for v in value]
    return value


class _Record:
    """JSON round-trip shared by every record below."""

    __slots__ = ()

    def to_dict(self) -> dict[str, Any]:
        data = _adapter(type(self)).dump_python(self, mode="json")
        result: dict[str, Any] = _finite_or_none(data)
        return result

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        if not isinstance(data, Mapping):
            raise DataError(f"{cls.__name__}: expected an object, got {type(data).__name__}")
        try:
            result: Self = _adapter(cls).validate_python(dict(data))
        except ValidationError as exc:
            raise DataError(f"{cls.__name__}: {_describe(exc)}") from exc
        return result


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err["loc"]) or "(root)"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


@with_config(_STRICT)
@dataclass(frozen=True, slots=True, kw_only=True)
class RuleCheck(_Record):
    """One rule check, e.g. ``RuleCheck(op="max_chars", arg=400)``.

    Ops are validated by :func:`skillopt.judges.validate_checks`, not here.
    """

    op: StrictStr
    arg: StrictStr | StrictInt = ""

    def label(self) -> str:
        """``op=arg``: the form failed criteria are reported in."""
        return f"{self.op}={self.arg}"


@with_config(_STRICT)
@dataclass(frozen=True, slots=True, kw_only=True)
class TaskRecord(_Record):
    """One recurring task: what was asked, and how to judge an answer."""

    id: TaskId
    intent: str
    context: str = ""
    reference: str = ""
    reference_kind: ReferenceKind = ReferenceKind.RUBRIC
    checks: tuple[RuleCheck, ...] = ()
    tags: tuple[str, ...] = ()
    split: Split = Split.TRAIN
    origin: Origin = Origin.MINED
    derived_from: str = ""
    system_contract: str = ""  # a verbatim system prompt the attempt must run under
    skill_hint: str = ""  # the skill the transcript used, for fan-out
    project: str = ""
    outcome: TaskOutcome = TaskOutcome.UNKNOWN
    source_sessions: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        return super(TaskRecord, cls).from_dict(_normalise_legacy_task(data))


_LEGACY_SPLITS = {"replay": "train", "holdout": "val"}
_LEGACY_ORIGINS = {"real": "mined"}
_LEGACY_RENAMES = {"context_excerpt": "context", "system": "system_contract"}
_LEGACY_DROPPED = ("attempted_solution",)


def _normalise_legacy_task(data: Mapping[str, Any]) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        return data
    out = dict(data)
    for old, new in _LEGACY_RENAMES.items():
        if old in out and new not in out:
            out[new] = out.pop(old)
    for key in _LEGACY_DROPPED:
        out.pop(key, None)
    if isinstance(out.get("split"), str):
        out["split"] = _LEGACY_SPLITS.get(out["split"], out["split"])
    if isinstance(out.get("origin"), str):
        out["origin"] = _LEGACY_ORIGINS.get(out["origin"], out["origin"])
    if out.get("reference_kind") == "none":
        out["reference_kind"] = "rubric"
    judge = out.pop("judge", None)
    if isinstance(judge, Mapping) and "checks" in judge and "checks" not in out:
        out["checks"] = judge["checks"]
        out.setdefault("reference_kind", "rule")
    elif judge not in (None, {}):
        raise DataError(f"TaskRecord: unsupported judge value {judge!r}")
    return out


@with_config(_STRICT)
@dataclass(frozen=True, slots=True, kw_only=True)
class RolloutResult(_Record):
    """One attempt at one task (a night's task, a trainer's item) under given documents,
    judged: ``hard`` is the pass/fail score (0..1), ``soft`` the partial one, ``reason`` why
    (a judge's reason, or the trainer's ``"<kind>: details"`` for a failure).

    ``latency`` is in seconds. ``error`` is empty on success, else a short redacted cause
    (a failed call scores 0 and is never confused with a wrong answer). ``task_type``,
    ``trajectory`` (what the trainer's optimizer sees of the attempt) and ``extras`` are the
    trainer's; ``to_dict`` leaves them out while empty.
    """

    task_id: TaskId
    sample_id: int = 0
    response: str = ""
    hard: Num = 0.0
    soft: Num = 0.0
    reason: str = ""
    failed_criteria: tuple[str, ...] = ()
    tools_called: tuple[str, ...] = ()
    member: str = ""
    latency: Num = 0.0
    error: str = ""
    skill_hash: str = ""
    memory_hash: str = ""
    tokens: int = 0
    task_type: str = ""
    trajectory: str = ""
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.hard >= 1e-9

    def to_dict(self) -> dict[str, Any]:
        data = super(RolloutResult, self).to_dict()
        for key in _TRAINER_ONLY:
            if not data[key]:
                del data[key]
        return data


_TRAINER_ONLY = ("task_type", "trajectory", "extras")


@with_config(_STRICT)
@dataclass(frozen=True, slots=True, kw_only=True)
class EditRecord(_Record):
    """One proposed text edit. ``op`` stays a plain string so unknown ops can be reported."""

    target: EditTarget = EditTarget.SKILL
    op: str = EditOp.ADD.value
    content: str = ""
    anchor: str = ""
    rationale: str = ""


@with_config(_STRICT)
@dataclass(frozen=True, slots=True, kw_only=True)
class JudgeResult(_Record):
    """A judge's verdict. ``failed`` lists criteria as ``op=arg`` for reflect to quote."""

    hard: Num
    soft: Num
    reason: str = ""
    failed: tuple[str, ...] = ()


@with_config(_STRICT)
@dataclass(frozen=True, slots=True, kw_only=True)
class TaskDelta(_Record):
    """Baseline vs candidate score of one val task. ``None`` = missing or non-finite."""

    task_id: str
    baseline: float | None
    candidate: float | None
    status: DeltaStatus
    finite: bool = True


@with_config(_STRICT)
@dataclass(frozen=True, slots=True, kw_only=True)
class GateDecision(_Record):
    """The gate's verdict plus the arithmetic that produced it (``arithmetic``)."""

    action: GateAction
    accepted: bool
    baseline: Num
    candidate: Num
    delta: Num
    task_deltas: tuple[TaskDelta, ...] = ()
    blocked_by_regression: bool = False
    leaked: bool = False
    arithmetic: dict[str, Any] = field(default_factory=dict)
