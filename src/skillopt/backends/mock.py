"""A deterministic world model that stands in for a real model, with no network.

The world is a table of *rules*. A task needs some rules (its ``rule:<key>`` tags, or the
rules whose trigger words occur in its intent). An attempt succeeds iff the text of every
rule it needs is present in the skill or memory it was given; a compliant answer carries
each rule's marker. One rule is *harmful*: it is helpful for the task that asks for it and
breaks every other task, so the gate has something real to reject.

``flip`` (a member option) makes a noisy model: that share of answers comes out with the
opposite outcome, decided by a hash of the call and ``flip_seed``.

The mock reads structured hints from ``request.metadata`` (``stage``, ``task``, ``skill``,
``memory``, ``response``, ``failures``, ``target``, ``edit_budget``); the prompt text is
only used for token estimates. It behaves like any other member behind the pool: it
returns :class:`Completion` objects and raises :class:`BackendError` subclasses.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from skillopt.backends.base import Completion, CompletionRequest, Usage
from skillopt.errors import BackendRequestError, ConfigError, RetryableBackendError

__all__ = ["DEFAULT_RULES", "MockBackend", "MockRule", "World", "build_mock_member"]


@dataclass(frozen=True, slots=True, kw_only=True)
class MockRule:
    """One rule of the world: what the skill must say and what compliance looks like."""

    key: str
    text: str
    marker: str
    triggers: tuple[str, ...] = ()
    home: str = "skill"  # where reflection proposes it: "skill" or "memory"
    harmful: bool = False


DEFAULT_RULES: tuple[MockRule, ...] = (
    MockRule(
        key="cite",
        text="When pointing at code, cite it as path:line so the user can jump to it.",
        marker="[ref src/app.py:42]",
        triggers=("where", "which file", "locate", "find the"),
    ),
    MockRule(
        key="tests",
        text="Run the test suite and state the result before calling a change finished.",
        marker="[tests: 12 passed]",
        triggers=("fix", "bug", "failing", "broken"),
    ),
    MockRule(
        key="changelog",
        text="This project records every user-visible change in CHANGELOG.md.",
        marker="[changelog updated]",
        triggers=("release", "feature", "rename", "option"),
        home="memory",
    ),
    MockRule(
        key="commits",
        text="Commit messages follow Conventional Commits: type(scope): summary.",
        marker="[commit: fix(core): summary]",
        triggers=("commit",),
    ),
    MockRule(
        key="terse",
        text="Keep every answer to one bare line: no references, no test notes, no extras.",
        marker="[one line]",
        triggers=("one-liner", "one liner"),
        harmful=True,
    ),
)

_RULE_TAG = "rule:"
_WS = re.compile(r"\s+")


def _norm(text: str) -> str:
    return _WS.sub(" ", text).strip().lower()


def _tagged_keys(task: Mapping[str, Any]) -> list[str]:
    tags = task.get("tags") or []
    return [str(t)[len(_RULE_TAG) :] for t in tags if str(t).startswith(_RULE_TAG)]


@dataclass(frozen=True, slots=True, kw_only=True)
class World:
    """The rule table plus the pure functions that decide outcomes."""

    rules: tuple[MockRule, ...] = DEFAULT_RULES

    def rule(self, key: str) -> MockRule | None:
        return next((r for r in self.rules if r.key == key), None)

    def required(self, task: Mapping[str, Any]) -> list[MockRule]:
        """Rules a task needs: its ``rule:`` tags, else the rules its intent triggers."""
        tagged = _tagged_keys(task)
        if tagged:
            return [r for k in tagged if (r := self.rule(k)) is not None]
        intent = _norm(str(task.get("intent", "")))
        return [r for r in self.rules if any(t in intent for t in r.triggers)]

    def present(self, docs: Iterable[str]) -> set[str]:
        """Keys of the rules whose text appears in any of ``docs``."""
        joined = _norm("\n".join(docs))
        return {r.key for r in self.rules if _norm(r.text) in joined}

    def answer(self, task: Mapping[str, Any], skill: str, memory: str, sample_id: int) -> str:
        """The attempt's answer: the marker of each needed rule the model follows."""
        needed = self.required(task)
        present = self.present((skill, memory))
        harmful_on = any(r.harmful and r.key in present for r in self.rules)
        needs_harmful = any(r.harmful for r in needed)
        intent = " ".join(str(task.get("intent", "")).split())[:80]
        if harmful_on and not needs_harmful:
            return f"Done: {intent}."
        parts = [f"Done: {intent}."]
        for rule in needed:
            if rule.key in present or _lucky(str(task.get("id", "")), rule.key, sample_id):
                parts.append(rule.marker)
        return " ".join(parts)

    def flipped(self, task: Mapping[str, Any], answer: str) -> str:
        """The opposite outcome: a compliant answer loses its markers, a failing one gains
        every marker the task needs (a noisy model is sometimes right by luck)."""
        needed = self.required(task)
        intent = " ".join(str(task.get("intent", "")).split())[:80]
        if needed and all(r.marker in answer for r in needed):
            return f"Done: {intent}."
        return " ".join([f"Done: {intent}.", *(r.marker for r in needed)])

    def judge(self, task: Mapping[str, Any], response: str) -> tuple[float, str]:
        """Score = fraction of the needed markers present in ``response``."""
        needed = self.required(task)
        if not needed:
            return 1.0, "no requirements for this task"
        missing = [r for r in needed if r.marker not in response]
        score = (len(needed) - len(missing)) / len(needed)
        if not missing:
            return score, "every requirement met"
        return score, "missing: " + ", ".join(r.key for r in missing)

    def proposals(
        self,
        failures: Sequence[Mapping[str, Any]],
        *,
        skill: str,
        memory: str,
        target: str,
        budget: int,
    ) -> list[dict[str, str]]:
        """Edits reflection proposes: the missing rules of the failures, plus the harmful one.

        The harmful rule rides along whenever good skill edits are proposed (an over-eager
        generalisation a real optimizer also makes), so the gate and edit attribution can be
        seen separating them.
        """
        present = self.present((skill, memory))
        wanted: list[MockRule] = []
        for task in failures:
            for rule in self.required(task):
                if rule.key not in present and rule not in wanted and not rule.harmful:
                    wanted.append(rule)
        chosen = [r for r in wanted if r.home == target]
        if target == "skill" and chosen:
            chosen.extend(r for r in self.rules if r.harmful and r.key not in present)
        edits = [
            {
                "op": "add",
                "content": r.text,
                "anchor": "",
                "rationale": f"failing tasks need the {r.key} rule",
            }
            for r in chosen
        ]
        return edits[: max(0, budget)]


