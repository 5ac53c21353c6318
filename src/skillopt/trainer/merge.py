"""Hierarchical merge of analyst patches: per side in groups, then one final merge.

Patches are merged level by level: consecutive groups of ``group_size`` become one patch each
(a lone patch passes through), until one remains. Groups of a level run concurrently and their
results are placed by group index, so the outcome depends only on the replies, never on which
call finished first. A merge call that fails (``None``) falls back to the concatenation of its
group's edits, tagged with the level.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from skillopt.concurrency import gather_indexed
from skillopt.trainer.replies import EditItem, SourceType

__all__ = ["MergeCall", "MergeOutcome", "hierarchical_merge", "merge_sides"]

# (group of patches, level, side or None for the final merge) -> merged edits, or None on failure
MergeCall = Callable[
    [Sequence[Sequence[EditItem]], int, SourceType | None], Awaitable[list[EditItem] | None]
]


@dataclass(frozen=True, slots=True, kw_only=True)
class MergeOutcome:
    edits: tuple[EditItem, ...]
    calls: int
    fallbacks: int
    depth: int = 0  # merge levels on the longest chain (sequential calls)


def _tag(edits: Sequence[EditItem], level: int) -> list[EditItem]:
    return [e if e.merge_level else e.model_copy(update={"merge_level": level}) for e in edits]


async def _merge_groups(
    groups: Sequence[Sequence[Sequence[EditItem]]],
    level: int,
    side: SourceType,
    merge: MergeCall,
) -> list[list[EditItem] | None]:
    """One merge call per group of two or more patches, concurrently (None for a lone one)."""

    async def run(index: int) -> list[EditItem] | None:
        group = groups[index]
        return await merge(group, level, side) if len(group) > 1 else None

    return await gather_indexed(run, len(groups))


async def hierarchical_merge(
    patches: Sequence[Sequence[EditItem]],
    *,
    side: SourceType,
    group_size: int,
    merge: MergeCall,
) -> MergeOutcome:
    """Merge one side's patches down to a single edit list."""
    level_patches = [list(p) for p in patches if p]
    calls = fallbacks = 0
    if not level_patches:
        return MergeOutcome(edits=(), calls=0, fallbacks=0)
    size = max(2, group_size)
    level = 0
    while len(level_patches) > 1:
        level += 1
        groups = [level_patches[i : i + size] for i in range(0, len(level_patches), size)]
        calls += sum(1 for group in groups if len(group) > 1)
        merged = await _merge_groups(groups, level, side, merge)
        next_level: list[list[EditItem]] = []
        for group, result in zip(groups, merged, strict=True):
            if len(group) == 1:
                next_level.append(group[0])
            elif result is None:
                fallbacks += 1
                next_level.append(_tag([e for p in group for e in p], level))
            else:
                next_level.append(_tag(result, level))
        level_patches = next_level
    return MergeOutcome(
        edits=tuple(level_patches[0]), calls=calls, fallbacks=fallbacks, depth=level
    )


async def merge_sides(
    failure: Sequence[Sequence[EditItem]],
    success: Sequence[Sequence[EditItem]],
    *,
    group_size: int,
    merge: MergeCall,
) -> MergeOutcome:
    """Merge each side, then combine them (failure first) with one final call."""
    sides = ((SourceType.FAILURE, failure), (SourceType.SUCCESS, success))

    async def side_task(index: int) -> MergeOutcome:
        side, patches = sides[index]
        return await hierarchical_merge(patches, side=side, group_size=group_size, merge=merge)

    f, s = await gather_indexed(side_task, len(sides))
    calls, fallbacks = f.calls + s.calls, f.fallbacks + s.fallbacks
    depth = max(f.depth, s.depth)
    if not f.edits or not s.edits:
        return MergeOutcome(edits=f.edits or s.edits, calls=calls, fallbacks=fallbacks, depth=depth)
    final = await merge([list(f.edits), list(s.edits)], 0, None)
    if final is None:
        return MergeOutcome(
            edits=f.edits + s.edits, calls=calls + 1, fallbacks=fallbacks + 1, depth=depth + 1
        )
    return MergeOutcome(edits=tuple(final), calls=calls + 1, fallbacks=fallbacks, depth=depth + 1)
