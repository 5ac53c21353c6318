"""``chat``: single-turn questions scored by the scorer the config names.

Items: ``{id, question, context?, task_type?}`` plus what the scorer reads: ``answers`` (or
``answer``) for ``exact`` / ``em`` / ``f1`` / ``numeric``, ``pattern`` for ``regex``
(unless the scorer table has one), ``rubric`` (a text or a list of criteria) for
``rubric``, judged by the optimizer role. Items load through :mod:`skillopt.trainer.dataset`
(``[env.data]``) and each is checked there, so a missing field is an error naming the file,
the line and the field. The prompt is the
``qa`` environment's; the scorer defaults to ``em``. The bundled sample
(``envs/data/rubric_sample``, used when ``env.data_dir`` is empty) is rubric-judged: its
items also carry a ``reference`` answer, which only the offline demo model reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from skillopt.backends.base import CompletionRequest, Role
from skillopt.errors import ConfigError, DataError
from skillopt.trainer.dataset import (
    DataSection,
    ItemCheck,
    SplitItems,
    bundled,
    data_root,
    load_splits,
    requiring,
)
from skillopt.trainer.envs.base import EnvItem, RolloutContext, RolloutResult
from skillopt.trainer.envs.qa import QAEnvironment, extract_answer
from skillopt.trainer.scorers.base import ScoreContext, Scorer
from skillopt.trainer.scorers.registry import ScorerSettings, build_scorer, scorer_settings
from skillopt.trainer.scorers.rubric import rubric_of
from skillopt.trainer.scorers.text import golds_of

__all__ = ["ChatEnvironment", "item_check"]


def item_check(settings: ScorerSettings) -> ItemCheck:
    """The load-time check of an item for ``settings``' scorer."""

    def check(item: Mapping[str, Any]) -> str:
        if not isinstance(item.get("question"), str) or not item["question"].strip():
            raise ValueError("'question' must be a non-empty string")
        try:
            if settings.kind == "rubric":
                rubric_of(item)
            elif settings.kind == "regex":
                pattern = item.get("pattern", settings.pattern)
                if not isinstance(pattern, str) or not pattern:
                    raise ValueError("needs a 'pattern' (or the scorer table's pattern)")
            else:
                golds_of(item)
        except DataError as exc:
            raise ValueError(str(exc)) from None
        return str(item.get("task_type") or "chat")

    return check


class ChatEnvironment(SplitItems):
    """One reply per item, scored by a configured scorer."""

    def __init__(
        self,
        data_dir: str | Path = "",
        *,
        limit: int = 0,
        options: Mapping[str, Any],
        data: DataSection | None = None,
    ) -> None:
        unknown = sorted(set(options) - {"scorer"})
        if unknown:
            raise ConfigError(f"unknown option {unknown[0]!r} (chat reads scorer)",
                              key=f"env.options.{unknown[0]}")  # fmt: skip
        settings = scorer_settings(options, default="em")
        if settings.kind == "program":
            raise ConfigError(
                "the program scorer checks a workspace: use the exec_check environment",
                key="env.options.scorer.kind",
            )
        spec = requiring(data, "question")
        default = bundled("rubric_sample")
        check = item_check(settings)
        super().__init__(load_splits(data_dir, spec, default_dir=default, limit=limit, check=check))
        root = data_root(data_dir, spec, default)
        self._scorer: Scorer = build_scorer(settings, data_dir=str(root))

    @property
    def name(self) -> str:
        return "chat"

    async def rollout(self, item: EnvItem, skill: str, ctx: RolloutContext) -> RolloutResult:
        golds = item.data.get("answers") or [item.data.get("answer", item.data.get("reference"))]
        request = CompletionRequest(
            role=Role.TARGET,
            system=QAEnvironment.system_prompt(skill),
            prompt=QAEnvironment.user_prompt(item),
            max_output_tokens=ctx.max_output_tokens,
            timeout=ctx.timeout_s,
            sample_id=ctx.sample_id,
            use_cache=ctx.use_cache,
            stage="rollout",
            # what the offline demo model reads (HTTP members ignore metadata)
            metadata={"qa_item": {"id": item.id, "task_type": item.task_type,
                                  "answers": [str(g) for g in golds]}},
        )  # fmt: skip
        completion = await ctx.completer.complete(request)
        verdict = await self._scorer.score(
            completion.text,
            item.data,
            ScoreContext(completer=ctx.completer, timeout_s=ctx.timeout_s),
        )
        trajectory = "\n".join(
            [
                f"Question: {item.data['question']}",
                f"Model reply: {completion.text.strip()[:600]}",
                f"Verification: {verdict.check}",
            ]
        )
        return verdict.result(item, response=extract_answer(completion.text), trajectory=trajectory)
