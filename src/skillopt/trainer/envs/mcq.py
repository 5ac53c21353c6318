"""``mcq``: multiple-choice questions (LiveMathematicianBench style) answered by a chat model.

Items: ``{id, question, choices: [...], answer}`` where ``answer`` is the gold option's
letter in the file's order or its text (``answer_index``, 0-based, also works, and so does
the mapped ``answers`` field, e.g. ``[env.data.fields] answers = "label"``); optional
``context`` and ``task_type`` (default ``mcq``). Items load through
:mod:`skillopt.trainer.dataset` (``[env.data]``: one file or three, JSONL or a JSON array,
ratio split, manifests, field mapping). Each attempt sees the options shuffled by
a permutation seeded with ``(seed, item id, sample id)`` (:mod:`skillopt.trainer.scorers.
choice`), and results record the letter chosen in the file's order (``response``, and
``extras.chosen_original``). Options: ``shuffle`` (default true), ``seed`` (default the
run's ``train.seed``). The bundled sample (``envs/data/mcq_sample``) is used when
``env.data_dir`` is empty.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from skillopt.backends.base import CompletionRequest, Role
from skillopt.errors import ConfigError
from skillopt.trainer.dataset import DataSection, SplitItems, bundled, load_splits, requiring
from skillopt.trainer.envs.base import EnvItem, RolloutContext, RolloutResult
from skillopt.trainer.scorers.choice import Presentation, present, render_options, score_choice

__all__ = ["MCQEnvironment", "answer_index", "check_mcq_item"]

_SYSTEM = """You answer multiple-choice questions.

# Skill
{skill}

Think it through, then finish with the letter of your choice inside <answer></answer> tags."""

_CONTEXT_CHARS = 4000


def answer_index(item: Mapping[str, Any]) -> int:
    """The gold option's index in the file's order; ValueError names the bad field."""
    choices = item.get("choices")
    if (
        not isinstance(choices, list)
        or not 2 <= len(choices) <= 26
        or not all(isinstance(c, str) and c.strip() for c in choices)
    ):
        raise ValueError("'choices' must be a list of 2 to 26 non-empty strings")
    if "answer_index" in item:
        index = item["answer_index"]
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(choices):
            raise ValueError(f"'answer_index' must be an integer from 0 to {len(choices) - 1}")
        return index
    answer = item.get("answer")
    mapped = item.get("answers")
    if answer is None and isinstance(mapped, list) and len(mapped) == 1:
        answer = mapped[0]
    if not isinstance(answer, str) or not answer.strip():
        raise ValueError(
            "needs 'answer' (the gold option's letter or text), 'answer_index' or one 'answers'"
        )
    text = answer.strip()
    letters = [chr(ord("A") + i) for i in range(len(choices))]
    if text.upper().strip("()") in letters and len(text.strip("()")) == 1:
        return letters.index(text.upper().strip("()"))
    matches = [i for i, c in enumerate(choices) if c.strip() == text]
    if len(matches) != 1:
        raise ValueError(f"'answer' {answer!r} is neither an option letter nor one option's text")
    return matches[0]


def check_mcq_item(item: Mapping[str, Any]) -> str:
    if not isinstance(item.get("question"), str) or not item["question"].strip():
        raise ValueError("'question' must be a non-empty string")
    answer_index(item)
    return str(item.get("task_type") or "mcq")


class MCQEnvironment(SplitItems):
    """Multiple choice with seeded per-sample shuffling and robust letter extraction."""

    def __init__(
        self,
        data_dir: str | Path = "",
        *,
        limit: int = 0,
        seed: int = 0,
        shuffle: bool = True,
        data: DataSection | None = None,
    ) -> None:
        spec = requiring(data, "question", "choices")
        splits = load_splits(
            data_dir, spec, default_dir=bundled("mcq_sample"), limit=limit, check=check_mcq_item
        )
        super().__init__(splits)
        self._seed = seed
        self._shuffle = shuffle

    @classmethod
    def from_options(
        cls,
        data_dir: str,
        *,
        limit: int,
        options: Mapping[str, Any],
        default_seed: int,
        data: DataSection | None = None,
    ) -> MCQEnvironment:
        unknown = sorted(set(options) - {"shuffle", "seed"})
        if unknown:
            raise ConfigError(f"unknown option {unknown[0]!r} (mcq reads shuffle, seed)",
                              key=f"env.options.{unknown[0]}")  # fmt: skip
        shuffle, seed = options.get("shuffle", True), options.get("seed", default_seed)
        if not isinstance(shuffle, bool):
            raise ConfigError("must be true or false", key="env.options.shuffle")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ConfigError("must be an integer", key="env.options.seed")
        return cls(data_dir, limit=limit, seed=seed, shuffle=shuffle, data=data)

    @property
    def name(self) -> str:
        return "mcq"

    def presentation(self, item: EnvItem, sample_id: int) -> Presentation:
        return present(
            item.data["choices"],
            seed=self._seed,
            item_id=item.id,
            sample_id=sample_id,
            shuffle=self._shuffle,
        )

    @staticmethod
    def user_prompt(item: EnvItem, presentation: Presentation) -> str:
        context = str(item.data.get("context") or "")[:_CONTEXT_CHARS]
        head = f"Context:\n{context}\n\n" if context else ""
        options = render_options(presentation)
        return f"{head}Question: {item.data['question']}\n\nOptions:\n{options}"

    async def rollout(self, item: EnvItem, skill: str, ctx: RolloutContext) -> RolloutResult:
        shown = self.presentation(item, ctx.sample_id)
        gold = answer_index(item.data)
        request = CompletionRequest(
            role=Role.TARGET,
            system=_SYSTEM.format(skill=skill.strip() or "(no skill yet)"),
            prompt=self.user_prompt(item, shown),
            max_output_tokens=ctx.max_output_tokens,
            timeout=ctx.timeout_s,
            sample_id=ctx.sample_id,
            use_cache=ctx.use_cache,
            stage="rollout",
            # what the offline demo model reads (HTTP members ignore metadata)
            metadata={
                "qa_item": {
                    "id": item.id,
                    "task_type": "mcq",
                    "answers": [shown.presented_letter(gold)],
                }
            },
        )
        completion = await ctx.completer.complete(request)
        verdict = score_choice(completion.text, shown, gold)
        trajectory = "\n".join(
            [
                f"Question: {item.data['question']}",
                "Options as shown:",
                render_options(shown),
                f"Model reply: {completion.text.strip()[:600]}",
                f"Verification: {verdict.check}",
            ]
        )
        return verdict.result(
            item, response=str(verdict.extras["chosen_original"]), trajectory=trajectory
        )
