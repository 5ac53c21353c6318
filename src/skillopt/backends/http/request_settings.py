"""Request settings of an HTTP member, per member and per role.

A member's ``[members.request]`` table sets what every call it answers sends; its
``target`` and ``optimizer`` sub-tables override them for calls of that role (a sampling
temperature for the target's attempts, a greedy optimizer). The same member config serves the
night and the trainer, so both send the same settings. The settings of the role are part of
the response cache key (:func:`request_signature`): a reply drawn at another temperature, or
under another system prompt, never answers for this one.

- ``system_prompt``: the target's instructions. A request that carries a default intro
  (``CompletionRequest.system_intro``, e.g. the QA environment's "You answer short factual
  questions.") has it replaced; any other request gets it before its own system text. Unset:
  the request's system message as it is.
- ``temperature``, ``top_p``, ``reasoning_effort``: sent as the API names them (chat:
  ``reasoning_effort``; Responses: ``reasoning.effort``).
- ``max_output_tokens``: the output cap sent, in place of the caller's.
- ``extra_body``: merged into the request body last (e.g. a vLLM server's
  ``chat_template_kwargs``).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from skillopt.backends.base import CompletionRequest, Role

__all__ = ["RequestFields", "RequestSettings", "request_signature"]

ReasoningEffort = Literal["none", "minimal", "low", "medium", "high"]


class RequestFields(BaseModel):
    """What one call sends beyond its messages; unset fields leave the API's default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    system_prompt: str | None = Field(default=None, min_length=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    max_output_tokens: int | None = Field(default=None, ge=1)
    reasoning_effort: ReasoningEffort | None = None
    extra_body: dict[str, Any] = Field(default_factory=dict)

    def merged(self, override: RequestFields | None) -> RequestFields:
        """``override``'s set fields over these; ``extra_body`` merged key by key."""
        if override is None:
            return self
        values = self.model_dump(exclude={"extra_body"})
        values.update(override.model_dump(exclude={"extra_body"}, exclude_none=True))
        return RequestFields(**values, extra_body={**self.extra_body, **override.extra_body})

    def system_text(self, request: CompletionRequest) -> str:
        """The system message to send for ``request``."""
        if self.system_prompt is None:
            return request.system_message()
        return "\n\n".join(p for p in (self.system_prompt, request.system) if p)


class RequestSettings(RequestFields):
    """A member's settings, with per-role overrides."""

    target: RequestFields | None = None
    optimizer: RequestFields | None = None

    def for_role(self, role: Role) -> RequestFields:
        base = RequestFields(**self.model_dump(exclude={"target", "optimizer"}))
        return base.merged(self.target if role is Role.TARGET else self.optimizer)


def request_signature(settings: RequestSettings, role: Role) -> str:
    """A canonical text of the settings ``role``'s calls send ("" when none are set)."""
    fields = settings.for_role(role)
    if fields == RequestFields():
        return ""
    return json.dumps(fields.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
