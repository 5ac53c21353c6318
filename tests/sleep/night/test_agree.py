"""Documents that agree with themselves: the night's edits keep the skill and the memory
free of a rule twice and of an old rule beside the one that replaced it (the issue's
cases: an ``add`` and a ``replace`` of the date rule in one night; a new commit rule in
SKILL.md while the old one stayed in CLAUDE.md)."""

from __future__ import annotations

from skillopt.skilldoc import EditMode, apply_edits, learned_bullets
from skillopt.types import EditRecord, EditTarget
from skillopt_sleep.night.learn.agree import apply_learned
from skillopt_sleep.replay import Docs

OLD_DATE = "Write every date as ISO-8601, for example 2025-03-04."
NEW_DATE = "Write every date as DD/MM/YYYY, for example 04/03/2025."
OLD_COMMIT = "Write commit subjects as Conventional Commits (feat: ..., fix: ...)."
NEW_COMMIT = "Start every commit subject with the ticket id, e.g. SHOP-123: ..."
SKILL, MEMORY = EditTarget.SKILL, EditTarget.MEMORY


def _doc(title: str, *lines: str) -> str:
    text = f"# {title}\n\nHand-written notes.\n"
    edits = [EditRecord(op="add", content=line) for line in lines]
    return apply_edits(text, edits, mode=EditMode.LEARNED).text


def _lines(docs: Docs) -> list[str]:
    return [*learned_bullets(docs.skill), *learned_bullets(docs.memory)]


def test_an_add_and_a_replace_of_one_rule_leave_it_once() -> None:
    docs = Docs(skill=_doc("skill", OLD_DATE, "Run the checks."), memory=_doc("memory"))
    edits = [
        EditRecord(op="add", content=NEW_DATE),
        EditRecord(op="replace", anchor="iso-8601", content=NEW_DATE),
    ]
    out, app = apply_learned(docs, edits, SKILL)
    assert _lines(out) == ["Run the checks.", NEW_DATE]
    assert [o.reason for o in app.outcomes] == ["applied_append", "applied_replace_merged"]


def test_a_replace_of_a_line_that_lives_in_the_other_document_changes_it_there() -> None:
    docs = Docs(skill=_doc("skill", "Run the checks."), memory=_doc("memory", OLD_COMMIT))
    out, app = apply_learned(
        docs, [EditRecord(op="replace", anchor="conventional commits", content=NEW_COMMIT)], SKILL
    )
    assert learned_bullets(out.memory) == (NEW_COMMIT,)
    assert learned_bullets(out.skill) == ("Run the checks.",)
    assert app.applied and app.outcomes[0].reason == "applied_replace_other_document"


def test_a_replace_whose_new_line_the_target_holds_removes_the_old_one_elsewhere() -> None:
    docs = Docs(skill=_doc("skill", NEW_COMMIT), memory=_doc("memory", OLD_COMMIT, "Be brief."))
    out, _ = apply_learned(
        docs, [EditRecord(op="replace", anchor="conventional commits", content=NEW_COMMIT)], SKILL
    )
    assert _lines(out) == [NEW_COMMIT, "Be brief."]


def test_a_replace_in_one_document_takes_the_old_lines_copy_out_of_the_other() -> None:
    docs = Docs(skill=_doc("skill", OLD_COMMIT), memory=_doc("memory", OLD_COMMIT, "Be brief."))
    out, app = apply_learned(
        docs, [EditRecord(op="replace", anchor="conventional commits", content=NEW_COMMIT)], SKILL
    )
    assert _lines(out) == [NEW_COMMIT, "Be brief."]
    assert app.outcomes[0].reason == "applied_replace_both_documents"


def test_an_add_of_a_rule_the_other_document_holds_is_a_duplicate() -> None:
    docs = Docs(skill=_doc("skill"), memory=_doc("memory", NEW_DATE))
    out, app = apply_learned(docs, [EditRecord(op="add", content=f"- {NEW_DATE.upper()}")], SKILL)
    assert out == docs and not app.applied
    assert app.outcomes[0].reason == "duplicate_in_other_document"


def test_an_edit_that_matches_nowhere_is_unmatched_and_changes_nothing() -> None:
    docs = Docs(skill=_doc("skill", "Run the checks."), memory=_doc("memory", "Be brief."))
    out, app = apply_learned(docs, [EditRecord(op="delete", anchor="no such line")], MEMORY)
    assert out == docs and app.outcomes[0].reason == "anchor_not_found"
