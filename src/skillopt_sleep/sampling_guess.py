"""How tonight's target samples, as the config says it before any call: noisy or consistent.

A model whose answers to the same prompt differ makes a night several times dearer (its
edits need more samples to be judged), and before the first rollouts nothing measured
says which kind of model tonight's is. The config does:

1. **Per target member** (:func:`sampling_guess`): an HTTP member sends its target-role
   ``temperature`` (``request`` settings, :mod:`skillopt.backends.http.request_settings`; an
   ``extra_body`` temperature is the one sent, as it is merged in last): 0 samples greedily
   (consistent); above 0, or unset (the provider's default, above 0), it samples (noisy).
   An agent CLI and a hand-off agent sample at their own settings (noisy). The mock model
   is noisy when its ``flip`` option flips a share of its answers, else consistent.
2. **The role**: noisy when any target member is (the pool spreads the attempts across
   them), consistent when every one is; what the guess rests on is said in a short phrase
   ("m0 sampled at temperature 0.7").
"""

from __future__ import annotations

from dataclasses import dataclass

from skillopt.backends.base import Role
from skillopt.config import (
    AzureChatMember,
    AzureResponsesMember,
    MemberConfig,
    MockMember,
    OpenAIChatMember,
    OpenAIResponsesMember,
    PoolConfig,
)

__all__ = ["CONSISTENT", "NOISY", "SamplingGuess", "sampling_guess"]

CONSISTENT, NOISY = "consistent", "noisy"


@dataclass(frozen=True, slots=True)
class SamplingGuess:
    """Tonight's target, consistent or noisy by its config, and why (a short phrase)."""

    kind: str  # CONSISTENT | NOISY
    why: str


def sampling_guess(pool: PoolConfig | None) -> SamplingGuess | None:
    """What the target role's members' sampling settings say; None without a pool."""
    if pool is None:
        return None
    by_name = {m.name: m for m in pool.members}
    said: dict[tuple[str, str], list[str]] = {}  # (kind, how it samples) -> member names
    for name in pool.roles.target:
        member = by_name.get(name)
        if member is not None:
            said.setdefault(_member_sampling(member), []).append(name)
    if not said:
        return None
    kind = NOISY if any(k == NOISY for k, _ in said) else CONSISTENT
    why = "; ".join(f"{', '.join(names)}{how}" for (k, how), names in said.items() if k == kind)
    return SamplingGuess(kind=kind, why=why)


def _member_sampling(member: MemberConfig) -> tuple[str, str]:
    """(consistent | noisy, how the member samples its target answers: the words after
    its name)."""
    if isinstance(member, MockMember):
        flip = float(member.options.get("flip", 0.0) or 0.0)
        if flip > 0:
            return NOISY, f": a mock model flipping {flip:.0%} of its answers"
        return CONSISTENT, ": a mock model flipping no answer"
    if member.kind == "handoff":
        return NOISY, ": your own agent, at its own sampling settings"
    if not isinstance(
        member, OpenAIChatMember | OpenAIResponsesMember | AzureChatMember | AzureResponsesMember
    ):  # an agent CLI: no temperature reaches it
        return NOISY, f": a {member.kind} CLI, at its own sampling settings"
    fields = member.request.for_role(Role.TARGET)
    temperature = fields.temperature
    if isinstance(fields.extra_body.get("temperature"), int | float):  # merged in last: it wins
        temperature = float(fields.extra_body["temperature"])
    if temperature is None:
        return NOISY, " at the provider's default temperature"
    top_p = f", top_p {fields.top_p:g}" if fields.top_p is not None and temperature else ""
    return (
        NOISY if temperature > 0 else CONSISTENT
    ), f" sampled at temperature {temperature:g}{top_p}"