def _lucky(task_id: str, key: str, sample_id: int) -> bool:
    """Deterministic spread between samples: sample >0 sometimes follows a rule unasked."""
    if sample_id <= 0:
        return False
    digest = hashlib.sha256(f"{task_id}\x1f{key}\x1f{sample_id}".encode()).digest()
    return digest[0] % 3 == 0


class MockBackend:
    """A pool member backed by :class:`World`. ``latency`` simulates a slow endpoint."""

    def __init__(
        self,
        *,
        name: str = "mock",
        model: str = "mock-world",
        world: World | None = None,
        latency: float = 0.0,
        fail_stages: Iterable[str] = (),
        flip: float = 0.0,
        flip_seed: int = 0,
    ) -> None:
        self._name = name
        self._model = model
        self.world = world or World()
        self.latency = latency
        self.fail_stages = frozenset(fail_stages)
        self.flip = flip
        self.flip_seed = flip_seed
        self.calls = 0

    @property
    def name(self) -> str:
        return self._name

    @property
    def model(self) -> str:
        return self._model

    async def aclose(self) -> None:
        return None

    async def complete(self, request: CompletionRequest) -> Completion:
        started = time.monotonic()
        self.calls += 1
        meta = request.metadata
        stage = str(meta.get("stage") or request.stage)
        if stage in self.fail_stages or "*" in self.fail_stages:
            raise RetryableBackendError(
                "mock member configured to fail", kind="server", member=self._name, status=503
            )
        if self.latency > 0:
            await anyio.sleep(self.latency)
        text = self._reply(stage, meta, request.sample_id)
        prompt = request.text_for_key()
        return Completion(
            text=text,
            usage=Usage.estimate(prompt, text),
            member=self._name,
            latency=time.monotonic() - started,
            raw={"stage": stage},
        )

    def _reply(self, stage: str, meta: Mapping[str, Any], sample_id: int) -> str:
        task = meta.get("task") or {}
        skill = str(meta.get("skill", ""))
        memory = str(meta.get("memory", ""))
        if stage in {"attempt", "rollout", "baseline", "trial", "final", "test"}:
            if not isinstance(task, Mapping):
                raise BackendRequestError("mock attempt needs metadata.task", member=self._name)
            answer = self.world.answer(task, skill, memory, sample_id)
            if self._flipped(task, skill, memory, sample_id):
                return self.world.flipped(task, answer)
            return answer
        if stage == "judge":
            score, reason = self.world.judge(task, str(meta.get("response", "")))
            return json.dumps({"score": score, "reason": reason})
        if stage in {"reflect", "reflect_contrastive"}:
            failures = meta.get("failures") or []
            edits = self.world.proposals(
                failures,
                skill=skill,
                memory=memory,
                target=str(meta.get("target", "skill")),
                budget=int(meta.get("edit_budget", 4)),
            )
            return json.dumps(edits)
        if stage == "mine":  # the mock world has no recurring request: no session yields a task
            labels = meta.get("labels") or ()
            return json.dumps({"sessions": [{"session": str(x), "tasks": []} for x in labels]})
        return "ok"

    def _flipped(self, task: Mapping[str, Any], skill: str, memory: str, sample_id: int) -> bool:
        """A noisy model: this share of answers comes out flipped, decided by a hash of the
        call (so a run is reproducible and another ``flip_seed`` is another night's luck)."""
        if self.flip <= 0:
            return False
        key = "\x1f".join(
            [str(self.flip_seed), str(task.get("id", "")), skill, memory, str(sample_id)]
        )
        digest = hashlib.sha256(key.encode()).digest()
        return int.from_bytes(digest[:4], "big") / 2**32 < self.flip


