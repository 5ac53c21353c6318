"""Which models a night scores with, and the advisory when they changed since last night.

A score measures the documents *and* the models that ran them, so a night's score is not
comparable with the last night's once the target or optimizer model changed. The key
names the models per role (``kind:model`` of each member, sorted); the project state
keeps the last night's key; the night's report, log and ``status`` warn when they differ.
"""

from __future__ import annotations

from skillopt.config import PoolConfig

__all__ = ["model_advisory", "model_key"]

ROLES = ("target", "optimizer")


def model_key(pool: PoolConfig | None) -> str:
    """``target=a,b;optimizer=c``; "" when no pool is configured."""
    if pool is None:
        return ""
    by_name = {m.name: m for m in pool.members}
    parts = []
    for role in ROLES:
        models = set()
        for name in getattr(pool.roles, role):
            member = by_name.get(name)
            if member is not None:
                models.add(f"{member.kind}:{getattr(member, 'model', None) or 'default'}")
        parts.append(f"{role}={','.join(sorted(models))}")
    return ";".join(parts)


def model_advisory(previous: str, current: str) -> str:
    """The warning when the models changed since the last night ("" when not)."""
    if not previous or not current or previous == current:
        return ""
    return (
        f"the models changed since the last night ({previous} -> {current}): tonight's "
        "scores are not comparable with earlier nights'"
    )
