"""Documents that agree with themselves: a night's edits applied to the skill and the memory
together, so no rule is staged twice and no replaced rule survives in the other document.

Reflection writes one document at a time, with the other shown to it. Applied one document
at a time, its edits could leave the pair contradicting itself: a rule added to the skill
that the memory already holds, a ``replace`` whose old line lives in the memory (the
skill has no such line, the edit is lost, and the reflection's ``add`` of the new rule
stands beside the old one). :func:`apply_learned` applies each edit to its target's
learned block and:

1. **Duplicates.** An ``add`` whose line the other document's learned block already holds
   is a duplicate (unmatched, as one inside the same block is); a ``replace`` whose new
   line the block holds merges into it (:func:`skillopt.skilldoc.apply_edits`).
2. **Stale lines elsewhere.** A ``replace`` or ``delete`` whose anchor matches no learned
   line of its target but one of the other document's changes that line there; one that
   matches in both also removes the other document's copies of the old line (the new line
   is written once, in the target).

Every trial of the night applies edits through here, so the gate measures exactly the
documents that would be staged: the resolution is a gated edit like any other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from skillopt.skilldoc import (
    ApplyStatus,
    EditApplication,
    EditMode,
    EditOutcome,
    apply_edits,
    learned_bullets,
    near_duplicate_key,
)
from skillopt.types import EditOp, EditRecord, EditTarget
from skillopt_sleep.replay import Docs

__all__ = ["apply_learned"]

_ADDS = frozenset({EditOp.ADD.value, EditOp.APPEND.value, EditOp.INSERT_AFTER.value})
_CHANGES = frozenset({EditOp.REPLACE.value, EditOp.DELETE.value})


def _other(target: EditTarget) -> EditTarget:
    return EditTarget.MEMORY if target is EditTarget.SKILL else EditTarget.SKILL


def apply_learned(
    docs: Docs, edits: Sequence[EditRecord], target: EditTarget
) -> tuple[Docs, EditApplication]:
    """``edits`` applied in order, each to its own target's learned block, the other
    document kept in agreement (see the module docstring). The application's text is
    ``target``'s."""
    texts = {EditTarget.SKILL: docs.skill, EditTarget.MEMORY: docs.memory}
    outcomes: list[EditOutcome] = []
    for index, edit in enumerate(edits):
        outcome = _apply_one(texts, edit, edit.target, _other(edit.target))
        outcomes.append(replace(outcome, index=index))
    out = Docs(skill=texts[EditTarget.SKILL], memory=texts[EditTarget.MEMORY])
    return out, EditApplication(text=texts[target], outcomes=tuple(outcomes))


def _apply_one(
    texts: dict[EditTarget, str], edit: EditRecord, target: EditTarget, other: EditTarget
) -> EditOutcome:
    op = edit.op.strip().lower()
    if op in _ADDS and _holds(texts[other], edit.content):
        return EditOutcome(index=0, edit=edit, status=ApplyStatus.UNMATCHED,
                           reason="duplicate_in_other_document")  # fmt: skip
    app = apply_edits(texts[target], [edit], mode=EditMode.LEARNED)
    outcome = app.outcomes[0]
    if op not in _CHANGES:
        if outcome.status is ApplyStatus.APPLIED:
            texts[target] = app.text
        return outcome
    if outcome.status is ApplyStatus.APPLIED:
        texts[target] = app.text
        if edit.anchor.strip():  # the old line's copies in the other document go too
            gone = apply_edits(texts[other], [replace(edit, op=EditOp.DELETE.value)],
                               mode=EditMode.LEARNED)  # fmt: skip
            if gone.outcomes[0].status is ApplyStatus.APPLIED:
                texts[other] = gone.text
                return replace(outcome, reason=f"{outcome.reason}_both_documents")
        return outcome
    if outcome.reason != "anchor_not_found":
        return outcome
    there = apply_edits(texts[other], [edit], mode=EditMode.LEARNED)
    moved = there.outcomes[0]
    if moved.status is not ApplyStatus.APPLIED:
        return outcome
    if op == EditOp.REPLACE.value and _holds(texts[target], edit.content):
        # the target holds the new line already: the old one just goes
        there = apply_edits(texts[other], [replace(edit, op=EditOp.DELETE.value)],
                            mode=EditMode.LEARNED)  # fmt: skip
    texts[other] = there.text
    return replace(moved, reason=f"{moved.reason}_other_document")


def _holds(text: str, line: str) -> bool:
    key = near_duplicate_key(line.strip().removeprefix("- ").removeprefix("* "))
    return bool(key) and any(near_duplicate_key(b) == key for b in learned_bullets(text))
