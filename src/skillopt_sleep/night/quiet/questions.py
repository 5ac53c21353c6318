"""When two measurements ask the same question, so one's answers stand for the other's.

A sample's verdict is determined by the task as the target and the judge see it
(:func:`task_hash`), the documents it ran under (:attr:`.replay.Docs.key`), the models and
the settings that change an answer or its verdict (:func:`answer_key`), and its sample id.
Anything else (concurrency, timeouts, which key pays) changes no answer and is left out;
anything that might is kept in, so a change there makes earlier answers a different
question rather than a stale answer to this one.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from skillopt import __version__
from skillopt.config import PoolConfig
from skillopt.prompts import load_prompt
from skillopt.types import TaskRecord
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.harvest import SELF_MARKER
from skillopt_sleep.replay import ATTEMPT_TOKENS, RUBRIC_PASS, clean, mined_checks

__all__ = ["answer_key", "task_hash"]

# Member settings that decide how a call is made, never what it answers.
_OPERATIONAL = frozenset(
    {
        "max_concurrency",
        "requests_per_minute",
        "timeout",
        "token_timeout",
        "max_reply_bytes",
        "api_key_env",
        "provider_key_env",
        "auth",
    }
)
_TEMPLATES = ("attempt", "judge")  # the prompts an answer and its verdict come from


def _digest(data: Any) -> str:
    body = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(body.encode()).hexdigest()[:24]


def task_hash(task: TaskRecord) -> str:
    """The task as the target's prompt and the judge see it (its id and provenance aside)."""
    return _digest(
        {
            "intent": clean(task.intent),
            "context": clean(task.context),
            "reference": clean(task.reference),
            "kind": task.reference_kind.value,
            "checks": [c.to_dict() for c in task.checks],
            "tags": [clean(t) for t in task.tags],
            "system": clean(task.system_contract),
            # a miner's checks let the model judge have the last word (replay.mined_checks)
            **({"checks_then_judge": True} if mined_checks(task) else {}),
        }
    )


def _members(pool: PoolConfig, role: str) -> list[dict[str, Any]]:
    by_name = {m.name: m for m in pool.members}
    chosen = [by_name[n] for n in getattr(pool.roles, role) if n in by_name]
    return sorted(
        (
            {k: v for k, v in m.model_dump(mode="json").items() if k not in _OPERATIONAL}
            for m in chosen
        ),
        key=lambda d: json.dumps(d, sort_keys=True, default=str),
    )


def answer_key(cfg: SleepConfig) -> str:
    """The target and judge models with their request settings, the prompts (and the
    release that fills them and judges the replies), and how a verdict becomes a score;
    "" when the pool is not configured (nothing can be known to be the same model, so
    nothing is reused)."""
    if cfg.pool is None:
        return ""
    gate = cfg.gate
    return _digest(
        {
            "target": _members(cfg.pool, "target"),
            "judge": _members(cfg.pool, "optimizer"),
            "prompts": [load_prompt(name) for name in _TEMPLATES],
            "version": __version__,  # how prompts are filled and replies judged
            "marker": SELF_MARKER,
            "attempt_tokens": ATTEMPT_TOKENS,
            "rubric_pass": RUBRIC_PASS,
            "score": [gate.metric, gate.mixed_weight],
        }
    )
