"""A question-answering environment over items ``{id, question, context?, answers[]}``.

Items are loaded by :mod:`skillopt.trainer.dataset` (three files or one split file, JSONL or
a JSON array, field names mapped in ``[env.data]``); the bundled synthetic set
(``envs/data/qa_synth``) is used when no directory is given. The target gets the
skill in its system prompt and must end with ``<answer>...</answer>``; scoring is normalised
exact match (hard) and token F1 (soft), max over the gold answers.

Copy this module to add a chat benchmark: the trainer only calls ``items``, ``task_types`` and
``rollout``.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from skillopt.backends.base import CompletionRequest, Role
from skillopt.trainer.dataset import DataSection, SplitItems, bundled, load_splits
from skillopt.trainer.envs.base import EnvItem, RolloutContext, RolloutResult

__all__ = [
    "QAEnvironment",
    "bundled_data_dir",
    "exact_match",
    "extract_answer",
    "qa_result",
    "token_f1",
]

#: The target's default intro; a member's ``system_prompt`` request setting replaces it.
SYSTEM_INTRO = "You answer short factual questions."
_SYSTEM_TEMPLATE = """# Skill
{skill}

Think briefly, then finish with the final answer inside <answer></answer> tags."""

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)
_CONTEXT_CHARS = 4000


def bundled_data_dir() -> Path:
    """Directory of the synthetic QA set shipped with the package."""
    return bundled("qa_synth")


def untag(text: str) -> str:
    """The last ``<answer>`` tag's content when ``text`` has one, else ``text`` itself."""
    tags = _ANSWER_TAG.findall(text)
    return str(tags[-1]) if tags else text


def normalize_answer(text: str) -> str:
    """Answer tags off, lower-case, drop punctuation and articles, collapse whitespace.

    Prediction and gold go through the same function, so a gold written with tags
    (``<answer>Paris</answer>``) matches the untagged prediction it asks for."""
    lowered = untag(text).lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", lowered).split())


def extract_answer(reply: str) -> str:
    """The last ``<answer>`` tag's content, else the last non-empty line."""
    tags = _ANSWER_TAG.findall(reply)
    if tags:
        return str(tags[-1]).strip()
    lines = [line.strip() for line in reply.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def exact_match(prediction: str, golds: Sequence[str]) -> float:
    norm = normalize_answer(prediction)
    return 1.0 if any(norm == normalize_answer(g) for g in golds) else 0.0


def token_f1(prediction: str, golds: Sequence[str]) -> float:
    pred = normalize_answer(prediction).split()
    best = 0.0
    for gold in golds:
        ref = normalize_answer(gold).split()
        common = sum((Counter(pred) & Counter(ref)).values())
        if not pred or not ref or common == 0:
            continue
        precision, recall = common / len(pred), common / len(ref)
        best = max(best, 2 * precision * recall / (precision + recall))
    return best


class QAEnvironment(SplitItems):
    """Single-turn QA with EM / F1 scoring."""

    def __init__(
        self, data_dir: str | Path = "", *, limit: int = 0, data: DataSection | None = None
    ) -> None:
        super().__init__(
            load_splits(
                data_dir, data or DataSection(), default_dir=bundled_data_dir(), limit=limit
            )
        )

    @property
    def name(self) -> str:
        return "qa"

    @staticmethod
    def system_prompt(skill: str) -> str:
        return _SYSTEM_TEMPLATE.format(skill=skill.strip() or "(no skill yet)")

    @staticmethod
    def user_prompt(item: EnvItem) -> str:
        context = str(item.data.get("context") or "")[:_CONTEXT_CHARS]
        parts = [f"Context:\n{context}\n" if context else "", f"Question: {item.data['question']}"]
        return "".join(parts)

    async def rollout(self, item: EnvItem, skill: str, ctx: RolloutContext) -> RolloutResult:
        golds = [str(a) for a in item.data["answers"]]
        request = CompletionRequest(
            role=Role.TARGET,
            system_intro=SYSTEM_INTRO,
            system=self.system_prompt(skill),
            prompt=self.user_prompt(item),
            max_output_tokens=ctx.max_output_tokens,
            timeout=ctx.timeout_s,
            sample_id=ctx.sample_id,
            use_cache=ctx.use_cache,
            stage="rollout",
            metadata={"qa_item": {"id": item.id, "task_type": item.task_type, "answers": golds}},
        )
        completion = await ctx.completer.complete(request)
        prediction = extract_answer(completion.text)
        return qa_result(
            item,
            prediction,
            lines=[
                f"Model reply: {completion.text.strip()[:600]}",
                f"Extracted answer: {prediction!r}",
            ],
        )


def qa_result(
    item: EnvItem,
    prediction: str,
    *,
    lines: Sequence[str],
    no_answer: str = "",
    extras: Mapping[str, Any] | None = None,
) -> RolloutResult:
    """One QA rollout's result, however it was answered (a model call, an agent CLI): exact
    match and token F1 of ``prediction`` against the item's answers, why it failed
    (``no_answer``: the reply held no answer, and why), and the trajectory the optimizer
    reads: the question, ``lines`` (what the attempt showed), the verification."""
    golds = [str(a) for a in item.data["answers"]]
    hard = exact_match(prediction, golds)
    soft = token_f1(prediction, golds)
    if hard:
        fail_reason = ""
    elif no_answer:
        fail_reason = f"no_answer: {no_answer}"
    else:
        fail_reason = f"EM=0: predicted {prediction!r}, expected {golds!r}"
    trajectory = "\n".join(
        [
            f"Question: {item.data['question']}",
            *lines,
            f"Verification: EM={hard:.0f} F1={soft:.2f} gold={golds!r}",
        ]
    )
    return RolloutResult(
        task_id=item.id,
        hard=hard,
        soft=soft,
        task_type=item.task_type,
        reason=fail_reason,
        response=prediction,
        trajectory=trajectory,
        extras=dict(extras or {}),
    )
