"""Tokens per call, per member and kind of call, from what earlier calls and nights measured.

A flat guess per call is far off for agent CLIs: each ``codex`` call carries the CLI's own
system prompt (~5k tokens), so a night counted 887k tokens against an estimate of 239k and
a default budget cut it short without warning. This model keeps, per member and kind of call
(attempt, judge, reflect, mine), the calls and tokens measured, persisted in the project's
state directory (``token-model.json``) and updated after every night, and prices the
pre-night estimate with them. Until a member has been measured, a prior by member kind is
used (agent CLIs much larger than HTTP endpoints). A member that reports no usage (the
``copilot`` CLI) is counted from text length; its tokens are marked as estimated and
never priced below the prior.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skillopt.atomicio import atomic_write_json
from skillopt.config import CLI_KINDS, PoolConfig
from skillopt.logging import get_logger
from skillopt_sleep.stage_rates import KEEP, NightRecord

__all__ = [
    "ATTEMPT_STAGES",
    "CLI_PRIOR",
    "FILE_NAME",
    "HTTP_PRIOR",
    "WINDOW",
    "Measured",
    "TokenEstimate",
    "TokenModel",
    "budget_warning",
    "call_kind",
    "estimate_tokens",
]

FILE_NAME = "token-model.json"
HTTP_PRIOR = 900  # tokens per call before a member was measured (prompt + reply)
CLI_PRIOR = 5000  # an agent CLI adds its own system prompt and tool schemas to every call
WINDOW = 2000  # calls remembered per member and kind: later nights outweigh old ones
ATTEMPT_STAGES = ("attempt", "rollout", "baseline", "trial", "union", "attribution", "final",
                  "test")  # fmt: skip

_log = get_logger(__name__)


def call_kind(stage: str) -> str:
    """The kind of call a request stage is: attempt, judge, reflect or mine."""
    if stage == "judge":
        return "judge"
    if stage.startswith("reflect"):
        return "reflect"
    if stage.startswith("mine"):
        return "mine"
    return "attempt"


@dataclass(slots=True)
class Measured:
    calls: int = 0
    tokens: int = 0
    estimated: int = 0  # tokens counted from text length (the member reported none)

    def add(self, calls: int, tokens: int, estimated: int) -> None:
        self.calls += calls
        self.tokens += tokens
        self.estimated += estimated
        if self.calls > WINDOW:  # keep the average, forget the oldest weight
            scale = WINDOW / self.calls
            self.calls = WINDOW
            self.tokens = round(self.tokens * scale)
            self.estimated = round(self.estimated * scale)

    @property
    def per_call(self) -> float:
        return self.tokens / self.calls if self.calls else 0.0

    @property
    def is_estimate(self) -> bool:
        return self.estimated * 2 > self.tokens


def _measured(row: Mapping[str, Any]) -> Measured:
    return Measured(int(row["calls"]), int(row["tokens"]), int(row.get("estimated", 0)))


@dataclass(slots=True)
class TokenModel:
    """Per member: its kind and, per kind of call, what was measured; and the last nights'
    calls per stage (:mod:`skillopt_sleep.stage_rates`)."""

    members: dict[str, dict[str, Measured]] = field(default_factory=dict)
    nights: list[NightRecord] = field(default_factory=list)

    # -- persistence --------------------------------------------------------------

    @classmethod
    def load(cls, project_dir: Path) -> TokenModel:
        """The saved model; an unreadable file is logged and replaced by an empty model
        (it is a cache of averages: the next nights measure again)."""
        path = project_dir / FILE_NAME
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            members = {
                str(name): {str(kind): _measured(m) for kind, m in kinds.items()}
                for name, kinds in data["members"].items()
            }
            nights = [NightRecord.from_dict(n) for n in data.get("nights", [])]
            return cls(members=members, nights=nights[-KEEP:])
        except FileNotFoundError:
            return cls()
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            _log.warning("token_model.unreadable", path=str(path), error=str(exc))
            return cls()

    def save(self, project_dir: Path) -> None:
        atomic_write_json(
            project_dir / FILE_NAME,
            {
                "version": 1,
                "members": {
                    name: {
                        kind: {"calls": m.calls, "tokens": m.tokens, "estimated": m.estimated}
                        for kind, m in sorted(kinds.items())
                    }
                    for name, kinds in sorted(self.members.items())
                },
                "nights": [n.to_dict() for n in self.nights[-KEEP:]],
            },
        )

    # -- learning -----------------------------------------------------------------

    def observe(self, usage: Mapping[tuple[str, str], Sequence[int]]) -> None:
        """Add one night's (or part of a night's) counts: (member, stage) -> (calls, tokens,
        estimated tokens), as the night's budget tallies them."""
        for (member, stage), (calls, tokens, estimated) in usage.items():
            if calls and member:
                kinds = self.members.setdefault(member, {})
                kinds.setdefault(call_kind(stage), Measured()).add(calls, tokens, estimated)

    def record_night(self, night: NightRecord) -> None:
        self.nights = [*self.nights, night][-KEEP:]

    # -- pricing ------------------------------------------------------------------

    def per_call(self, member: str, kind: str, member_kind: str) -> tuple[float, str]:
        """Tokens one call of ``kind`` to ``member`` is expected to cost, and how that is known
        ("measured", "estimated": counted from text, or "prior").

        A kind not measured yet is priced from the member's other kinds (an agent CLI's own
        prompt weighs on every call), mining calls aside: they carry whole sessions, several
        in one call, and say nothing of what an attempt or a judgement costs."""
        prior = float(CLI_PRIOR if member_kind in CLI_KINDS else HTTP_PRIOR)
        kinds = self.members.get(member, {})
        measured = kinds.get(kind)
        if measured is None or not measured.calls:
            total = Measured()
            for other, m in kinds.items():
                if other != "mine":
                    total.add(m.calls, m.tokens, m.estimated)
            measured = total if total.calls else None
        if measured is None:
            return prior, "prior"
        if measured.is_estimate:
            return max(measured.per_call, prior), "estimated"
        return measured.per_call, "measured"


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenEstimate:
    tokens: int
    per_call: dict[str, int]  # "member:kind" -> tokens per call used
    sources: dict[str, str]  # member -> measured | estimated | prior (the weakest used)

    def to_dict(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "per_call": self.per_call, "sources": self.sources}

    def describe(self) -> str:
        """Per member, its largest per-call price and how it is known."""
        parts = []
        for member, source in sorted(self.sources.items()):
            rates = [v for k, v in self.per_call.items() if k.startswith(f"{member}:")]
            rate = max(rates, default=0)
            parts.append(f"{member} ~{rate / 1000:.1f}k/call ({source})")
        return ", ".join(parts)


