"""Skill documents: regions, edit ops and their statuses, byte preservation."""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skillopt.skilldoc import (
    ApplyStatus,
    EditMode,
    Region,
    append_notes,
    appendix_notes,
    apply_edits,
    carry_regions,
    content_hash,
    ensure_skill_scaffold,
    extract_region,
    extract_slow_update,
    inject_empty_slow_update,
    inject_region,
    learned_bullets,
    migrate_legacy_markers,
    migrate_on_read,
    region_spans,
    set_slow_update,
    strip_protected,
    strip_region,
)
from skillopt.types import EditRecord

BODY = "# Skill\n\nIntro line.\n- step one\n- step two\n"
SLOW = f"{Region.SLOW_UPDATE.start}\nslow guidance\n{Region.SLOW_UPDATE.end}\n"
APPX = f"{Region.APPENDIX.start}\n## Execution notes\n\n- note a\n{Region.APPENDIX.end}\n"
DOC = BODY + "\n" + APPX + "\n" + SLOW


def edit(op: str, content: str = "", anchor: str = "") -> EditRecord:
    return EditRecord(op=op, content=content, anchor=anchor)


def one_span_changed(old: str, new: str) -> tuple[int, int, int]:
    """(prefix, old_suffix_start, new_suffix_start): the single changed span."""
    p = 0
    while p < min(len(old), len(new)) and old[p] == new[p]:
        p += 1
    s = 0
    while s < min(len(old), len(new)) - p and old[-1 - s] == new[-1 - s]:
        s += 1
    return p, len(old) - s, len(new) - s


# ------------------------------------------------------------------ patch mode table

PATCH_CASES = [
    # (name, doc, edit, expected text, status, reason)
    (
        "append_end",
        BODY,
        edit("append", "Cite sources."),
        BODY + "\nCite sources.\n",
        ApplyStatus.APPLIED,
        "applied_append",
    ),
    (
        "add_alias",
        BODY,
        edit("ADD", "Cite sources."),
        BODY + "\nCite sources.\n",
        ApplyStatus.APPLIED,
        "applied_append",
    ),
    (
        "append_no_trailing_newline",
        "# S\nbody",
        edit("append", "x rule"),
        "# S\nbody\n\nx rule\n",
        ApplyStatus.APPLIED,
        "applied_append",
    ),
    (
        "append_before_region",
        DOC,
        edit("append", "New rule."),
        BODY + "\nNew rule.\n\n" + APPX + "\n" + SLOW,
        ApplyStatus.APPLIED,
        "applied_append_before_protected_region",
    ),
    (
        "append_duplicate",
        BODY,
        edit("append", "INTRO   line"),
        BODY,
        ApplyStatus.UNMATCHED,
        "duplicate",
    ),
    (
        "append_short_word_is_not_a_duplicate",
        BODY,
        edit("append", "step"),
        BODY + "\nstep\n",
        ApplyStatus.APPLIED,
        "applied_append",
    ),
    (
        "append_long_substring_duplicate",
        "# S\n\nAlways run the full test suite before you commit anything.\n",
        edit("append", "run the full test suite before you commit"),
        "# S\n\nAlways run the full test suite before you commit anything.\n",
        ApplyStatus.UNMATCHED,
        "duplicate",
    ),
    ("append_empty", BODY, edit("append", "  "), BODY, ApplyStatus.UNMATCHED, "empty_content"),
    (
        "insert_after",
        BODY,
        edit("insert_after", "- step one b", "step one"),
        "# Skill\n\nIntro line.\n- step one\n- step one b\n- step two\n",
        ApplyStatus.APPLIED,
        "applied_insert_after",
    ),
    (
        "insert_after_last_line_no_newline",
        "a\nb",
        edit("insert_after", "c", "b"),
        "a\nb\nc",
        ApplyStatus.APPLIED,
        "applied_insert_after",
    ),
    (
        "insert_after_fallback",
        BODY,
        edit("insert_after", "tail rule", "missing anchor"),
        BODY + "\ntail rule\n",
        ApplyStatus.APPLIED,
        "applied_insert_after_fallback_append",
    ),
    (
        "insert_after_fallback_before_region",
        DOC,
        edit("insert_after", "tail rule"),
        BODY + "\ntail rule\n\n" + APPX + "\n" + SLOW,
        ApplyStatus.APPLIED,
        "applied_insert_after_fallback_append_before_protected_region",
    ),
    (
        "replace_first_occurrence",
        "x\ny\nx\n",
        edit("replace", "z", "x"),
        "z\ny\nx\n",
        ApplyStatus.APPLIED,
        "applied_replace",
    ),
    (
        "replace_missing",
        BODY,
        edit("replace", "z", "nope"),
        BODY,
        ApplyStatus.UNMATCHED,
        "anchor_not_found",
    ),
    (
        "replace_no_anchor",
        BODY,
        edit("replace", "z"),
        BODY,
        ApplyStatus.UNMATCHED,
        "missing_anchor",
    ),
    (
        "delete_whole_line",
        BODY,
        edit("delete", anchor="- step one"),
        "# Skill\n\nIntro line.\n- step two\n",
        ApplyStatus.APPLIED,
        "applied_delete",
    ),
    (
        "delete_inline",
        "keep this word here\n",
        edit("delete", anchor=" word"),
        "keep this here\n",
        ApplyStatus.APPLIED,
        "applied_delete",
    ),
    (
        "delete_missing",
        BODY,
        edit("delete", anchor="zzz"),
        BODY,
        ApplyStatus.UNMATCHED,
        "anchor_not_found",
    ),
    ("unknown_op", BODY, edit("rewrite", "x", "y"), BODY, ApplyStatus.UNMATCHED, "unknown_op"),
    (
        "delete_inside_slow",
        DOC,
        edit("delete", anchor="slow guidance"),
        DOC,
        ApplyStatus.SKIPPED,
        "protected_region",
    ),
    (
        "replace_inside_appendix",
        DOC,
        edit("replace", "z", "note a"),
        DOC,
        ApplyStatus.SKIPPED,
        "protected_region",
    ),
    (
        "insert_after_inside_region",
        DOC,
        edit("insert_after", "z", "note a"),
        DOC,
        ApplyStatus.SKIPPED,
        "protected_region",
    ),
    (
        "replace_marker_itself",
        DOC,
        edit("replace", "", Region.SLOW_UPDATE.start),
        DOC,
        ApplyStatus.SKIPPED,
        "protected_region",
    ),
    (
        "anchor_line_runs_into_marker",
        "rule " + Region.LEARNED.start + "\n- x\n" + Region.LEARNED.end + "\n",
        edit("insert_after", "new", "rule"),
        "rule " + Region.LEARNED.start + "\n- x\n" + Region.LEARNED.end + "\n",
        ApplyStatus.SKIPPED,
        "protected_region",
    ),
]


