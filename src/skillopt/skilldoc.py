"""Skill documents: protected regions and bounded text edits.

A skill document is plain Markdown. Three kinds of region are fenced by HTML-comment
markers and owned by skillopt:

* ``Region.LEARNED`` -- bullets learned by nights; the only place night edits write.
* ``Region.APPENDIX`` -- execution-notes reminders (trainer); appended, never edited.
* ``Region.SLOW_UPDATE`` -- epoch-level guidance (trainer); replaced whole, kept last.

Regions keep the order LEARNED < APPENDIX < SLOW_UPDATE at the end of the document.

Public API::

    content_hash(text) -> str                                  # sha256 hex of UTF-8
    normalise(text) -> str                                     # casefold + collapse spaces
    near_duplicate_key(text) -> str                            # normalise + trailing punct
    region_spans(text, region) -> list[tuple[int, int]]
    extract_region(text, region) -> str | None                 # stripped inner text
    strip_region(text, region) -> str                          # remove all (and orphans)
    inject_region(text, region, body) -> str                   # exactly one, canonical place
    learned_bullets(text) -> tuple[str, ...]
    append_notes(text, notes) -> str                           # appendix, dedup collapse
    appendix_notes(text) -> tuple[str, ...]
    set_slow_update(text, guidance) / inject_empty_slow_update(text) / extract_slow_update(text)
    strip_protected(text) -> str                               # body without any region
    carry_regions(current, new) -> str                         # a rewrite keeps every region
    migrate_legacy_markers(text) -> str                        # reference markers -> ours
    migrate_on_read(text) -> Migration                         # the same, counted, blocks merged
    apply_edits(text, edits, *, mode=EditMode.PATCH) -> EditApplication
    ensure_skill_scaffold(text, name, description) -> str
    ensure_learned_block(text) -> str                          # empty block if none

``apply_edits`` never changes a byte outside the span an edit targets: each applied edit
is one contiguous replacement (an insertion, a substitution or a removal). In
``EditMode.PATCH`` (trainer) the span is in the body, never inside a region; in
``EditMode.LEARNED`` (night) the span is inside the learned block, which is created at
the end of the document when missing.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from skillopt.types import EditOp, EditRecord

__all__ = [
    "ApplyStatus",
    "EditApplication",
    "EditMode",
    "EditOutcome",
    "Migration",
    "Region",
    "append_notes",
    "appendix_notes",
    "apply_edits",
    "carry_regions",
    "content_hash",
    "ensure_learned_block",
    "ensure_skill_scaffold",
    "extract_region",
    "extract_slow_update",
    "inject_empty_slow_update",
    "inject_region",
    "learned_bullets",
    "migrate_legacy_markers",
    "migrate_on_read",
    "near_duplicate_key",
    "normalise",
    "region_spans",
    "set_slow_update",
    "strip_protected",
    "strip_region",
]


class Region(StrEnum):
    LEARNED = "LEARNED"
    APPENDIX = "APPENDIX"
    SLOW_UPDATE = "SLOW-UPDATE"

    @property
    def start(self) -> str:
        return f"<!-- SKILLOPT:{self.value} START -->"

    @property
    def end(self) -> str:
        return f"<!-- SKILLOPT:{self.value} END -->"


_ORDER = (Region.LEARNED, Region.APPENDIX, Region.SLOW_UPDATE)
_MARKER_RE = re.compile(r"<!--\s*SKILLOPT:(?:LEARNED|APPENDIX|SLOW-UPDATE)\s+(?:START|END)\s*-->")

LEARNED_HEADING = "## Learned preferences & procedures"
LEARNED_BANNER = (
    "_Kept by skillopt: each line here passed a validation gate. Edit freely outside this block._"
)
APPENDIX_HEADING = "## Execution notes"


class EditMode(StrEnum):
    PATCH = "patch"  # trainer: edit the body, never a region
    LEARNED = "learned"  # night: edit only bullets of the learned block


class ApplyStatus(StrEnum):
    """What applying one edit to a document did (an :class:`EditOutcome`'s status)."""

    APPLIED = "applied"
    UNMATCHED = "unmatched"  # nothing to act on (duplicate, anchor not found, unknown op)
    SKIPPED = "skipped"  # refused (aimed at a protected region)


@dataclass(frozen=True, slots=True, kw_only=True)
class EditOutcome:
    """What happened to one edit. ``reason`` is a short stable label."""

    index: int  # 0-based position in the input
    edit: EditRecord
    status: ApplyStatus
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class EditApplication:
    text: str
    outcomes: tuple[EditOutcome, ...]

    def _with(self, status: ApplyStatus) -> tuple[EditRecord, ...]:
        return tuple(o.edit for o in self.outcomes if o.status is status)

    @property
    def applied(self) -> tuple[EditRecord, ...]:
        return self._with(ApplyStatus.APPLIED)

    @property
    def unmatched(self) -> tuple[EditRecord, ...]:
        return self._with(ApplyStatus.UNMATCHED)

    @property
    def skipped(self) -> tuple[EditRecord, ...]:
        return self._with(ApplyStatus.SKIPPED)


# --------------------------------------------------------------------------- text helpers


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_WS = re.compile(r"\s+")


def normalise(text: str) -> str:
    return _WS.sub(" ", text).strip().casefold()


def near_duplicate_key(text: str) -> str:
    """Key under which two notes count as the same (case, spacing, end punctuation)."""
    return normalise(text).rstrip(" .!?;:,")


def _clean_content(text: str) -> str:
    """Edit content never carries region markers (it could forge a region)."""
    return _MARKER_RE.sub("", text).strip()


# --------------------------------------------------------------------------- regions


def region_spans(text: str, region: Region) -> list[tuple[int, int]]:
    """Spans ``[start, end)`` of complete regions, from start marker through end marker.

    A start marker followed by another start before any end is an orphan (its end was
    deleted by hand): it is not paired with a later region's end, which would claim all
    the hand-written text in between.
    """
    spans: list[tuple[int, int]] = []
    pos = 0
    while True:
        s = text.find(region.start, pos)
        if s < 0:
            return spans
        e = text.find(region.end, s + len(region.start))
        if e < 0:
            return spans
        again = text.find(region.start, s + len(region.start), e)
        if again >= 0:
            pos = again
            continue
        e += len(region.end)
        spans.append((s, e))
        pos = e


def _all_spans(text: str) -> list[tuple[int, int]]:
    return sorted(span for region in _ORDER for span in region_spans(text, region))


def _inside(spans: Iterable[tuple[int, int]], start: int, end: int) -> bool:
    """True when ``[start, end)`` touches a region (a point counts if strictly inside)."""
    for s, e in spans:
        if start == end:
            if s < start < e:
                return True
        elif start < e and s < end:
            return True
    return False


def extract_region(text: str, region: Region) -> str | None:
    """Inner text of the first complete region, stripped; ``None`` when there is none."""
    spans = region_spans(text, region)
    if not spans:
        return None
    s, e = spans[0]
    return text[s + len(region.start) : e - len(region.end)].strip()


def _collapse_joint(text: str, at: int) -> str:
    """Reduce a run of blank lines around ``at`` (where text was removed) to one."""
    lo = at
    while lo > 0 and text[lo - 1] in " \t\n":
        lo -= 1
    hi = at
    while hi < len(text) and text[hi] in " \t\n":
        hi += 1
    gap = text[lo:hi]
    if gap.count("\n") <= 2:
        return text
    joint = "" if lo == 0 else "\n\n"
    return text[:lo] + joint + text[hi:]


def strip_region(text: str, region: Region) -> str:
    """Remove every region of this kind and any orphan marker of it."""
    for s, e in reversed(region_spans(text, region)):
        text = _collapse_joint(text[:s] + text[e:], s)
    for marker in (region.start, region.end):
        while (i := text.find(marker)) >= 0:
            text = _collapse_joint(text[:i] + text[i + len(marker) :], i)
    if text.strip() == "":
        return ""
    return text.rstrip() + "\n"


def _canonical_position(text: str, region: Region) -> int:
    """Where a new region goes: the end, but before any region that must follow it."""
    later = _ORDER[_ORDER.index(region) + 1 :]
    starts = [s for r in later for s, _ in region_spans(text, r)]
    return min(starts) if starts else len(text)


def _insert_block(text: str, pos: int, block: str) -> str:
    """Insert ``block`` at ``pos`` as its own paragraph, touching nothing else."""
    head, tail = text[:pos], text[pos:]
    if not head or head.endswith("\n\n"):
        lead = ""
    elif head.endswith("\n"):
        lead = "\n"
    else:
        lead = "\n\n"
    trail = "\n\n" if tail else "\n"
    return head + lead + block + trail + tail


def inject_region(text: str, region: Region, body: str) -> str:
    """Replace every region of this kind by exactly one holding ``body``."""
    text = strip_region(text, region)
    inner = _clean_content(body)
    block = f"{region.start}\n{inner}\n{region.end}" if inner else f"{region.start}\n{region.end}"
    return _insert_block(text, _canonical_position(text, region), block)


_LEGACY_MARKERS = {
    "<!-- SKILLOPT-SLEEP:LEARNED START -->": Region.LEARNED.start,
    "<!-- SKILLOPT-SLEEP:LEARNED END -->": Region.LEARNED.end,
    "<!-- APPENDIX_START -->": Region.APPENDIX.start,
    "<!-- APPENDIX_END -->": Region.APPENDIX.end,
    "<!-- SLOW_UPDATE_START -->": Region.SLOW_UPDATE.start,
    "<!-- SLOW_UPDATE_END -->": Region.SLOW_UPDATE.end,
}


def migrate_legacy_markers(text: str) -> str:
    """Rewrite the reference implementation's region markers to ours (idempotent)."""
    for old, new in _LEGACY_MARKERS.items():
        text = text.replace(old, new)
    return text


@dataclass(frozen=True, slots=True, kw_only=True)
class Migration:
    """A document as read, with the reference tool's markers rewritten to ours."""

    text: str
    markers: int  # legacy markers rewritten; 0 = the document was already ours

    @property
    def migrated(self) -> bool:
        return self.markers > 0


def migrate_on_read(text: str) -> Migration:
    """Read a skill document written by the reference tool: its region markers become ours,
    and a legacy learned block found beside one of ours is merged into one (bullets in
    order, near-duplicates collapsed), so an edit never opens a second learned block. A
    document without legacy markers comes back unchanged (``markers == 0``); the caller
    records a migration in its run."""
    markers = sum(text.count(old) for old in _LEGACY_MARKERS)
    if not markers:
        return Migration(text=text, markers=0)
    text = migrate_legacy_markers(text)
    if len(region_spans(text, Region.LEARNED)) > 1:
        text = _merge_learned_blocks(text)
    return Migration(text=text, markers=markers)


def _merge_learned_blocks(text: str) -> str:
    bullets: list[str] = []
    seen: set[str] = set()
    for s, e in region_spans(text, Region.LEARNED):
        inner = text[s + len(Region.LEARNED.start) : e - len(Region.LEARNED.end)]
        for bullet in _bullets_of(inner):
            key = near_duplicate_key(bullet)
            if key and key not in seen:
                seen.add(key)
                bullets.append(bullet)
    lines = "".join(f"\n- {b}" for b in bullets)
    body = f"{LEARNED_HEADING}\n\n{LEARNED_BANNER}" + (f"\n{lines}" if lines else "")
    return inject_region(text, Region.LEARNED, body)


def carry_regions(current: str, new: str) -> str:
    """``new`` (a rewrite of ``current``) with every protected region of ``current`` --
    learned block, appendix, slow-update -- carried over verbatim, in canonical order, and
    none of its own: a rewrite never changes what the night learned or the trainer's notes
    and guidance. A region ``current`` lacks is absent from the result."""
    for region in _ORDER:
        new = strip_region(new, region)
    for region in _ORDER:
        spans = region_spans(current, region)
        if spans:
            s, e = spans[0]
            new = _insert_block(new, _canonical_position(new, region), current[s:e])
    return new


def strip_protected(text: str) -> str:
    """The hand-written body: every region removed."""
    for region in _ORDER:
        text = strip_region(text, region)
    return text


# --------------------------------------------------------------------------- slow update


def set_slow_update(text: str, guidance: str) -> str:
    """Exactly one slow-update region, at the very end, holding ``guidance``."""
    return inject_region(text, Region.SLOW_UPDATE, guidance)


def inject_empty_slow_update(text: str) -> str:
    """Add an empty slow-update region if there is none (idempotent)."""
    if region_spans(text, Region.SLOW_UPDATE):
        return text
    return set_slow_update(text, "")


def extract_slow_update(text: str) -> str:
    return extract_region(text, Region.SLOW_UPDATE) or ""


# --------------------------------------------------------------------------- appendix


def _bullets_of(inner: str) -> list[str]:
    out = []
    for line in inner.splitlines():
        stripped = line.strip()
        if stripped.startswith(("- ", "* ")):
            out.append(stripped[2:].strip())
    return out


def appendix_notes(text: str) -> tuple[str, ...]:
    inner = extract_region(text, Region.APPENDIX)
    return tuple(_bullets_of(inner)) if inner else ()


def append_notes(text: str, notes: Sequence[str]) -> str:
    """Add notes to the appendix, collapsing near-duplicates, first-seen order kept."""
    merged: list[str] = []
    seen: set[str] = set()
    for note in (*appendix_notes(text), *notes):
        one_line = _WS.sub(" ", _clean_content(note)).strip()
        key = near_duplicate_key(one_line)
        if key and key not in seen:
            seen.add(key)
            merged.append(one_line)
    if not merged:
        return text
    body = APPENDIX_HEADING + "\n\n" + "\n".join(f"- {n}" for n in merged)
    return inject_region(text, Region.APPENDIX, body)


# --------------------------------------------------------------------------- learned block


def learned_bullets(text: str) -> tuple[str, ...]:
    inner = extract_region(text, Region.LEARNED)
    return tuple(_bullets_of(inner)) if inner else ()


def ensure_learned_block(text: str) -> str:
    """``text`` with an empty learned block in its canonical place if it has none; no other
    byte changes (staging splices a night's block into the live text through this)."""
    return _ensure_learned_block(text)


def _ensure_learned_block(text: str) -> str:
    if region_spans(text, Region.LEARNED):
        return text
    block = f"{Region.LEARNED.start}\n{LEARNED_HEADING}\n\n{LEARNED_BANNER}\n{Region.LEARNED.end}"
    return _insert_block(text, _canonical_position(text, Region.LEARNED), block)


@dataclass(slots=True)
class _Line:
    start: int  # absolute offset of the line
    end: int  # absolute offset just past its newline
    bullet: str | None  # bullet text, or None for a non-bullet line


def _learned_lines(text: str) -> tuple[int, int, list[_Line]]:
    """Inner span of the first learned block and its lines (absolute offsets)."""
    s, e = region_spans(text, Region.LEARNED)[0]
    inner_start = s + len(Region.LEARNED.start)
    inner_end = e - len(Region.LEARNED.end)
    if text.startswith("\n", inner_start):
        inner_start += 1
    lines: list[_Line] = []
    pos = inner_start
    while pos < inner_end:
        nl = text.find("\n", pos, inner_end)
        stop = inner_end if nl < 0 else nl + 1
        raw = text[pos:stop].strip()
        bullet = raw[2:].strip() if raw.startswith(("- ", "* ")) else None
        lines.append(_Line(pos, stop, bullet))
        pos = stop
    return inner_start, inner_end, lines


def _learned_insert(text: str, after: _Line | None, content: str) -> str:
    inner_start, inner_end, lines = _learned_lines(text)
    if after is None:
        bullets = [ln for ln in lines if ln.bullet is not None]
        if bullets:
            after = bullets[-1]
    if after is not None:
        at = after.end
        prefix = "" if text[at - 1] == "\n" else "\n"
    else:
        at = inner_end
        before = text[inner_start:inner_end]
        prefix = "" if not before or before.endswith("\n\n") else "\n"
        if before and not before.endswith("\n"):
            prefix = "\n\n"
    return text[:at] + prefix + f"- {content}\n" + text[at:]


_LIST_MARKER = re.compile(r"^(?:[-*+]|\d+[.)])\s+")


def _apply_learned(text: str, op: str, edit: EditRecord) -> tuple[str, ApplyStatus, str]:
    # The block writes its own "- "; a model's own list marker would double it and
    # hide a duplicate ("- Run tests" vs "Run tests").
    content = _LIST_MARKER.sub("", _WS.sub(" ", _clean_content(edit.content)).strip())
    anchor = normalise(_clean_content(edit.anchor))
    if op in (EditOp.ADD, EditOp.APPEND, EditOp.INSERT_AFTER):
        if not content:
            return text, ApplyStatus.UNMATCHED, "empty_content"
        text = _ensure_learned_block(text)
        keys = {near_duplicate_key(b) for b in learned_bullets(text)}
        if near_duplicate_key(content) in keys:
            return text, ApplyStatus.UNMATCHED, "duplicate"
        after: _Line | None = None
        reason = "applied_append"
        if op == EditOp.INSERT_AFTER:
            _, _, lines = _learned_lines(text)
            hits = [
                ln
                for ln in lines
                if ln.bullet is not None and anchor and anchor in normalise(ln.bullet)
            ]
            if hits:
                after, reason = hits[0], "applied_insert_after"
            else:
                reason = "applied_insert_after_fallback_append"
        return _learned_insert(text, after, content), ApplyStatus.APPLIED, reason
    if op in (EditOp.DELETE, EditOp.REPLACE):
        needle = anchor or (normalise(_clean_content(edit.content)) if op == EditOp.DELETE else "")
        if not needle:
            return text, ApplyStatus.UNMATCHED, "missing_anchor"
        if op == EditOp.REPLACE and not content:
            return text, ApplyStatus.UNMATCHED, "empty_content"
        if not region_spans(text, Region.LEARNED):
            return text, ApplyStatus.UNMATCHED, "anchor_not_found"
        _, _, lines = _learned_lines(text)
        hits = [ln for ln in lines if ln.bullet is not None and needle in normalise(ln.bullet)]
        if not hits:
            return text, ApplyStatus.UNMATCHED, "anchor_not_found"
        # One contiguous span: from the first matching line to the last one. The new line
        # is written once, and not at all when the block already holds it elsewhere (the
        # replace merges into that line: a rule is never left in the block twice).
        lo, hi = hits[0].start, hits[-1].end
        write = op == EditOp.REPLACE and not any(
            ln.bullet is not None and ln not in hits
            and near_duplicate_key(ln.bullet) == near_duplicate_key(content)
            for ln in lines
        )  # fmt: skip
        pieces = []
        for ln in lines:
            if ln.start < lo or ln.end > hi:
                continue
            if ln in hits:
                if write:
                    pieces.append(f"- {content}\n")
                    write = False
            else:
                pieces.append(text[ln.start : ln.end])
        new_text = text[:lo] + "".join(pieces) + text[hi:]
        if new_text == text:
            return text, ApplyStatus.UNMATCHED, "no_change"
        merged = op == EditOp.REPLACE and f"- {content}\n" not in pieces
        return (
            new_text,
            ApplyStatus.APPLIED,
            "applied_replace_merged" if merged else f"applied_{op}",
        )
    return text, ApplyStatus.UNMATCHED, "unknown_op"


# --------------------------------------------------------------------------- patch mode


_LONG_ENOUGH_FOR_SUBSTRING = 20


def _already_in_body(content: str, body: str) -> bool:
    """A duplicate is a line or paragraph equal up to case, spacing and end punctuation,
    or (for content long enough not to match by accident) a substring of the body."""
    key = near_duplicate_key(content)
    if len(key) >= _LONG_ENOUGH_FOR_SUBSTRING and key in normalise(body):
        return True
    pieces = [*body.splitlines(), *re.split(r"\n[ \t]*\n", body)]
    return any(near_duplicate_key(p) == key for p in pieces)


def _append_point(text: str) -> int:
    spans = _all_spans(text)
    return spans[0][0] if spans else len(text)


def _apply_patch(text: str, op: str, edit: EditRecord) -> tuple[str, ApplyStatus, str]:
    content = _clean_content(edit.content)
    anchor = edit.anchor if edit.anchor.strip() else ""  # verbatim, as proposed
    spans = _all_spans(text)
    hit = text.find(anchor) if anchor else -1
    if hit >= 0 and _inside(spans, hit, hit + len(anchor)):
        return text, ApplyStatus.SKIPPED, "protected_region"
    if op in (EditOp.ADD, EditOp.APPEND, EditOp.INSERT_AFTER):
        if not content:
            return text, ApplyStatus.UNMATCHED, "empty_content"
        if _already_in_body(content, strip_protected(text)):
            return text, ApplyStatus.UNMATCHED, "duplicate"
        if op == EditOp.INSERT_AFTER and hit >= 0:
            nl = text.find("\n", hit + len(anchor))
            at = len(text) if nl < 0 else nl
            if _inside(spans, at, at):
                return text, ApplyStatus.SKIPPED, "protected_region"
            return (
                text[:at] + "\n" + content + text[at:],
                ApplyStatus.APPLIED,
                "applied_insert_after",
            )
        at = _append_point(text)
        reason = "applied_append" if at == len(text) else "applied_append_before_protected_region"
        if op == EditOp.INSERT_AFTER:
            reason = reason.replace("applied_", "applied_insert_after_fallback_")
        return _insert_block(text, at, content), ApplyStatus.APPLIED, reason
    if op in (EditOp.REPLACE, EditOp.DELETE):
        if not anchor:
            return text, ApplyStatus.UNMATCHED, "missing_anchor"
        if hit < 0:
            return text, ApplyStatus.UNMATCHED, "anchor_not_found"
        start, end = hit, hit + len(anchor)
        if op == EditOp.DELETE:
            line_start = text.rfind("\n", 0, start) + 1
            line_end = text.find("\n", end)
            line_end = len(text) if line_end < 0 else line_end
            if not text[line_start:start].strip() and not text[end:line_end].strip():
                # The anchor is a whole line: remove the line with its newline.
                start, end = line_start, min(line_end + 1, len(text))
            return text[:start] + text[end:], ApplyStatus.APPLIED, "applied_delete"
        return text[:start] + content + text[end:], ApplyStatus.APPLIED, "applied_replace"
    return text, ApplyStatus.UNMATCHED, "unknown_op"


# --------------------------------------------------------------------------- entry point


def _canonical_op(op: str) -> str:
    op = op.strip().lower()
    return EditOp.APPEND.value if op == EditOp.ADD.value else op


def apply_edits(
    text: str, edits: Sequence[EditRecord], *, mode: EditMode = EditMode.PATCH
) -> EditApplication:
    """Apply ``edits`` in order to the evolving text; report each edit's outcome."""
    outcomes: list[EditOutcome] = []
    for index, edit in enumerate(edits):
        op = _canonical_op(edit.op)
        if mode is EditMode.LEARNED:
            new_text, status, reason = _apply_learned(text, op, edit)
        else:
            new_text, status, reason = _apply_patch(text, op, edit)
        if status is ApplyStatus.APPLIED:
            text = new_text
        outcomes.append(EditOutcome(index=index, edit=edit, status=status, reason=reason))
    return EditApplication(text=text, outcomes=tuple(outcomes))


# --------------------------------------------------------------------------- scaffold


def _front_matter(text: str) -> tuple[int, int] | None:
    """Span of the YAML front matter body (between the ``---`` fences), if any."""
    if not text.startswith("---\n"):
        return None
    close = text.find("\n---", 3)
    if close < 0:
        return None
    after = close + len("\n---")
    if after < len(text) and text[after] != "\n":
        return None
    return 4, close + 1


_PLAIN_SCALAR = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ,.()/_'+-]*")


def _yaml_scalar(value: str) -> str:
    """One line of YAML for ``value``: plain when that is unambiguous, else double-quoted
    (a JSON string is a valid YAML double-quoted scalar), so ``: `` or ``#`` in a project
    name cannot break the front matter an agent parses."""
    one_line = _WS.sub(" ", value).strip()
    if _PLAIN_SCALAR.fullmatch(one_line) and not one_line.endswith(" "):
        return one_line
    return json.dumps(one_line, ensure_ascii=False)


def ensure_skill_scaffold(text: str, name: str, description: str) -> str:
    """Give a skill document front matter with ``name`` and ``description`` if missing.

    Agents list a skill by these two keys (Claude Code shows ``name: description`` to the
    model), so a skill without them is never chosen. Existing keys and the body are left
    as they are; only missing keys are added.
    """
    name_line = f"name: {_yaml_scalar(name)}\n"
    desc_line = f"description: {_yaml_scalar(description)}\n"
    fm = _front_matter(text)
    if fm is None:
        body = text if text.strip() else f"# {name.strip()}\n"
        return f"---\n{name_line}{desc_line}---\n\n{body}"
    start, end = fm
    block = text[start:end]
    keys = {line.split(":", 1)[0].strip() for line in block.splitlines() if ":" in line}
    missing = ("" if "name" in keys else name_line) + ("" if "description" in keys else desc_line)
    return text[:end] + missing + text[end:]