_WEAKEST = {"prior": 2, "estimated": 1, "measured": 0}


def estimate_tokens(
    model: TokenModel,
    pool: PoolConfig | None,
    by_stage: Mapping[str, int],
    *,
    rubric_share: float,
) -> TokenEstimate:
    """Tokens for the estimated calls of each stage, priced per member of the role the calls
    go to (round-robin spreads them evenly). Attempt stages also carry their judge calls
    (a ``rubric_share`` of the attempts), reflection goes to the optimizer."""
    roles = _roles(pool)
    kinds = {m.name: m.kind for m in pool.members} if pool is not None else {}
    per_call: dict[str, int] = {}
    sources: dict[str, str] = {}

    def rate(role: str, kind: str) -> float:
        members = roles.get(role) or [""]
        values = []
        for member in members:
            value, source = model.per_call(member, kind, kinds.get(member, ""))
            values.append(value)
            if member:
                per_call[f"{member}:{kind}"] = round(value)
                previous = sources.get(member)
                if previous is None or _WEAKEST[source] > _WEAKEST[previous]:
                    sources[member] = source
        return sum(values) / len(values)

    judge_share = rubric_share / (1.0 + rubric_share)
    attempt_rate = (1 - judge_share) * rate("target", "attempt") + judge_share * rate(
        "optimizer", "judge"
    )
    tokens = 0.0
    for stage, calls in by_stage.items():
        tokens += calls * (rate("optimizer", "reflect") if stage == "reflect" else attempt_rate)
    return TokenEstimate(tokens=round(tokens), per_call=per_call, sources=sources)


def _roles(pool: PoolConfig | None) -> dict[str, list[str]]:
    if pool is None:
        return {}
    return {"target": list(pool.roles.target), "optimizer": list(pool.roles.optimizer)}


def budget_warning(*, calls: int, tokens: int, max_calls: int, max_tokens: int) -> str:
    """What to say up front when the budget will stop the night before its estimated end."""
    cut: list[tuple[int, str]] = []
    if max_calls and calls > max_calls:
        cut.append((max_calls, f"budget.max_calls = {max_calls}"))
    if max_tokens and tokens > max_tokens and calls:
        covered = int(calls * max_tokens / tokens)
        cut.append((covered, f"budget.max_tokens = {max_tokens} (~{tokens} tokens estimated)"))
    if not cut:
        return ""
    covered, why = min(cut)
    return (
        f"the budget will cut this night short: {why} covers about {covered} of the "
        f"{calls} estimated calls; raise it, or expect a budget-stopped night"
    )
