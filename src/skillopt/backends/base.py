"""The request and reply types of a model call, and the one :class:`Completer` protocol.

A :class:`Completer` turns one :class:`CompletionRequest` into one :class:`Completion` or
raises a :class:`skillopt.errors.BackendError`. Everything that answers model calls is one:
a pool member (:class:`Backend`, which adds a name, a model and ``aclose``), the backend pool
and the wrappers stacked on it (:class:`Pool`, which adds the pool's diagnostics and
capacity; see :mod:`skillopt.backends.wrappers` and :mod:`skillopt.backends.open`).
Members never retry; the pool is the only retry layer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "EARLIER_PROBLEM",
    "Backend",
    "Completer",
    "Completion",
    "CompletionRequest",
    "Message",
    "Pool",
    "ReplySchema",
    "Role",
    "SpendMeter",
    "Usage",
]


#: ``metadata`` key of a request that asks again because the reply to an earlier one could
#: not be used: why (a handoff member shows it where the user looks for their answers).
EARLIER_PROBLEM = "earlier_problem"


class Role(StrEnum):
    TARGET = "target"  # attempts / rollouts: the model the skill is deployed on
    OPTIMIZER = "optimizer"  # reflect, judge, mine, merge, rank


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    role: str  # "system" | "user" | "assistant"
    content: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplySchema:
    """The JSON schema a reply must follow, named (OpenAI's ``json_schema.name``).

    Built from the pydantic model that validates the reply
    (:func:`skillopt.replies.reply_schema`), in the strict form structured outputs take:
    every object closed, every property required. Members that accept a schema send it
    (HTTP ``response_format``, ``claude --json-schema``, ``codex --output-schema``); the
    reply is still parsed leniently by the same model.
    """

    name: str
    schema: dict[str, Any] = field(compare=False)
    # The same schema with the string lengths the parser keeps (``maxLength``), or None when
    # it bounds none: a grammar-constrained server (llama.cpp, vLLM, Ollama) ends a string
    # there, so a small model's run-on sentence cannot carry the reply past its token cap.
    # Strict hosted APIs may refuse the keyword: only HTTP members send it, first, and fall
    # back to ``schema`` where it is refused (:mod:`skillopt.backends.http.structured`).
    bounded: dict[str, Any] | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class CompletionRequest:
    """One model call.

    Either ``messages`` or ``prompt`` (a single user message) is given. ``sample_id``
    distinguishes deliberately repeated samples of the same prompt (K dream rollouts)
    so the cache keeps them apart. ``stage`` tags accounting ("rollout", "reflect", ...).
    ``metadata`` carries structured hints some members use (the mock's world model,
    the exec harness's workspace); HTTP members ignore it. ``reply_schema`` is the shape
    a reply has, asked for by the members that take a schema. ``check_reply`` validates the
    reply text (raising :class:`skillopt.errors.ReplyFormatError` when it is unusable):
    the pool then treats the reply as a failed call, retried like one and never cached.
    ``check_answer`` is the same for an answer written by hand (a handoff member): where a
    model's unusable reply is asked again with a note, a person's is refused with the
    reason, to be written again.
    """

    role: Role
    prompt: str = ""
    messages: tuple[Message, ...] = ()
    system: str = ""
    system_intro: str = ""  # default intro before ``system``; a system_prompt setting replaces it
    max_output_tokens: int = 2048
    sample_id: int = 0
    timeout: float | None = None
    stage: str = "other"
    use_cache: bool = True
    json_mode: bool = False
    reply_schema: ReplySchema | None = None  # the reply's shape, where it has one
    metadata: dict[str, Any] = field(default_factory=dict)
    # Told of every request the pool sends for this call, retries included (see SpendMeter)
    meters: tuple[SpendMeter, ...] = field(default=(), compare=False)
    check_reply: Callable[[str], object] | None = field(default=None, compare=False)
    check_answer: Callable[[str], object] | None = field(default=None, compare=False)

    def system_message(self) -> str:
        """The system text as sent by default: the intro, then ``system``."""
        return "\n\n".join(p for p in (self.system_intro, self.system) if p)

    def as_messages(self, system: str | None = None) -> tuple[Message, ...]:
        """The conversation to send: the system text (``system`` replaces the default, when
        given), then messages or the prompt."""
        out: list[Message] = []
        text = self.system_message() if system is None else system
        if text:
            out.append(Message(role="system", content=text))
        if self.messages:
            out.extend(self.messages)
        else:
            out.append(Message(role="user", content=self.prompt))
        return tuple(out)

    def text_for_key(self) -> str:
        """A canonical text of the whole request content, for cache keys and estimates."""
        return "\n\x1e".join(f"{m.role}\x1f{m.content}" for m in self.as_messages())


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    estimated: bool = False  # True when counted as len/4, not reported by the API
    # Part of ``prompt_tokens`` the provider served from its prompt cache (cheaper, faster):
    # OpenAI's ``prompt_tokens_details.cached_tokens``, Anthropic's ``cache_read_input_tokens``.
    cached_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def plus(self, other: Usage) -> Usage:
        """Both usages together (estimated when either part was)."""
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            estimated=self.estimated or other.estimated,
            cached_tokens=self.cached_tokens + other.cached_tokens,
        )

    @staticmethod
    def estimate(prompt: str, completion: str) -> Usage:
        return Usage(
            prompt_tokens=max(1, len(prompt) // 4) if prompt else 0,
            completion_tokens=max(1, len(completion) // 4) if completion else 0,
            estimated=True,
        )


class SpendMeter(Protocol):
    """What a budget above the pool learns of one call: each request the pool sends for it.

    The pool calls :meth:`check` on every meter of the request, then :meth:`sent` on every
    one, right before each request goes out (the first and every retry), and
    :meth:`settled` when that request ended, with the usage its reply reported (a reply
    rejected as unusable included; None when no reply came) and the failure's class ("" for
    the answer the call returns). :meth:`opened` says a pool meters this call, so a
    wrapper above counts nothing itself. A cap is a cap: :meth:`check` raises
    :class:`skillopt.errors.BudgetExceededError` and the request is not sent.
    """

    def opened(self) -> None: ...

    def check(self, request: CompletionRequest) -> None: ...

    def sent(self, request: CompletionRequest) -> None: ...

    def settled(self, *, member: str, usage: Usage | None, error: str) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Completion:
    text: str
    usage: Usage
    member: str
    latency: float  # seconds spent in the successful attempt
    attempts: int = 1  # attempts the pool made, including failed ones on other members
    # usage of every request the call made (unusable replies the pool retried included);
    # None: the same as ``usage``
    spent: Usage | None = None
    cached: bool = False
    tools_called: tuple[str, ...] = ()  # verified from a shim log, never the model's claim
    raw: dict[str, Any] = field(default_factory=dict)  # member-specific extras (finish reason)


@runtime_checkable
class Completer(Protocol):
    """Anything that turns a request into a completion: a member, the pool, a wrapper."""

    async def complete(self, request: CompletionRequest) -> Completion: ...


@runtime_checkable
class Backend(Completer, Protocol):
    """A pool member: one endpoint, one CLI, or the mock."""

    @property
    def name(self) -> str: ...

    @property
    def model(self) -> str: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class Pool(Completer, Protocol):
    """The backend pool, or a wrapper stacked on it: a completer that also reports the
    pool's accounting and how many calls of a role can be in flight at once."""

    def accounting(self) -> dict[str, Any]: ...

    def total_concurrency(self, role: Role) -> int: ...