@pytest.mark.parametrize(
    ("doc", "the_edit", "expected", "status", "reason"),
    [case[1:] for case in PATCH_CASES],
    ids=[case[0] for case in PATCH_CASES],
)
def test_patch_mode_ops(
    doc: str, the_edit: EditRecord, expected: str, status: ApplyStatus, reason: str
) -> None:
    result = apply_edits(doc, [the_edit], mode=EditMode.PATCH)
    assert result.text == expected
    assert [(o.status, o.reason) for o in result.outcomes] == [(status, reason)]


def test_content_markers_are_stripped() -> None:
    forged = f"{Region.SLOW_UPDATE.start} evil {Region.SLOW_UPDATE.end}"
    result = apply_edits(BODY, [edit("append", forged)])
    assert Region.SLOW_UPDATE.start not in result.text
    assert "evil" in result.text


def test_edits_apply_in_order_and_report_each() -> None:
    result = apply_edits(
        BODY,
        [
            edit("append", "Rule A."),
            edit("replace", "Rule B.", "Rule A."),
            edit("delete", anchor="nothing"),
            edit("zap"),
        ],
    )
    assert "Rule B." in result.text and "Rule A." not in result.text
    assert [o.index for o in result.outcomes] == [0, 1, 2, 3]
    assert len(result.applied) == 2
    assert len(result.unmatched) == 2
    assert result.skipped == ()


# ------------------------------------------------------------------ learned mode table


def learned_doc(*bullets: str) -> str:
    inner = "## Learned\n\n" + "".join(f"- {b}\n" for b in bullets)
    return BODY + "\n" + Region.LEARNED.start + "\n" + inner + Region.LEARNED.end + "\n"


