"""The versioned skill store and the proposal writer.

Skill store (one per project)::

    <project_dir>/skills/<name>/versions/v0001.md   immutable (read-only, never replaced)
    <project_dir>/skills/<name>/index.json          number, sha256, run id, night, parent, time

Proposal (one per night, inside the run directory)::

    <run_dir>/proposal/<kind>-<name>.md             the proposed document
    <run_dir>/proposal/manifest.json                written LAST: the publication marker

A staged document is the live text with only its learned block replaced
(:func:`staged_text`): the user's bytes outside the block are kept exactly, a secret-shaped
string included (it was withheld from the model, and it is already on disk in the live
file); the block, written from model replies, is redacted. The store and the proposal keep
the staged bytes as they are.

The manifest pins, per file, the sha256 of the proposed bytes and of the live file at
staging time ("" when the live file did not exist) plus the live path's realpath.
:mod:`skillopt_sleep.adopt` refuses to act if any pin no longer holds.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from skillopt.atomicio import atomic_create_bytes, atomic_write_json, atomic_write_text
from skillopt.errors import CorruptStateError, DataError, RefusedError
from skillopt.redact import redact_text
from skillopt.skilldoc import (
    Region,
    ensure_learned_block,
    ensure_skill_scaffold,
    region_spans,
)

__all__ = [
    "MANIFEST_NAME",
    "MANIFEST_SCHEMA",
    "MEMORY_FILE_NAMES",
    "PROPOSAL_DIR",
    "RECEIPTS_NAME",
    "SKILL_FILE_NAME",
    "Manifest",
    "ManifestEntry",
    "Proposal",
    "ProposalKind",
    "SkillStore",
    "SkillVersion",
    "UtcInstant",
    "check_name",
    "load_manifest",
    "proposed_file_name",
    "read_pinned",
    "scaffold_skill",
    "sha256_bytes",
    "sha256_file",
    "skill_description",
    "staged_text",
    "write_proposal",
]

MANIFEST_SCHEMA = "skillopt.proposal"
PROPOSAL_DIR = "proposal"
MANIFEST_NAME = "manifest.json"
RECEIPTS_NAME = "adoptions.jsonl"

MEMORY_FILE_NAMES = ("CLAUDE.md", "AGENTS.md")
SKILL_FILE_NAME = "SKILL.md"
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_VERSION_FILE = re.compile(r"^v(\d{4,})\.md$")

UtcInstant = Annotated[AwareDatetime, AfterValidator(lambda d: d.astimezone(UTC))]


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of the file's bytes; "" when it does not exist."""
    try:
        return sha256_bytes(Path(path).read_bytes())
    except FileNotFoundError:
        return ""


