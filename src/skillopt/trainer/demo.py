"""A deterministic offline world model for the bundled QA set: target and optimizer in one.

Target: answers a QA item correctly only when the skill (in the system prompt) carries the
formatting rule of the item's task type; otherwise it makes that type's characteristic format
mistake. A skill that tells it to restate the question breaks every answer. Optimizer: reads
the trainer's prompts (the tagged sections) and proposes those rules for failing task types;
its success analyst proposes the harmful "restate" rule unless the prompt shows it was
rejected before, which is how a demo run shows the gate rejecting an edit.

It implements the Backend protocol so it can serve both roles of a run (``kind = "demo"``)
or sit behind a real pool. Replies depend only on the request, never on call order.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import anyio

from skillopt.backends.base import Completion, CompletionRequest, Role, Usage

__all__ = ["ENV_RULES", "HARMFUL_RULE", "RULES", "DemoWorld", "infer_stage"]


@dataclass(frozen=True, slots=True, kw_only=True)
class _Rule:
    phrase: str  # what the target looks for in its skill (lower case)
    text: str  # the rule the optimizer proposes
    mistake: str  # how the target answers without the rule ({a} = the gold answer)


RULES: dict[str, _Rule] = {
    "count": _Rule(
        phrase="bare number",
        text="When the answer is a quantity, reply with the bare number, without words or units.",
        mistake="roughly {a} in total",
    ),
    "year": _Rule(
        phrase="four-digit year",
        text="When asked when something happened, give only the four-digit year.",
        mistake="sometime around {a}",
    ),
    "person": _Rule(
        phrase="full name",
        text="When the answer is a person, give the person's full name as written in the context.",
        mistake="{last}",
    ),
    "yesno": _Rule(
        phrase="single word yes or no",
        text="For a yes/no question, answer with the single word yes or no.",
        mistake="{a}, I believe so",
    ),
    "place": _Rule(
        phrase="place name alone",
        text="When the answer is a place, give the place name alone, with no description.",
        mistake="{a}, a place mentioned in the text",
    ),
}

#: Rules of the other bundled environments' items (by the task type the target is told).
ENV_RULES: dict[str, _Rule] = {
    "mcq": _Rule(
        phrase="work out the answer",
        text="For a multiple-choice question, work out the answer yourself first, then pick "
        "the option that matches it; never default to the first option.",
        mistake="A",  # position bias: without the rule the demo target always picks A
    ),
    "explain": _Rule(
        phrase="name the cause",
        text="When asked why something happens, name the cause and how it works, in one or "
        "two sentences.",
        mistake="{last}",  # a bare last word, which misses most of the rubric
    ),
    "csv_report": _Rule(
        phrase="header row",
        text="When writing a CSV file, start it with a header row naming the columns "
        "(for per-group totals: the group column, then total).",
        mistake="{rest}",  # the file without its header line
    ),
}
_RULES_BY_TYPE = {**RULES, **ENV_RULES}

HARMFUL_RULE = (
    "Always restate the question in a full sentence before giving the answer, "
    "so the reader sees the reasoning."
)
_HARMFUL_PHRASE = "restate the question"

_TAG = r"<{0}[^>]*>\n?(.*?)\n?</{0}>"


def _section(text: str, tag: str) -> str:
    match = re.search(_TAG.format(tag), text, re.DOTALL)
    return match.group(1) if match else ""


def infer_stage(prompt: str) -> str:
    """Which optimizer prompt this is, from the tagged sections our templates use."""
    for marker, stage in (
        ("<trajectories>", "analyst"),
        ("<patches", "merge"),
        ("<skill_candidates", "merge"),
        ("<candidates>", "rank"),
        ("<proposed_edits", "lr_autonomous"),
        ("<suggestions>", "rewrite"),
        ("slow_update_content", "slow_update"),
        ("meta_skill_content", "meta_skill"),
        ("<rubric>", "judge"),
    ):
        if marker in prompt:
            return stage
    return "other"


def _json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True)


class DemoWorld:
    """Backend for both roles; ``latency_s`` simulates a model's response time."""

    def __init__(self, *, latency_s: float = 0.0, name: str = "demo") -> None:
        self._latency = latency_s
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    @property
    def model(self) -> str:
        return "demo-world"

    async def aclose(self) -> None:
        return None

    async def complete(self, request: CompletionRequest) -> Completion:
        if self._latency:
            await anyio.sleep(self._latency)
        text = self._answer(request) if request.role is Role.TARGET else self._optimize(request)
        prompt = request.text_for_key()
        return Completion(
            text=text, usage=Usage.estimate(prompt, text), member=self._name, latency=self._latency
        )

    # -- target ---------------------------------------------------------------------------

    @staticmethod
    def _answer(request: CompletionRequest) -> str:
        item = request.metadata.get("qa_item")
        if not isinstance(item, dict):
            return "<answer>unknown</answer>"
        gold = str(item["answers"][0])
        skill = request.system.lower()
        rule = _RULES_BY_TYPE.get(str(item["task_type"]))
        if _HARMFUL_PHRASE in skill:
            answer = f"The question asks this, and the answer is {gold}"
        elif rule is None or rule.phrase in skill:
            answer = gold
        else:
            rest = "\n".join(gold.splitlines()[1:])
            answer = rule.mistake.format(a=gold, last=gold.split()[-1], rest=rest)
        return f"Reading the context.\n<answer>{answer}</answer>"

    def chat_reply(self, *, system: str, user: str, items: Mapping[str, Mapping[str, Any]]) -> str:
        """The reply to a plain chat request (e.g. behind an HTTP fake server, where no
        metadata travels): a QA attempt is recognised by its exact user prompt, looked up in
        ``items`` (user prompt -> item); anything else is an optimizer prompt."""
        item = items.get(user)
        if item is not None:
            meta = {"id": item["id"], "task_type": item["task_type"], "answers": item["answers"]}
            request = CompletionRequest(
                role=Role.TARGET, system=system, prompt=user, metadata={"qa_item": meta}
            )
            return self._answer(request)
        return self._optimize(
            CompletionRequest(role=Role.OPTIMIZER, prompt=user, stage=infer_stage(user))
        )

    # -- optimizer ------------------------------------------------------------------------

    def _optimize(self, request: CompletionRequest) -> str:
        prompt = request.as_messages()[0].content if request.messages else request.prompt
        handler = {
            "analyst": self._analyst,
            "merge": self._merge,
            "rank": self._rank,
            "lr_autonomous": self._budget,
            "rewrite": self._rewrite,
            "slow_update": self._slow_update,
            "meta_skill": self._meta_skill,
            "judge": self._judge,
        }.get(request.stage)
        if handler is None:
            return _json({"reasoning": "unknown stage"})
        return handler(prompt)

    @staticmethod
    def _analyst(prompt: str) -> str:
        skill = _section(prompt, "skill").lower()
        trajectories = _section(prompt, "trajectories")
        types = re.findall(r"^Task type: (\S+)$", trajectories, re.MULTILINE)
        failing = re.findall(r"^Outcome: FAIL$", trajectories, re.MULTILINE)
        edits: list[dict[str, str]] = []
        patterns: list[dict[str, Any]] = []
        if failing:
            counts = Counter(types)
            for task_type, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
                rule = _RULES_BY_TYPE.get(task_type)
                patterns.append({"label": task_type, "count": count, "description": task_type})
                if rule is not None and rule.phrase not in skill:
                    edits.append({"op": "append", "target": "", "content": rule.text})
        elif _HARMFUL_PHRASE not in prompt.lower():
            edits.append({"op": "append", "target": "", "content": HARMFUL_RULE})
        patch: dict[str, Any] = {"reasoning": "demo analyst", "edits": edits}
        if "skill_candidates" in prompt:  # full-rewrite mode: one whole skill
            base = _section(prompt, "skill").strip()
            body = "" if base == "(empty)" else base
            patch = {"reasoning": "demo analyst", "skill_candidates": []}
            if edits:
                lines = (
                    [body, *(e["content"] for e in edits)]
                    if body
                    else [e["content"] for e in edits]
                )
                patch["skill_candidates"] = [
                    {"title": "demo", "change_summary": [], "new_skill": "\n".join(lines)}
                ]
        return _json({"batch_size": len(types), "patterns": patterns, "patch": patch})

    @staticmethod
    def _merge(prompt: str) -> str:
        if "<skill_candidates" in prompt:  # full-rewrite mode: union of the candidates' lines
            candidates = json.loads(_section(prompt, "skill_candidates"))
            ordered = sorted(candidates, key=lambda c: c["source_type"] != "success")
            lines: list[str] = []
            for candidate in ordered:
                lines += [ln for ln in candidate["new_skill"].splitlines() if ln not in lines]
            return _json(
                {
                    "reasoning": "demo merge",
                    "skill_candidates": [{"title": "merged", "new_skill": "\n".join(lines)}],
                }
            )
        patches = json.loads(_section(prompt, "patches"))
        merged: dict[str, dict[str, Any]] = {}
        for patch in patches:
            for edit in patch["edits"]:
                key = edit["content"]
                if key in merged:
                    merged[key]["support_count"] += edit.get("support_count", 1)
                else:
                    merged[key] = dict(edit)
        ordered = sorted(merged.values(), key=lambda e: e["source_type"] != "success")
        return _json({"reasoning": "demo merge", "edits": ordered})

    @staticmethod
    def _rank(prompt: str) -> str:
        budget = int(re.search(r"At most (\d+)", prompt).group(1))  # type: ignore[union-attr]
        return _json({"reasoning": "demo rank", "selected_indices": list(range(budget))})

    @staticmethod
    def _budget(prompt: str) -> str:
        n = int(re.search(r'<proposed_edits count="(\d+)">', prompt).group(1))  # type: ignore[union-attr]
        return _json({"learning_rate": f"{max(1, n - 1)} edits", "reasoning": "demo"})

    @staticmethod
    def _rewrite(prompt: str) -> str:
        skill = _section(prompt, "skill").rstrip()
        lines = [line[2:] for line in _section(prompt, "suggestions").splitlines() if line]
        body = "\n".join(f"- {line.split(': ', 1)[-1]}" for line in lines)
        return _json(
            {"reasoning": "demo", "change_summary": lines, "new_skill": f"{skill}\n{body}"}
        )

    @staticmethod
    def _slow_update(prompt: str) -> str:
        return _json(
            {
                "reasoning": "demo",
                "slow_update_content": "- Copy the answer's exact wording from the context.",
            }
        )

    @staticmethod
    def _judge(prompt: str) -> str:
        """A rubric line is met when the answer holds every term it quotes."""
        answer = _section(prompt, "answer").lower()
        lines = [ln.lstrip("- ").strip() for ln in _section(prompt, "rubric").splitlines()]
        met = {
            ln: all(t.lower() in answer for t in re.findall(r'"([^"]+)"', ln)) for ln in lines if ln
        }
        criteria = [{"criterion": ln, "met": ok} for ln, ok in met.items()]
        score = sum(met.values()) / max(len(met), 1)
        return _json({"criteria": criteria, "score": score, "reasoning": "demo judge"})

    @staticmethod
    def _meta_skill(prompt: str) -> str:
        return _json(
            {"reasoning": "demo", "meta_skill_content": "- Prefer narrow formatting rules."}
        )
