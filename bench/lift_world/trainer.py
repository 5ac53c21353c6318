"""The lift world as a trainer benchmark: an environment over its 24 tasks and the model's
answers to the trainer's prompts.

Every task is one item per split, each split a different wording of it (train: the first,
val: the second, test: the third), so the trainer's optimizer reads train attempts and its
gate measures the same recurring tasks asked another way, as a user would ask them again.
An attempt is graded by :meth:`World.grade` (no judge call): ``hard`` 1 when every needed
convention shows, ``soft`` the share that does.

:class:`TrainerModel` answers the trainer's prompts over HTTP with :class:`WorldModel`:
an attempt (the skill is the system prompt) goes to the world's target; an analyst prompt
becomes the world's reflection over its failed attempts (the same proposals, most-supported
first, the bait's harmful rule first when a bait task failed at length), in the analyst's
reply shape; merge concatenates the patches (each edit once), rank keeps the first ones.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from lift_world.model import WorldModel
from lift_world.world import LIFT, World
from skillopt.backends.base import CompletionRequest, Role
from skillopt.trainer.envs.base import EnvItem, RolloutContext
from skillopt.types import RolloutResult, Split

__all__ = ["LiftTrainerEnv", "TrainerModel"]

_WORDING = {Split.TRAIN: 0, Split.VAL: 1, Split.TEST: 2}
_BLOCK = re.compile(r"^### Attempt \d+ \(id=[^)]*\)\n", re.M)


class LiftTrainerEnv:
    """The 24 lift tasks, one wording per split, graded by the world's own rule."""

    def __init__(self, world: World = LIFT) -> None:
        self.world = world

    @property
    def name(self) -> str:
        return "lift"

    def items(self, split: Split) -> Sequence[EnvItem]:
        k = _WORDING[split]
        return [
            EnvItem(id=f"{t.id}.{k}", task_type="lift", data={"question": t.variants[k]})
            for t in self.world.tasks
        ]

    def task_types(self) -> list[str]:
        return ["lift"]

    async def rollout(self, item: EnvItem, skill: str, ctx: RolloutContext) -> RolloutResult:
        question = str(item.data["question"])
        request = CompletionRequest(
            role=Role.TARGET,
            system=skill.strip() or "(no skill yet)",
            prompt=question,
            max_output_tokens=ctx.max_output_tokens,
            timeout=ctx.timeout_s,
            sample_id=ctx.sample_id,
            use_cache=ctx.use_cache,
            stage="rollout",
        )
        answer = (await ctx.completer.complete(request)).text
        task = self.world.find_task(question)
        assert task is not None, question
        share, missing = self.world.grade(task, answer)
        hard = 1.0 if not missing else 0.0
        reason = "; ".join(missing)
        trajectory = f"Task: {question}\nAnswer: {answer.strip()[:600]}\nCheck: {reason or 'ok'}"
        return RolloutResult(
            task_id=item.id,
            task_type="lift",
            hard=hard,
            soft=share,
            reason=reason,
            response=answer,
            trajectory=trajectory,
        )


def _between(text: str, tag: str) -> str:
    m = re.search(rf"<{tag}[^>]*>\n?(.*?)\n?</{tag}>", text, re.S)
    return m.group(1) if m else ""


class TrainerModel:
    """The fake server's reply function for a trainer run on the lift world."""

    def __init__(self, model: WorldModel) -> None:
        self.model = model

    def reply(self, request: Any) -> str:
        body = request.body if isinstance(request.body, dict) else {}
        messages = body.get("messages", [])
        system = "".join(
            str(m.get("content", "")) for m in messages if m.get("role") in ("system", "developer")
        )
        user = str(request.user_text)
        if "<trajectories>" in user:
            return self._analyst(user)
        if "<patches" in user:
            return self._merge(user)
        if "<candidates>" in user:
            return self._rank(user)
        return self.model.answer(f"# Skill\n\n{system}\n\n# Task\n\n{user}")

    def _analyst(self, prompt: str) -> str:
        trajectories = _between(prompt, "trajectories")
        failed = [b for b in _BLOCK.split(trajectories) if "Outcome: FAIL" in b]
        budget = re.search(r"at most (\d+) edits", prompt)
        text = (
            f"# Skill\n\n{_between(prompt, 'skill')}\n\n"
            f"# Failed tasks\n\n{chr(10).join(failed) or '(none)'}\n\n"
            f"Propose at most {budget.group(1) if budget else 4} edits."
        )
        proposals = json.loads(self.model.answer(text)) if failed else []
        edits = [{"op": "append", "target": "", "content": e["content"]} for e in proposals]
        return json.dumps(
            {
                "batch_size": trajectories.count("### Attempt"),
                "patterns": [],
                "patch": {"reasoning": "failed attempts", "edits": edits},
                "appendix_notes": [],
            }
        )

    def _merge(self, prompt: str) -> str:
        patches = json.loads(_between(prompt, "patches") or "[]")
        seen: dict[str, dict[str, Any]] = {}
        for patch in patches:
            for e in patch.get("edits", []):
                seen.setdefault(str(e.get("content", "")), e)
        return json.dumps({"reasoning": "each edit once", "edits": list(seen.values())})

    def _rank(self, prompt: str) -> str:
        budget = re.search(r"at most (\d+)", prompt, re.I)
        k = int(budget.group(1)) if budget else 1
        return json.dumps({"reasoning": "first ones", "selected_indices": list(range(k))})