def read_pinned(path: Path, sha256: str) -> bytes:
    """The bytes of a file we wrote earlier and pinned by its sha256 (a skill version, a
    staged proposal). Raises :class:`CorruptStateError` when it cannot be read or its bytes
    changed since: such a file is never trusted."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CorruptStateError(str(path), f"unreadable ({exc})") from exc
    if sha256_bytes(data) != sha256:
        raise CorruptStateError(str(path), "content does not match its sha256 pin")
    return data


def check_name(name: str) -> str:
    """A skill/proposal name must be one safe path segment."""
    if not _SAFE_NAME.match(name) or name.endswith(".") or ".." in name:
        raise DataError(f"invalid skill name {name!r}: use letters, digits, '.', '_', '-'")
    return name


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --------------------------------------------------------------------------- skill store


def _version_file(value: str) -> str:
    """A version's file is one of ours in ``versions/``: never a path the index could point
    anywhere with (``/etc/hostname``, ``../../CLAUDE.md``)."""
    if not _VERSION_FILE.match(value):
        raise ValueError(f"not a version file name: {value!r}")
    return value


class SkillVersion(_Frozen):
    name: str
    number: int = Field(ge=1)
    file: Annotated[str, AfterValidator(_version_file)]
    sha256: str
    run_id: str
    night: int = Field(ge=0)
    parent: int | None
    created_at: UtcInstant


class _SkillIndex(_Frozen):
    version: Literal[1] = 1
    name: str
    versions: tuple[SkillVersion, ...] = ()


class SkillStore:
    """Numbered, immutable versions of each gated skill of one project."""

    def __init__(self, project_dir: str | os.PathLike[str]) -> None:
        self.root = Path(project_dir) / "skills"

    def _dir(self, name: str) -> Path:
        return self.root / check_name(name)

    def _index_path(self, name: str) -> Path:
        return self._dir(name) / "index.json"

    def versions(self, name: str) -> tuple[SkillVersion, ...]:
        path = self._index_path(name)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return ()
        try:
            index = _SkillIndex.model_validate(json.loads(raw))
        except (ValueError, ValidationError) as exc:
            raise CorruptStateError(str(path), f"invalid skill index ({exc})") from exc
        if index.name != name:
            raise CorruptStateError(str(path), f"index is for skill {index.name!r}")
        return index.versions

    def latest(self, name: str) -> SkillVersion | None:
        found = self.versions(name)
        return found[-1] if found else None

    def read(self, name: str, number: int) -> str:
        """The text of version ``number``; its bytes must still match the recorded sha."""
        for version in self.versions(name):
            if version.number == number:
                path = self._dir(name) / "versions" / version.file
                if path.is_symlink():
                    raise CorruptStateError(str(path), "a skill version is never a symlink")
                return read_pinned(path, version.sha256).decode("utf-8")
        raise DataError(f"skill {name!r} has no version {number}")

    def add_version(
        self,
        name: str,
        text: str,
        *,
        run_id: str,
        night: int,
        created_at: datetime | None = None,
    ) -> SkillVersion:
        """Store ``text`` (as it is: see :func:`staged_text`) as the next version; a text equal
        to the latest is not stored twice.

        Idempotent for a resumed night: a version file a killed writer left unindexed is
        indexed if its bytes are the same, else skipped over.
        """
        data = text.encode("utf-8")
        digest = sha256_bytes(data)
        existing = self.versions(name)
        if existing and existing[-1].sha256 == digest:
            return existing[-1]
        versions_dir = self._dir(name) / "versions"
        indexed = {v.number for v in existing}
        orphans: dict[int, Path] = {}
        if versions_dir.is_dir():
            for entry in versions_dir.iterdir():
                match = _VERSION_FILE.match(entry.name)
                if match and int(match.group(1)) not in indexed:
                    orphans[int(match.group(1))] = entry
        same = [n for n, p in sorted(orphans.items()) if sha256_file(p) == digest]
        if same:
            number = same[0]
        else:
            number = max((*indexed, *orphans), default=0) + 1
            while not atomic_create_bytes(versions_dir / f"v{number:04d}.md", data, mode=0o444):
                number += 1
        filename = f"v{number:04d}.md"
        version = SkillVersion(
            name=name,
            number=number,
            file=filename,
            sha256=digest,
            run_id=run_id,
            night=night,
            parent=existing[-1].number if existing else None,
            created_at=created_at or datetime.now(UTC),
        )
        index = _SkillIndex(name=name, versions=(*existing, version))
        atomic_write_json(self._index_path(name), index.model_dump(mode="json"))
        return version


# --------------------------------------------------------------------------- proposals


def staged_text(live: str, proposed: str) -> str:
    """``live`` with its learned block replaced by ``proposed``'s, redacted.

    Every byte of ``live`` outside the block is kept as it is: the night learns only inside
    the block, and what it sent the model about the rest was redacted on the way out, so
    ``proposed`` may hold ``[REDACTED:...]`` where the user's own line is.
    """
    spans = region_spans(proposed, Region.LEARNED)
    if not spans:
        return live
    start, end = spans[0]
    block = redact_text(proposed[start:end])
    base = ensure_learned_block(live)
    live_start, live_end = region_spans(base, Region.LEARNED)[0]
    return base[:live_start] + block + base[live_end:]


def skill_description(project: Path) -> str:
    """When an agent should use a night's skill: for work in this project (named)."""
    return (
        f"Conventions and procedures skillopt-sleep learned from your sessions in the "
        f"{project.name} project ({project}). Use it when working in {project.name}."
    )


def scaffold_skill(text: str, *, name: str, project: Path) -> str:
    """A skill document an agent can list and load: ``name``/``description`` front matter
    added where missing (present keys and the body are kept as they are).

    Applied to the text a night stages, so the proposal (and its sha pin) is exactly what
    ``adopt`` writes, a new managed skill included.
    """
    return ensure_skill_scaffold(text, name, skill_description(project))


class ProposalKind(StrEnum):
    SKILL = "skill"
    MEMORY = "memory"


def proposed_file_name(kind: ProposalKind, name: str) -> str:
    """Where a night stages a proposal, relative to its run directory."""
    return f"{PROPOSAL_DIR}/{kind.value}-{name}.md"


@dataclass(frozen=True, slots=True, kw_only=True)
class Proposal:
    """One document the night proposes to replace a live file with.

    ``live_sha256`` is the pin taken when the night read the live file as its baseline
    ("" = it did not exist); ``None`` pins whatever is there at staging time. If the live
    file changed since the baseline was read, staging refuses.
    """

    name: str
    live_path: Path
    text: str
    kind: ProposalKind = ProposalKind.SKILL
    live_sha256: str | None = None
    store_version: int | None = None
    fanout: bool = False  # one of the project's own skills (a per-skill night), not the managed


