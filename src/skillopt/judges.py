"""Local judges: rule checks, exact references, labelled answers, rubric keyword fallback.

Public API::

    KNOWN_OPS, SHAPE_OPS                                     # frozensets of rule-check ops
    validate_checks(checks) -> tuple[str, ...]               # warnings; raises DataError
    is_shape_only(checks) -> bool
    score_rule_checks(checks, response, tools_called=()) -> JudgeResult
    judge_exact(reference, response) -> JudgeResult
    judge_answer(reference, response) -> JudgeResult
    rubric_keyword_fallback(rubric, response, *, pass_threshold=0.8) -> JudgeResult
    rubric_result(score, reason, *, pass_threshold=0.8) -> JudgeResult   # from an LLM judge
    judge_local(task, response, tools_called=()) -> JudgeResult | None

``judge_local`` returns ``None`` when the task needs an LLM rubric judge. Failed rule
criteria are listed as ``op=arg`` (plus ``[problem]`` when the check itself is broken) so
reflection can quote them. ``tool_called`` trusts only the recorded ``tools_called`` list
(from the tool shim), never a marker the model writes about itself.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence

from skillopt.errors import DataError
from skillopt.types import JudgeResult, ReferenceKind, RuleCheck, TaskRecord

__all__ = [
    "KNOWN_OPS",
    "SHAPE_OPS",
    "is_shape_only",
    "judge_answer",
    "judge_exact",
    "judge_local",
    "rubric_keyword_fallback",
    "rubric_result",
    "score_rule_checks",
    "validate_checks",
]

RUBRIC_PASS = 0.8

# --------------------------------------------------------------------------- rule ops

_INT_OPS = frozenset({"max_chars", "min_chars"})
_TEXT_OPS = frozenset(
    {"contains", "not_contains", "regex", "section_present", "section_contains", "tool_called"}
)
SHAPE_OPS = frozenset({"max_chars", "min_chars", "section_present", "section_contains"})
KNOWN_OPS = _INT_OPS | _TEXT_OPS | {"no_refusal"}

_REFUSALS = (
    "i cannot",
    "i can not",
    "i can't",
    "i won't",
    "i will not",
    "i'm unable",
    "i am unable",
    "i'm not able",
    "i am not able",
    "unable to complete",
    "unable to help",
    "sorry, i can't",
    "sorry, i cannot",
    "sorry, but i can't",
    "no can do",
    "as an ai",
)
_REFUSAL_WINDOW = 160
_REFUSAL_MAX_LEN = 600
_LEAD_NOISE = re.compile(r"^(?:[\s>\-*_#]+|\d+[.)]\s*)+")


def _int_arg(check: RuleCheck) -> int:
    arg = check.arg
    if isinstance(arg, bool) or not isinstance(arg, int):
        if isinstance(arg, str) and arg.strip().isdigit():
            return int(arg.strip())
        raise DataError(f"rule check {check.op}: arg must be a non-negative integer, got {arg!r}")
    if arg < 0:
        raise DataError(f"rule check {check.op}: arg must be a non-negative integer, got {arg!r}")
    return arg


# A group with a quantifier inside, itself quantified: "(a+)+", "(\\w*\\s)*", "(x+){2,}".
_NESTED_QUANTIFIER = re.compile(r"\((?:[^()\\]|\\.)*(?<!\\)[+*](?:[^()\\]|\\.)*\)(?:[+*]|\{\d*,)")
_REGEX_MAX_INPUT = 200_000  # regex checks read at most this much of a response


def validate_checks(checks: Sequence[RuleCheck]) -> tuple[str, ...]:
    """Reject broken checks at load time; return warnings worth showing the user.

    Errors (``DataError``): an unknown op, a missing text arg, a regex that does not
    compile or nests quantifiers (catastrophic backtracking would stall the event loop),
    a char bound that is not a non-negative integer.
    Warnings: ``min_chars=0`` (always passes), a judge made only of shape checks.
    """
    warnings: list[str] = []
    for check in checks:
        if check.op not in KNOWN_OPS:
            known = ", ".join(sorted(KNOWN_OPS))
            raise DataError(f"rule check has unknown op {check.op!r} (known: {known})")
        if check.op in _INT_OPS:
            if _int_arg(check) == 0 and check.op == "min_chars":
                warnings.append("min_chars=0 always passes")
        elif check.op in _TEXT_OPS:
            if not isinstance(check.arg, str) or not check.arg.strip():
                raise DataError(f"rule check {check.op}: needs a non-empty text arg")
            if check.op == "regex":
                try:
                    re.compile(check.arg)
                except re.error as exc:
                    raise DataError(f"rule check regex={check.arg!r}: {exc}") from exc
                if _NESTED_QUANTIFIER.search(check.arg):
                    raise DataError(
                        f"rule check regex={check.arg!r}: a repeated group that itself repeats"
                        " can take exponential time; rewrite it without nesting"
                    )
    if checks and is_shape_only(checks):
        warnings.append("every check is about shape; nothing checks the content")
    return tuple(warnings)


def is_shape_only(checks: Sequence[RuleCheck]) -> bool:
    return all(c.op in SHAPE_OPS for c in checks)


def _lines_ci(name: str, pattern: str) -> re.Pattern[str]:
    return re.compile(pattern.replace("NAME", re.escape(name)), re.IGNORECASE | re.MULTILINE)


def _section_present(response: str, name: str) -> bool:
    """Strict legacy form: heading ending in NAME, a bold line, or a ``NAME:`` label."""
    forms = (
        r"^[ \t]{0,3}#{1,6}[ \t]*.*NAME[ \t]*$",
        r"^[ \t]*\*\*[^\n]*NAME[^\n]*\*\*[ \t]*:?[ \t]*$",
        r"^[ \t]*NAME[ \t]*:",
    )
    return any(_lines_ci(name, f).search(response) for f in forms)


_ATX = re.compile(r"^[ ]{0,3}#{1,6}(?:[ \t]+(.*))?$", re.MULTILINE)


def _section_contains(response: str, name: str) -> bool:
    """Some ATX heading contains NAME (casefolded). Bold lines and labels do not count."""
    needle = name.casefold()
    return any(needle in (m.group(1) or "").casefold() for m in _ATX.finditer(response))


def _is_refusal(response: str) -> bool:
    if not response.strip():
        return True
    head = _LEAD_NOISE.sub("", response)[:_REFUSAL_WINDOW].casefold().replace("\u2019", "'")
    return head.startswith(_REFUSALS) and len(response) < _REFUSAL_MAX_LEN


def _check_one(check: RuleCheck, response: str, tools: Sequence[str]) -> tuple[bool, str]:
    """(passed, problem) for one check; ``problem`` annotates a broken check."""
    op, arg = check.op, check.arg
    text = arg if isinstance(arg, str) else str(arg)
    rules: dict[str, Callable[[], bool]] = {
        "contains": lambda: text.casefold() in response.casefold(),
        "not_contains": lambda: text.casefold() not in response.casefold(),
        "section_present": lambda: _section_present(response, text),
        "section_contains": lambda: _section_contains(response, text),
        "no_refusal": lambda: not _is_refusal(response),
        "tool_called": lambda: text.casefold() in {t.casefold() for t in tools},
    }
    if op in _INT_OPS:
        try:
            bound = _int_arg(check)
        except DataError:
            return False, "invalid bound"
        return (len(response) <= bound if op == "max_chars" else len(response) >= bound), ""
    if op == "regex":
        try:
            return re.search(text, response[:_REGEX_MAX_INPUT]) is not None, ""
        except re.error:
            return False, "invalid regex"
    rule = rules.get(op)
    if rule is None:
        return False, "unknown op"
    return rule(), ""


def score_rule_checks(
    checks: Sequence[RuleCheck], response: str, tools_called: Sequence[str] = ()
) -> JudgeResult:
    """Hard = every check passes; soft = the passing fraction."""
    if not checks:
        return JudgeResult(hard=0.0, soft=0.0, reason="no checks")
    failed: list[str] = []
    for check in checks:
        ok, problem = _check_one(check, response, tools_called)
        if not ok:
            failed.append(check.label() + (f" [{problem}]" if problem else ""))
    passed = len(checks) - len(failed)
    reason = "all checks passed" if not failed else "failed: " + ", ".join(failed)
    return JudgeResult(
        hard=1.0 if not failed else 0.0,
        soft=passed / len(checks),
        reason=reason,
        failed=tuple(failed),
    )


# --------------------------------------------------------------------------- text judges

_NON_WORD = re.compile(r"[^a-z0-9]+")
_STOPWORDS = frozenset(
    [
        "the",
        "and",
        "for",
        "with",
        "that",
        "this",
        "from",
        "are",
        "was",
        "were",
        "has",
        "have",
        "had",
        "not",
        "but",
        "you",
        "your",
        "its",
        "into",
        "should",
        "must",
        "will",
        "can",
        "any",
        "all",
        "each",
        "per",
        "when",
        "then",
        "than",
        "them",
        "they",
        "their",
        "what",
        "which",
        "who",
    ]
)


def _norm(text: str) -> str:
    return _NON_WORD.sub(" ", text.casefold()).strip()


def _keywords(text: str) -> list[str]:
    seen: dict[str, None] = {}
    for tok in _norm(text).split():
        if len(tok) > 2 and tok not in _STOPWORDS:
            seen.setdefault(tok, None)
    return list(seen)


def _contains_phrase(haystack: str, needle: str) -> bool:
    """Normalised containment on token boundaries ("cat" is not in "concatenate")."""
    return bool(needle) and f" {needle} " in f" {haystack} "


def judge_exact(reference: str, response: str) -> JudgeResult:
    """Hard when the normalised reference occurs in the normalised response."""
    ref, resp = _norm(reference), _norm(response)
    if not ref:
        return JudgeResult(hard=0.0, soft=0.0, reason="empty reference", failed=("reference",))
    hard = 1.0 if _contains_phrase(resp, ref) else 0.0
    words = _keywords(reference)
    present = set(resp.split())
    coverage = sum(w in present for w in words) / len(words) if words else 0.0
    soft = max(hard, coverage)
    if hard:
        return JudgeResult(hard=1.0, soft=soft, reason="reference found")
    return JudgeResult(
        hard=0.0,
        soft=soft,
        reason=f"reference missing (coverage {soft:.2f})",
        failed=(f"exact={reference[:80]}",),
    )


_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)
_ANSWER_LINE = re.compile(r"^\s*(?:final\s+)?answer\s*[:=]\s*(.+)$", re.IGNORECASE | re.MULTILINE)


def _extract_answer(response: str) -> str:
    tags = _ANSWER_TAG.findall(response)
    if tags:
        return str(tags[-1])
    lines = _ANSWER_LINE.findall(response)
    if lines:
        return str(lines[-1])
    return response


def _untag(text: str) -> str:
    """A reference written with answer tags means their content (scored like the reply)."""
    tags = _ANSWER_TAG.findall(text)
    return str(tags[-1]) if tags else text


def _token_f1(pred: str, gold: str) -> float:
    p, g = pred.split(), gold.split()
    if not p or not g:
        return 0.0
    remaining = list(g)
    common = 0
    for tok in p:
        if tok in remaining:
            remaining.remove(tok)
            common += 1
    if not common:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


def judge_answer(reference: str, response: str) -> JudgeResult:
    """Labelled-answer judge: exact match (or phrase containment) of the final answer.

    The answer is the last ``<answer>...</answer>``, else the last ``Answer:`` line, else the
    whole response. ``reference`` may list alternatives separated by ``||``. Soft is the best
    token F1 (1.0 on a match).
    """
    golds = [_norm(_untag(g)) for g in reference.split("||") if _norm(_untag(g))]
    if not golds:
        return JudgeResult(hard=0.0, soft=0.0, reason="empty reference", failed=("answer",))
    pred = _norm(_extract_answer(response))
    if any(pred == g or _contains_phrase(pred, g) for g in golds):
        return JudgeResult(hard=1.0, soft=1.0, reason="answer matches")
    f1 = max(_token_f1(pred, g) for g in golds)
    return JudgeResult(
        hard=0.0,
        soft=f1,
        reason=f"answer does not match (token F1 {f1:.2f})",
        failed=(f"answer={reference[:80]}",),
    )


def rubric_keyword_fallback(
    rubric: str, response: str, *, pass_threshold: float = RUBRIC_PASS
) -> JudgeResult:
    """Offline stand-in for the LLM rubric judge: share of rubric keywords present."""
    words = _keywords(rubric)
    if not words:
        return JudgeResult(hard=0.0, soft=0.0, reason="rubric has no keywords", failed=("rubric",))
    present = set(_norm(response).split())
    missing = [w for w in words if w not in present]
    coverage = (len(words) - len(missing)) / len(words)
    return JudgeResult(
        hard=1.0 if coverage >= pass_threshold else 0.0,
        soft=coverage,
        reason=f"keyword coverage {coverage:.2f} (offline fallback)",
        failed=tuple(f"keyword={w}" for w in missing[:10]),
    )


def rubric_result(
    score: float, reason: str = "", *, pass_threshold: float = RUBRIC_PASS
) -> JudgeResult:
    """Turn an LLM judge's ``{score, reason}`` into a verdict; the score is clamped to [0, 1]."""
    if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
        raise DataError(f"rubric judge score must be a finite number, got {score!r}")
    soft = min(1.0, max(0.0, float(score)))
    hard = 1.0 if soft >= pass_threshold else 0.0
    failed = () if hard else ("rubric",)
    return JudgeResult(hard=hard, soft=soft, reason=reason, failed=failed)


def judge_local(
    task: TaskRecord, response: str, tools_called: Sequence[str] = ()
) -> JudgeResult | None:
    """Judge without a model when the task allows it; ``None`` means "ask the LLM judge"."""
    if task.reference_kind is ReferenceKind.RULE:
        return score_rule_checks(task.checks, response, tools_called)
    if task.reference_kind is ReferenceKind.EXACT:
        return judge_exact(task.reference, response)
    if task.reference_kind is ReferenceKind.ANSWER:
        return judge_answer(task.reference, response)
    return None