_MOCK_OPTIONS = frozenset({"latency", "fail_stages", "flip", "flip_seed"})


def build_mock_member(cfg: Any) -> MockBackend:
    """Build the mock from a member config (the pool's ``kind = "mock"`` entry).

    Reads ``name`` and ``model``; ``latency`` (seconds) and ``fail_stages`` (stage names,
    or ``"*"``) come from the member's ``options`` table or attributes of the same name.
    """
    options: dict[str, Any] = dict(getattr(cfg, "options", None) or {})
    name = str(getattr(cfg, "name", None) or "mock")
    unknown = sorted(set(options) - _MOCK_OPTIONS)
    if unknown:  # a typo ("latncy") must not silently give a different world
        raise ConfigError(
            f"unknown mock option {unknown[0]!r} (known: {', '.join(sorted(_MOCK_OPTIONS))})",
            key=f"members.{name}.options.{unknown[0]}",
        )
    latency = options.get("latency", getattr(cfg, "latency", 0.0))
    fail_stages = options.get("fail_stages", getattr(cfg, "fail_stages", ()))
    return MockBackend(
        name=name,
        model=str(getattr(cfg, "model", None) or "mock-world"),
        latency=float(latency or 0.0),
        fail_stages=tuple(str(s) for s in (fail_stages or ())),
        flip=float(options.get("flip", 0.0)),
        flip_seed=int(options.get("flip_seed", 0)),
    )
