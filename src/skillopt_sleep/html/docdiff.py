"""The staged documents of a night against the live ones, as diff lines for the page.

Which "live" text a proposal is compared with depends on where it stands:

- not adopted, live file unchanged since staging: the live file now (what ``adopt`` replaces);
- adopted: the backup ``adopt`` took of the file it replaced (the live file now *is* the
  proposal, so diffing against it would show nothing);
- not adopted, live file changed since staging: the live file now, flagged, because
  ``adopt`` would refuse this proposal.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skillopt.errors import SkillOptError
from skillopt.redact import sanitize
from skillopt_sleep.adopt_journal import read_backup, receipts
from skillopt_sleep.staging import ManifestEntry, load_manifest, sha256_file

__all__ = ["CONTEXT_LINES", "MAX_LINES", "DiffLine", "DocDiff", "proposal_diffs", "unified_text"]

CONTEXT_LINES = 3
MAX_LINES = 2000


@dataclass(frozen=True, slots=True, kw_only=True)
class DiffLine:
    kind: str  # "add", "del", "ctx" or "hunk"
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class DocDiff:
    name: str
    kind: str
    live_path: str
    state: str  # "pending", "adopted" or "stale"
    compared_with: str
    added: int
    removed: int
    lines: tuple[DiffLine, ...]
    truncated: bool = False


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return ""


def _before(
    run_dir: Path, entry: ManifestEntry, adopted: dict[str, dict[str, Any]]
) -> tuple[str, str, str]:
    """(text, state, what it is) of the live side for one manifest entry."""
    if entry.name in adopted:
        receipt = adopted[entry.name]
        if not receipt.get("backup_path"):
            return "", "adopted", "nothing (the live file did not exist before adoption)"
        backup = read_backup(run_dir, receipt)
        if backup is None:
            return "", "adopted", "nothing: the backup is missing or does not match its receipt"
        text = backup.decode("utf-8", errors="replace")
        return text, "adopted", "the live file as it was before adoption (backup)"
    live = Path(entry.live_path)
    if sha256_file(live) == entry.live_sha256:
        what = "the live file" if entry.live_sha256 else "nothing (no live file yet)"
        return _read(live), "pending", what
    return (
        _read(live),
        "stale",
        "the live file, which changed after the night read it (adopt would refuse this)",
    )


def _lines(before: str, after: str) -> tuple[list[DiffLine], int, int]:
    out: list[DiffLine] = []
    added = removed = 0
    diff = difflib.unified_diff(
        before.splitlines(), after.splitlines(), lineterm="", n=CONTEXT_LINES
    )
    for raw in diff:
        if raw.startswith(("---", "+++")):
            continue
        if raw.startswith("@@"):
            out.append(DiffLine(kind="hunk", text=raw))
        elif raw.startswith("+"):
            added += 1
            out.append(DiffLine(kind="add", text=sanitize(raw[1:])))
        elif raw.startswith("-"):
            removed += 1
            out.append(DiffLine(kind="del", text=sanitize(raw[1:])))
        else:
            out.append(DiffLine(kind="ctx", text=sanitize(raw[1:])))
    return out, added, removed


def proposal_diffs(run_dir: Path) -> list[DocDiff]:
    """One :class:`DocDiff` per staged document; empty when the night staged nothing."""
    if not (run_dir / "proposal" / "manifest.json").is_file():
        return []
    try:
        manifest = load_manifest(run_dir)
        adopted = {str(r.get("name")): r for r in receipts(run_dir)}
    except SkillOptError:
        return []
    out = []
    for entry in manifest.entries:
        before, state, what = _before(run_dir, entry, adopted)
        after = _read(run_dir / entry.proposed_file)
        lines, added, removed = _lines(before, after)
        out.append(
            DocDiff(
                name=entry.name,
                kind=entry.kind.value,
                live_path=entry.live_path,
                state=state,
                compared_with=what,
                added=added,
                removed=removed,
                lines=tuple(lines[:MAX_LINES]),
                truncated=len(lines) > MAX_LINES,
            )
        )
    return out


def unified_text(diffs: list[DocDiff]) -> str:
    """The diffs as plain unified-diff text (for the MCP server and terminals)."""
    marks = {"add": "+", "del": "-", "ctx": " ", "hunk": ""}
    chunks = []
    for d in diffs:
        chunks.append(f"--- {d.live_path} ({d.compared_with})")
        chunks.append(f"+++ staged {d.kind} {d.name} ({d.state})")
        chunks += [marks[line.kind] + line.text for line in d.lines]
        if d.truncated:
            chunks.append(f"… diff cut at {MAX_LINES} lines")
    return "\n".join(chunks)