LEARNED_CASES = [
    ("add_to_existing", learned_doc("a rule"), edit("add", "b rule"), ("a rule", "b rule")),
    ("add_duplicate", learned_doc("a rule"), edit("add", "A  Rule."), None),
    ("add_empty", learned_doc("a rule"), edit("add", ""), None),
    ("add_own_bullet_marker", learned_doc("a rule"), edit("add", "- b rule"), ("a rule", "b rule")),
    ("add_marked_duplicate", learned_doc("a rule"), edit("add", "* A rule."), None),
    ("replace_numbered", learned_doc("x"), edit("replace", "1. z", "x"), ("z",)),
    ("insert_after", learned_doc("a", "c"), edit("insert_after", "b", "a"), ("a", "b", "c")),
    ("insert_fallback", learned_doc("a", "c"), edit("insert_after", "b", "zz"), ("a", "c", "b")),
    (  # every matching line goes; the new one is written once (never a rule twice)
        "replace_each",
        learned_doc("use x", "y", "x again"),
        edit("replace", "z", "X"),
        ("z", "y"),
    ),
    (  # the block already holds the new line (an add of it came first): merged into it
        "replace_into_existing",
        learned_doc("dates as ISO-8601", "y", "dates as DD/MM/YYYY"),
        edit("replace", "Dates as DD/MM/YYYY.", "iso-8601"),
        ("y", "dates as DD/MM/YYYY"),
    ),
    ("replace_missing", learned_doc("a"), edit("replace", "z", "q"), None),
    ("replace_empty", learned_doc("a"), edit("replace", "", "a"), None),
    ("delete_matching", learned_doc("x1", "y", "x2"), edit("delete", anchor="x"), ("y",)),
    ("delete_by_content", learned_doc("x1", "y"), edit("delete", "Y"), ("x1",)),
    ("delete_missing", learned_doc("x1"), edit("delete", anchor="q"), None),
    ("delete_no_anchor", learned_doc("x1"), edit("delete"), None),
    ("unknown_op", learned_doc("x1"), edit("mutate", "x", "x1"), None),
]


@pytest.mark.parametrize(
    ("doc", "the_edit", "bullets"),
    [case[1:] for case in LEARNED_CASES],
    ids=[case[0] for case in LEARNED_CASES],
)
def test_learned_mode_ops(doc: str, the_edit: EditRecord, bullets: tuple[str, ...] | None) -> None:
    result = apply_edits(doc, [the_edit], mode=EditMode.LEARNED)
    if bullets is None:
        assert result.outcomes[0].status is ApplyStatus.UNMATCHED
        assert result.text == doc
    else:
        assert result.outcomes[0].status is ApplyStatus.APPLIED
        assert learned_bullets(result.text) == bullets
    # The hand-written body never changes.
    assert result.text.startswith(BODY + "\n" + Region.LEARNED.start)


def test_learned_mode_creates_block_before_other_regions() -> None:
    result = apply_edits(DOC, [edit("add", "be brief")], mode=EditMode.LEARNED)
    text = result.text
    assert learned_bullets(text) == ("be brief",)
    assert text.startswith(BODY)
    assert text.index(Region.LEARNED.end) < text.index(Region.APPENDIX.start)
    assert text.rstrip().endswith(Region.SLOW_UPDATE.end)
    assert strip_protected(text) == strip_protected(DOC)


def test_learned_mode_never_touches_body_text() -> None:
    doc = learned_doc("a")
    result = apply_edits(
        doc,
        [edit("delete", anchor="step one"), edit("replace", "q", "Intro")],
        mode=EditMode.LEARNED,
    )
    assert result.text == doc
    assert all(o.status is ApplyStatus.UNMATCHED for o in result.outcomes)


def test_learned_mode_on_empty_document() -> None:
    result = apply_edits("", [edit("add", "first")], mode=EditMode.LEARNED)
    assert learned_bullets(result.text) == ("first",)
    assert result.text.startswith(Region.LEARNED.start)


# ------------------------------------------------------------------ regions


def test_slow_update_replace_leaves_exactly_one_region_at_end() -> None:
    messy = f"{SLOW}middle\n{SLOW}{Region.SLOW_UPDATE.end}\ntail\n"
    once = set_slow_update(messy, "g1")
    twice = set_slow_update(once, "g2")
    assert len(region_spans(twice, Region.SLOW_UPDATE)) == 1
    assert twice.count(Region.SLOW_UPDATE.end) == 1
    assert twice.rstrip().endswith(Region.SLOW_UPDATE.end)
    assert extract_slow_update(twice) == "g2"
    assert "middle" in twice and "tail" in twice


def test_inject_empty_slow_update_is_idempotent() -> None:
    once = inject_empty_slow_update(BODY)
    assert inject_empty_slow_update(once) == once
    assert extract_slow_update(once) == ""
    assert extract_slow_update(BODY) == ""


def test_extract_and_strip_region() -> None:
    assert extract_region(DOC, Region.APPENDIX) == "## Execution notes\n\n- note a"
    assert extract_region(BODY, Region.APPENDIX) is None
    stripped = strip_region(DOC, Region.APPENDIX)
    assert Region.APPENDIX.start not in stripped
    assert "\n\n\n" not in stripped
    assert strip_protected(DOC) == BODY


