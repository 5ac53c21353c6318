"""The trainer's demo world (:class:`skillopt.trainer.demo.DemoWorld`) served over HTTP: a
reply function for the fake model server, for the trainer tests that run over loopback.

HTTP members see only the messages, so a QA attempt is told by its exact user prompt (the
demo items, looked up by prompt) and an optimizer call by the stage its first user message
names. One home for this; the sleep world over HTTP is :mod:`support.world_http`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from skillopt.trainer.demo import DemoWorld, infer_stage
from skillopt.trainer.envs.base import Environment, EnvItem
from skillopt.trainer.envs.qa import QAEnvironment
from skillopt.types import Split
from support.fake_model_server import Request

Items = dict[str, dict[str, Any]]  # user prompt -> the item, as DemoWorld.chat_reply reads it
Reshape = Callable[[str, Request], str]  # (the world's reply, the request) -> the reply sent


def demo_items(
    env: Environment | None = None,
    *,
    as_item: Callable[[EnvItem], dict[str, Any]] = lambda item: dict(item.data),
) -> Items:
    """Every item of ``env`` (the QA demo's by default), over all splits, by its prompt."""
    source = QAEnvironment() if env is None else env
    return {
        QAEnvironment.user_prompt(item): as_item(item)
        for split in Split
        for item in source.items(split)
    }


def first_user(request: Request) -> str:
    """The request's first user message (where our templates name the stage)."""
    messages = request.body.get("messages", [])
    return str(next((m["content"] for m in messages if m["role"] == "user"), ""))


def stage_of(request: Request, items: Mapping[str, object]) -> str:
    """``"target"`` for a QA attempt (its prompt is one of ``items``), else the stage."""
    return "target" if request.user_text in items else infer_stage(first_user(request))


def demo_reply_fn(
    reshape: Reshape | None = None, *, stage: str = "analyst", items: Items | None = None
) -> Callable[[Request], str]:
    """The demo world's replies (over ``items``, the QA demo's by default), those at
    ``stage`` passed through ``reshape``."""
    world = DemoWorld()
    known = demo_items() if items is None else items

    def reply(request: Request) -> str:
        messages = request.body.get("messages", [])
        system = "".join(
            str(m["content"]) for m in messages if m["role"] in ("system", "developer")
        )
        text = world.chat_reply(system=system, user=request.user_text, items=known)
        if reshape is not None and stage_of(request, known) == stage:
            return reshape(text, request)
        return text

    return reply