class ManifestEntry(_Frozen):
    name: str
    kind: ProposalKind
    proposed_file: str
    sha256: str
    live_path: str
    live_realpath: str
    live_sha256: str
    store_version: int | None = None
    fanout: bool = False  # never adopted by a bare ``adopt`` or by ``auto_adopt = true``

    @model_validator(mode="after")
    def _confined(self) -> ManifestEntry:
        """The proposed file is the one staging names (inside ``proposal/``), and a skill
        never targets a memory file nor a memory file a skill: a manifest edited on disk
        cannot make ``adopt`` or ``versions restore`` read or write anything else."""
        check_name(self.name)
        if self.proposed_file != proposed_file_name(self.kind, self.name):
            raise ValueError(f"{self.name}: unexpected proposed file {self.proposed_file!r}")
        target = Path(self.live_path).name
        if self.kind is ProposalKind.SKILL and target in MEMORY_FILE_NAMES:
            raise ValueError(f"{self.name}: a skill cannot replace the memory file {target}")
        if self.kind is ProposalKind.MEMORY and target == SKILL_FILE_NAME:
            raise ValueError(f"{self.name}: a memory proposal cannot replace a {target}")
        return self


class Manifest(_Frozen):
    schema_id: Literal["skillopt.proposal"] = Field(default="skillopt.proposal", alias="schema")
    version: Literal[1] = 1
    run_id: str
    created_at: UtcInstant
    entries: tuple[ManifestEntry, ...]

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    def entry(self, name: str) -> ManifestEntry | None:
        return next((e for e in self.entries if e.name == name), None)


def _entry_for(proposal: Proposal) -> tuple[ManifestEntry, bytes]:
    name = check_name(proposal.name)
    live = Path(proposal.live_path)
    if not live.is_absolute():
        raise DataError(f"proposal {name!r}: live path must be absolute, got {str(live)!r}")
    current = sha256_file(live)
    if proposal.live_sha256 is not None and current != proposal.live_sha256:
        raise RefusedError(
            f"{live}: the live file changed while the night ran; discard this night and rerun"
        )
    data = proposal.text.encode("utf-8")
    entry = ManifestEntry(
        name=name,
        kind=proposal.kind,
        proposed_file=proposed_file_name(proposal.kind, name),
        sha256=sha256_bytes(data),
        live_path=str(live),
        live_realpath=os.path.realpath(live),
        live_sha256=current,
        store_version=proposal.store_version,
        fanout=proposal.fanout,
    )
    return entry, data


def write_proposal(
    run_dir: str | os.PathLike[str],
    proposals: Sequence[Proposal],
    *,
    run_id: str = "",
    now: datetime | None = None,
) -> Manifest:
    """Write the proposed files, then ``manifest.json`` last; returns the manifest.

    Refuses duplicate names or live targets, and refuses to restage a night that already
    has adoption receipts.
    """
    root = Path(run_dir)
    if (root / RECEIPTS_NAME).exists():
        raise RefusedError(f"{root}: this night was already (partly) adopted; not restaging")
    names: set[str] = set()
    targets: set[str] = set()
    staged: list[tuple[ManifestEntry, bytes]] = []
    for proposal in proposals:
        entry, data = _entry_for(proposal)
        if entry.name.casefold() in names:
            raise DataError(f"two proposals are named {entry.name!r}")
        if entry.live_realpath in targets:
            raise DataError(f"two proposals target {entry.live_realpath}")
        names.add(entry.name.casefold())
        targets.add(entry.live_realpath)
        staged.append((entry, data))
    manifest_path = root / PROPOSAL_DIR / MANIFEST_NAME
    manifest_path.unlink(missing_ok=True)  # a half-restaged proposal is never published
    for entry, data in staged:
        atomic_write_text(root / entry.proposed_file, data.decode("utf-8"))
    manifest = Manifest(
        run_id=run_id or root.name,
        created_at=now or datetime.now(UTC),
        entries=tuple(e for e, _ in staged),
    )
    atomic_write_json(manifest_path, manifest.model_dump(mode="json", by_alias=True))
    return manifest


def load_manifest(run_dir: str | os.PathLike[str]) -> Manifest:
    """The published manifest of a run; :class:`DataError` if none, corrupt if invalid."""
    path = Path(run_dir) / PROPOSAL_DIR / MANIFEST_NAME
    try:
        raw = path.read_bytes()
    except FileNotFoundError as exc:
        raise DataError(f"{Path(run_dir)}: no published proposal (no {MANIFEST_NAME})") from exc
    try:
        return Manifest.model_validate(json.loads(raw))
    except (ValueError, ValidationError) as exc:
        raise CorruptStateError(str(path), f"invalid manifest ({exc})") from exc