def test_unterminated_region_is_not_a_region() -> None:
    doc = BODY + Region.APPENDIX.start + "\n- open\n"
    assert region_spans(doc, Region.APPENDIX) == []
    assert Region.APPENDIX.start not in strip_region(doc, Region.APPENDIX)


def test_append_notes_collapses_near_duplicates_in_first_seen_order() -> None:
    doc = append_notes(BODY, ["Check the output", "check  the OUTPUT!", "Run tests"])
    doc = append_notes(doc, ["run tests.", "Re-read the task"])
    assert appendix_notes(doc) == ("Check the output", "Run tests", "Re-read the task")
    assert len(region_spans(doc, Region.APPENDIX)) == 1
    assert append_notes(BODY, ["  ", "!"]) == BODY


def test_region_order_is_canonical() -> None:
    doc = set_slow_update(BODY, "g")
    doc = append_notes(doc, ["n"])
    doc = inject_region(doc, Region.LEARNED, "- l")
    order = [doc.index(r.start) for r in (Region.LEARNED, Region.APPENDIX, Region.SLOW_UPDATE)]
    assert order == sorted(order)


def test_migrate_legacy_markers() -> None:
    legacy = (
        "body\n<!-- SKILLOPT-SLEEP:LEARNED START -->\n- a\n<!-- SKILLOPT-SLEEP:LEARNED END -->\n"
        "<!-- APPENDIX_START -->\n- n\n<!-- APPENDIX_END -->\n"
        "<!-- SLOW_UPDATE_START -->\ng\n<!-- SLOW_UPDATE_END -->\n"
    )
    migrated = migrate_legacy_markers(legacy)
    assert learned_bullets(migrated) == ("a",)
    assert appendix_notes(migrated) == ("n",)
    assert extract_slow_update(migrated) == "g"
    assert migrate_legacy_markers(migrated) == migrated


def test_content_hash_is_sha256_hex() -> None:
    assert content_hash("abc") == hashlib.sha256(b"abc").hexdigest()
    assert content_hash("a") != content_hash("a\n")


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ("", "---\nname: n\ndescription: d\n---\n\n# n\n"),
        ("body\n", "---\nname: n\ndescription: d\n---\n\nbody\n"),
        ("---\nname: keep\n---\nbody\n", "---\nname: keep\ndescription: d\n---\nbody\n"),
        ("---\nname: a\ndescription: b\n---\nx\n", "---\nname: a\ndescription: b\n---\nx\n"),
    ],
)
def test_ensure_skill_scaffold(doc: str, expected: str) -> None:
    assert ensure_skill_scaffold(doc, "n", "d") == expected


@pytest.mark.parametrize(
    "description",
    ["Use it in app: the API # notes", "- starts like a list", "it's 'quoted' \"too\"", "é"],
)
def test_scaffold_description_that_yaml_would_misread_is_quoted(description: str) -> None:
    text = ensure_skill_scaffold("", "n", description)
    line = text.splitlines()[2]
    assert line.startswith('description: "') and json.loads(line.split(": ", 1)[1]) == description
    plain = ensure_skill_scaffold("", "n", "Use it in my-app (/home/me/my-app).")
    assert "description: Use it in my-app (/home/me/my-app).\n" in plain


# ------------------------------------------------------------------ properties

_line = st.text(alphabet="abcxyz -.#*\t", min_size=0, max_size=12)
_doc_body = st.lists(_line, max_size=8).map(lambda lines: "\n".join(lines))
_ops = st.sampled_from(["add", "append", "insert_after", "replace", "delete", "bogus"])
_word = st.text(alphabet="abcxyz -", min_size=0, max_size=6)
_edits = st.builds(edit, _ops, _word, _word)


@settings(max_examples=300, deadline=None)
@given(body=_doc_body, the_edit=_edits, with_regions=st.booleans())
def test_patch_edit_changes_one_span_outside_regions(
    body: str, the_edit: EditRecord, with_regions: bool
) -> None:
    doc = body + ("\n" + APPX + SLOW if with_regions else "")
    result = apply_edits(doc, [the_edit], mode=EditMode.PATCH)
    outcome = result.outcomes[0]
    if outcome.status is not ApplyStatus.APPLIED:
        assert result.text == doc
        return
    start, old_end, _ = one_span_changed(doc, result.text)
    for s, e in region_spans(doc, Region.APPENDIX) + region_spans(doc, Region.SLOW_UPDATE):
        # The changed span lies wholly outside every region (touching its edge is fine).
        assert old_end <= s or start >= e
    if with_regions:
        assert extract_slow_update(result.text) == "slow guidance"
        assert appendix_notes(result.text) == ("note a",)


