"""Heuristic miner: session digests -> recurring, judgeable :class:`TaskRecord` s.

Deterministic and offline. One candidate per session (its opening request); candidates
with the same normalised intent are merged, so a request the user makes night after
night becomes one task with several source sessions, ranked first.

Evidence from the transcript becomes the judge:
- explicit constraints in the user's words become rule checks ("under 200 characters",
  "don't use `print`", "add a Risks section", "answer in JSON");
- otherwise the task gets a rubric built from the request and the user's follow-ups
  (which carry corrections), or the bare intent when there were none.
Outcome: only positive feedback -> success, only negative -> fail, both -> mixed (the
agent needed correcting), none -> unknown (mixed when the session ran three or more turns).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from skillopt.errors import DataError
from skillopt.judges import validate_checks
from skillopt.redact import sanitize
from skillopt.types import ReferenceKind, RuleCheck, TaskOutcome, TaskRecord
from skillopt_sleep.harvest import Sentiment, SessionDigest
from skillopt_sleep.harvest.common import clip

__all__ = [
    "CHARS_PER_WORD",
    "FOLLOWUP_CHARS",
    "JSON_REGEX",
    "MAX_FOLLOWUPS",
    "MAX_INTENT_CHARS",
    "MIN_INTENT_CHARS",
    "MineResult",
    "extract_checks",
    "heuristic_mine",
    "merge_tasks",
    "normalise_intent",
    "opening_index",
    "request_key",
    "session_outcome",
    "stable_id",
    "task_from_digest",
]

MIN_INTENT_CHARS = 8
MAX_INTENT_CHARS = 800
MAX_FOLLOWUPS = 3
FOLLOWUP_CHARS = 200
CHARS_PER_WORD = 7

_OUTCOME_RANK = {
    TaskOutcome.SUCCESS: 3,
    TaskOutcome.FAIL: 2,
    TaskOutcome.MIXED: 1,
    TaskOutcome.UNKNOWN: 0,
}

_QUOTED = r"(?:`([^`\n]{2,60})`|\"([^\"\n]{2,60})\"|'([^'\n]{2,60})')"
_LIMIT = re.compile(
    r"\b(?:under|below|less\s+than|fewer\s+than|at\s+most|no\s+more\s+than|max(?:imum)?|"
    r"within|keep\s+it\s+(?:under|to))\s+(\d{1,5})\s*(char(?:acter)?s?|words?)\b",
    re.I,
)
_FORBID = re.compile(
    r"\b(?:don'?t|do\s+not|never|avoid|stop|without|no\s+more)\s+"
    r"(?:use\s+|using\s+|mention\s+|mentioning\s+|include\s+|including\s+|add\s+|adding\s+|"
    r"print\s+|printing\s+|write\s+|writing\s+|call\s+|calling\s+)?" + _QUOTED,
    re.I,
)
_REQUIRE = re.compile(
    r"\b(?:always\s+|must\s+|should\s+)?(?:include|mention|use|add|start\s+with|end\s+with|"
    r"contain)\s+(?:the\s+)?" + _QUOTED,
    re.I,
)
_SECTION = re.compile(
    r"\b(?i:add|include|need|needs|missing|with|want)\s+(?i:an?\s+|the\s+)?"
    r"(?:`#*\s*([^`\n]{2,40})`|\"#*\s*([^\"\n]{2,40})\"|([A-Z][\w-]*(?:\s+[A-Z][\w-]*){0,3}))"
    r"\s+(?i:section|heading)\b"
)
_JSON = re.compile(
    r"\b(?:as|in|return|output|reply\s+in|respond\s+in|only)\s+(?:valid\s+|raw\s+)?json\b", re.I
)
JSON_REGEX = r"^\s*(?:```(?:json)?\s*)?[\[{]"

_NON_WORD = re.compile(r"[\W_]+", re.UNICODE)
# A redacted secret, with the name it was assigned to (``token=[REDACTED:github_token]``):
# a secret the user pasted once must not make the same request a different task.
_REDACTED = re.compile(
    r"(?:\b[A-Za-z_][\w.-]{0,60}\s*[=:]\s*)?[\"']?\[REDACTED:[\w.-]{1,40}\][\"']?"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class MineResult:
    """Tasks plus what happened while mining (counts, fallback causes)."""

    tasks: tuple[TaskRecord, ...]
    miner: str = "heuristic"
    diagnostics: dict[str, Any] = field(default_factory=dict)


def normalise_intent(text: str) -> str:
    """Case-, punctuation- and whitespace-insensitive form used to merge repeats; redacted
    secrets (and the names they were assigned to) are left out."""
    folded = unicodedata.normalize("NFKC", _REDACTED.sub(" ", text)).casefold()
    return " ".join(_NON_WORD.sub(" ", folded).split())


def stable_id(prefix: str, intent: str) -> str:
    """``<prefix>_<sha12>`` of the normalised intent; stable across nights.

    The project path is deliberately left out: tasks already live under their project's
    state directory, and an id must survive the project being moved or cloned elsewhere
    (it also keeps the bundled demo's splits identical from one temp directory to the next).
    """
    digest = hashlib.sha256(normalise_intent(intent).encode()).hexdigest()
    return f"{prefix}_{digest[:12]}"


def session_outcome(digest: SessionDigest) -> TaskOutcome:
    kinds = {s.sentiment for s in digest.feedback}
    if kinds == {Sentiment.POSITIVE}:
        return TaskOutcome.SUCCESS
    if kinds == {Sentiment.NEGATIVE}:
        return TaskOutcome.FAIL
    if kinds:
        return TaskOutcome.MIXED
    return TaskOutcome.MIXED if digest.n_user_turns >= 3 else TaskOutcome.UNKNOWN


def _first(groups: Iterable[str | None]) -> str:
    return next((g.strip() for g in groups if g and g.strip()), "")


def extract_checks(texts: Sequence[str]) -> tuple[RuleCheck, ...]:
    """Rule checks the user stated explicitly in ``texts`` (deduplicated, validated)."""
    found: dict[tuple[str, str | int], RuleCheck] = {}

    def put(op: str, arg: str | int) -> None:
        check = RuleCheck(op=op, arg=arg)
        try:
            validate_checks([check])
        except DataError:
            return
        found.setdefault((op, arg), check)

    limits: list[int] = []
    for text in texts:
        for m in _LIMIT.finditer(text):
            n = int(m.group(1))
            limits.append(n if m.group(2).lower().startswith("char") else n * CHARS_PER_WORD)
        forbidden_spans: list[tuple[int, int]] = []
        for m in _FORBID.finditer(text):
            forbidden_spans.append(m.span())
            put("not_contains", _first(m.groups()))
        for m in _REQUIRE.finditer(text):
            if any(a <= m.start() < b for a, b in forbidden_spans):
                continue
            put("contains", _first(m.groups()))
        for m in _SECTION.finditer(text):
            put("section_contains", _first(m.groups()))
        if _JSON.search(text):
            put("regex", JSON_REGEX)
    if limits:
        put("max_chars", min(limits))
    return tuple(found.values())


def _rubric(intent: str, followups: Sequence[str]) -> str:
    if not followups:
        return ""
    lines = [f"The answer must do what was asked: {intent}", "The user also required:"]
    lines.extend(f"- {f}" for f in followups)
    return "\n".join(lines)


def opening_index(digest: SessionDigest) -> int | None:
    """Where the session's opening request is among its user messages (the first one long
    enough to be a request), or ``None`` for nothing but greetings or one-word messages."""
    return next(
        (i for i, t in enumerate(digest.user_intents) if len(t.strip()) >= MIN_INTENT_CHARS), None
    )


def request_key(digest: SessionDigest) -> str | None:
    """The heuristic task id of the session's opening request (sessions that opened with
    the same request share it), or ``None`` when it has none."""
    opening = opening_index(digest)
    if opening is None:
        return None
    return stable_id("h", clip(sanitize(digest.user_intents[opening]), MAX_INTENT_CHARS))


def task_from_digest(digest: SessionDigest, *, project: str = "") -> TaskRecord | None:
    """One candidate task from one session, or ``None`` if it has no usable request."""
    opening = opening_index(digest)
    if opening is None:  # nothing but greetings or one-word messages
        return None
    intent = clip(sanitize(digest.user_intents[opening]), MAX_INTENT_CHARS)
    later = digest.user_intents[opening + 1 :]
    followups = [clip(t, FOLLOWUP_CHARS) for t in later[:MAX_FOLLOWUPS]]
    checks = extract_checks(digest.user_intents[opening:])
    rubric = _rubric(intent, followups)
    context = ""
    if followups:
        context = clip("Follow-up constraints from the same session:\n" + "\n".join(followups), 600)
    tags = []
    if digest.tools_used:
        tags.append("tools:" + "+".join(digest.tools_used[:4]))
    if digest.git_branch:
        tags.append("branch:" + digest.git_branch)
    tags.append(f"source:{digest.source.value}")
    scope = project or (str(digest.cwd) if digest.cwd else "")
    return TaskRecord(
        id=stable_id("h", intent),
        intent=intent,
        context=context,
        reference=rubric,
        reference_kind=ReferenceKind.RULE if checks else ReferenceKind.RUBRIC,
        checks=checks,
        tags=tuple(tags),
        skill_hint=digest.skill_hint,
        project=scope,
        outcome=session_outcome(digest),
        source_sessions=(digest.session_id,),
    )


def merge_tasks(tasks: Iterable[TaskRecord]) -> list[TaskRecord]:
    """Merge tasks with the same id: union sessions, tags and checks; best outcome wins;
    an intent without a redaction marker wins over one with; the skill hint survives only
    if every observation agrees. Order: most sessions first, then first-seen (callers pass
    newest sessions first)."""
    merged: dict[str, TaskRecord] = {}
    hints: dict[str, set[str]] = {}
    for task in tasks:
        hints.setdefault(task.id, set()).add(task.skill_hint)
        prior = merged.get(task.id)
        if prior is None:
            merged[task.id] = task
            continue
        checks = {(c.op, c.arg): c for c in (*prior.checks, *task.checks)}
        outcome = max(prior.outcome, task.outcome, key=lambda o: _OUTCOME_RANK[o])
        if _REDACTED.search(prior.intent) and not _REDACTED.search(task.intent):
            prior = replace(prior, intent=task.intent)  # replay the request, not the marker
        merged[task.id] = replace(
            prior,
            source_sessions=tuple(dict.fromkeys((*prior.source_sessions, *task.source_sessions))),
            tags=tuple(dict.fromkeys((*prior.tags, *task.tags))),
            checks=tuple(checks.values()),
            reference_kind=ReferenceKind.RULE if checks else prior.reference_kind,
            outcome=outcome,
        )
    out = []
    for task_id, task in merged.items():
        agreed = hints[task_id]
        out.append(replace(task, skill_hint=task.skill_hint if len(agreed) == 1 else ""))
    order = {t.id: i for i, t in enumerate(out)}
    return sorted(out, key=lambda t: (-len(t.source_sessions), order[t.id]))


def heuristic_mine(
    digests: Sequence[SessionDigest], *, project: str = "", max_tasks: int = 40
) -> MineResult:
    """Mine ``digests`` (newest first) into at most ``max_tasks`` merged tasks."""
    candidates: list[TaskRecord] = []
    skipped = 0
    for digest in digests:
        task = task_from_digest(digest, project=project)
        if task is None:
            skipped += 1
        else:
            candidates.append(task)
    merged = merge_tasks(candidates)
    kept = merged[: max(0, max_tasks)]
    diagnostics = {
        "sessions": len(digests),
        "skipped_no_request": skipped,
        "candidates": len(candidates),
        "merged_duplicates": len(candidates) - len(merged),
        "truncated": len(merged) - len(kept),
        "with_rule_checks": sum(1 for t in kept if t.checks),
    }
    return MineResult(tasks=tuple(kept), miner="heuristic", diagnostics=diagnostics)