@settings(max_examples=300, deadline=None)
@given(
    body=_doc_body,
    bullets=st.lists(st.text(alphabet="abcxyz", min_size=1, max_size=5), max_size=4),
    edits=st.lists(_edits, max_size=4),
)
def test_learned_edits_never_touch_bytes_outside_the_block(
    body: str, bullets: list[str], edits: list[EditRecord]
) -> None:
    prefix = body + "\n\n"
    doc = prefix + Region.LEARNED.start + "\n" + "".join(f"- {b}\n" for b in bullets)
    doc += Region.LEARNED.end + "\n\n" + APPX
    result = apply_edits(doc, edits, mode=EditMode.LEARNED)
    assert result.text.startswith(prefix + Region.LEARNED.start)
    assert result.text.endswith(Region.LEARNED.end + "\n\n" + APPX)
    assert len(region_spans(result.text, Region.LEARNED)) == 1


def test_an_orphan_start_marker_never_claims_hand_written_text() -> None:
    """A block whose END was deleted by hand is body text, not a region to edit."""
    doc = f"# T\n{Region.LEARNED.start}\n- keep me\n\nbody text\n"
    added = apply_edits(doc, [edit("add", "new rule")], mode=EditMode.LEARNED)
    assert added.text.startswith(doc)
    assert learned_bullets(added.text) == ("new rule",)
    deleted = apply_edits(added.text, [edit("delete", anchor="keep me")], mode=EditMode.LEARNED)
    assert deleted.outcomes[0].status is ApplyStatus.UNMATCHED
    assert deleted.text == added.text
    spans = region_spans(added.text, Region.LEARNED)
    assert len(spans) == 1 and spans[0][0] > len(doc)


LEGACY_LEARNED = (
    "# Skill\n\nbody\n\n<!-- SKILLOPT-SLEEP:LEARNED START -->\n## Learned\n\n- old rule\n"
    "<!-- SKILLOPT-SLEEP:LEARNED END -->\n"
)


def test_a_legacy_learned_block_is_migrated_on_read_not_doubled() -> None:
    add = [edit("add", "new rule")]
    doubled = apply_edits(LEGACY_LEARNED, add, mode=EditMode.LEARNED).text
    assert "SKILLOPT-SLEEP:LEARNED" in doubled  # unmigrated: the old block stays beside ours
    read = migrate_on_read(LEGACY_LEARNED)
    assert read.migrated and read.markers == 2
    text = apply_edits(read.text, add, mode=EditMode.LEARNED).text
    assert len(region_spans(text, Region.LEARNED)) == 1
    assert learned_bullets(text) == ("old rule", "new rule")
    again = migrate_on_read(read.text)
    assert not again.migrated and again.text == read.text


def test_migration_merges_a_legacy_block_beside_ours() -> None:
    ours = apply_edits(LEGACY_LEARNED, [edit("add", "new rule")], mode=EditMode.LEARNED).text
    ours = ours.replace("new rule", "Old rule.\n- second")  # a near-duplicate, and another
    merged = migrate_on_read(ours).text
    assert len(region_spans(merged, Region.LEARNED)) == 1
    assert learned_bullets(merged) == ("old rule", "second")
    assert merged.startswith("# Skill\n\nbody\n")


def test_carry_regions_keeps_every_region_of_the_current_document() -> None:
    current = apply_edits("# Skill\n\nbody\n", [edit("add", "learned")], mode=EditMode.LEARNED).text
    current = set_slow_update(append_notes(current, ["a note"]), "guidance")
    rewrite = (
        "# Skill v2\n\nnew body\n\n"
        f"{Region.LEARNED.start}\n- rewritten by the model\n{Region.LEARNED.end}\n"
        f"{Region.APPENDIX.start}\n- invented\n{Region.APPENDIX.end}\n"
    )
    carried = carry_regions(current, rewrite)
    assert carried.startswith("# Skill v2\n\nnew body\n")
    for region in (Region.LEARNED, Region.APPENDIX, Region.SLOW_UPDATE):
        (s, e), (cs, ce) = region_spans(current, region)[0], region_spans(carried, region)[0]
        assert carried[cs:ce] == current[s:e]  # verbatim
        assert len(region_spans(carried, region)) == 1
    assert "rewritten by the model" not in carried and "invented" not in carried
    assert carry_regions("# plain\n", rewrite) == "# Skill v2\n\nnew body\n"
