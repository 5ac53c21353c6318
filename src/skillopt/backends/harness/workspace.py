"""The exec-harness workspace: one fresh directory per rollout with the skill installed.

Layout::

    <workspace>/
      .agents/skills/<name>/SKILL.md     the skill under optimization (read by codex and others)
      .claude/skills/<name>/SKILL.md     the same file where Claude Code looks for skills
      task.md                            the task text
      ATTACHMENTS.md, attachments/       numbered copies of attachments, when there are any
      <extra files>, <copied files>, <linked data dirs>

Held-out data must never reach the agent: any file or directory whose resolved path has a
component on the denylist is refused before anything runs.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from skillopt.errors import DataError
from skillopt.redact import redact_text

__all__ = [
    "NO_GUIDANCE",
    "SkillFile",
    "WorkspaceSpec",
    "build_prompt",
    "build_workspace",
    "check_not_denied",
    "render_skill_md",
    "skill_paths",
]

_SKILL_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
NO_GUIDANCE = "No additional guidance yet: rely on the task description."


@dataclass(frozen=True, slots=True, kw_only=True)
class SkillFile:
    name: str  # lowercase, digits and dashes (the skill's directory name)
    description: str
    body: str  # the part under optimization
    title: str = ""
    preamble: str = ""  # fixed text above the dynamic guidance


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkspaceSpec:
    skill: SkillFile
    task: str
    files: Mapping[str, str] = field(default_factory=dict)  # relative path -> content
    copy_files: Mapping[str, Path] = field(default_factory=dict)  # relative path -> source
    data_dirs: Mapping[str, Path] = field(default_factory=dict)  # link name -> dir (read-only)
    attachments: tuple[Path, ...] = ()
    denied_names: frozenset[str] = frozenset()  # e.g. {"val", "test", "holdout"}
    writable: bool = False  # the task produces an artifact in the workspace
    tools: tuple[str, ...] = ()  # tool shims to install (see tool_shims)


def skill_paths(name: str) -> tuple[str, str]:
    """The skill file's relative paths: the generic location, then Claude Code's."""
    return (f".agents/skills/{name}/SKILL.md", f".claude/skills/{name}/SKILL.md")


def render_skill_md(skill: SkillFile) -> str:
    """YAML front matter, a title, the optional preamble, then the dynamic guidance."""
    if not _SKILL_NAME.match(skill.name):
        raise DataError(f"skill name {skill.name!r}: use lowercase letters, digits and dashes")
    description = " ".join(skill.description.split()).replace('"', "'")
    parts = [
        "---",
        f"name: {skill.name}",
        f'description: "{description}"',
        "---",
        "",
        f"# {skill.title or skill.name}",
        "",
    ]
    if skill.preamble.strip():
        parts += [skill.preamble.strip(), ""]
    body = skill.body.strip()
    parts += ["## Dynamic guidance", "", body or NO_GUIDANCE, ""]
    return "\n".join(parts)


def check_not_denied(path: Path, denied: frozenset[str]) -> None:
    """Refuse a path that resolves into a denied (held-out) directory."""
    if not denied:
        return
    resolved = path.resolve()
    hits = [part for part in resolved.parts if part in denied]
    if hits:
        raise DataError(f"{path} resolves into held-out data ({hits[0]!r}); refusing to expose it")


def _relative(target: str) -> PurePosixPath:
    rel = PurePosixPath(target)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise DataError(f"workspace path {target!r} must be relative and stay inside")
    return rel


def build_workspace(root: Path, spec: WorkspaceSpec) -> Path:
    """Create and fill ``root`` (must not exist yet). Validates everything before writing."""
    for source in (*spec.copy_files.values(), *spec.data_dirs.values(), *spec.attachments):
        check_not_denied(source, spec.denied_names)
    missing = [str(p) for p in spec.attachments if not p.is_file()]
    if missing:
        raise DataError(f"missing attachment(s): {', '.join(missing)}")
    for source in spec.copy_files.values():
        if not source.is_file():
            raise DataError(f"file to copy does not exist: {source}")
    for source in spec.data_dirs.values():
        if not source.is_dir():
            raise DataError(f"data directory does not exist: {source}")
    for name in (*spec.files, *spec.copy_files, *spec.data_dirs):
        _relative(name)

    root.mkdir(parents=True)
    # The agent sends what it reads here to its model: text we write is redacted like a prompt.
    # The exec harness drives the CLI directly, not through the completer stack, so the stack's
    # redaction never sees these files: this is their redaction (and run_rollout's, for the prompt).
    skill_text = redact_text(render_skill_md(spec.skill))
    for rel in skill_paths(spec.skill.name):
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(skill_text, encoding="utf-8")
    (root / "task.md").write_text(redact_text(spec.task.rstrip()) + "\n", encoding="utf-8")
    for rel_name, content in spec.files.items():
        target = root / _relative(rel_name)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(redact_text(content), encoding="utf-8")
    for rel_name, source in spec.copy_files.items():
        target = root / _relative(rel_name)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    for rel_name, source in spec.data_dirs.items():
        link = root / _relative(rel_name)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(source.resolve(), target_is_directory=True)
    if spec.attachments:
        folder = root / "attachments"
        folder.mkdir()
        lines = ["# Attachments", ""]
        for index, source in enumerate(spec.attachments, start=1):
            stable = f"{index:02d}-{source.name}"
            shutil.copyfile(source, folder / stable)
            lines.append(f"- attachments/{stable} (originally {source.name})")
        (root / "ATTACHMENTS.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def build_prompt(spec: WorkspaceSpec, *, answer_hint: str = "", retry: bool = False) -> str:
    """The instruction for one attempt (our wording); ``retry`` adds a firm reminder."""
    skill_rel = skill_paths(spec.skill.name)[0]
    lines = [
        "You are working in the current directory on a single task.",
        f"1. Read `task.md` for the task, and `{skill_rel}` for guidance on how to do it well.",
        "   Read the skill file directly; do not look for a Skill tool.",
    ]
    if spec.attachments:
        lines.append("2. Read `ATTACHMENTS.md`; it lists files that belong to the task.")
    lines.append("Work on your own: do not ask for permission or confirmation.")
    if spec.writable:
        lines.append("You may create or modify files in this directory to produce the result.")
    else:
        lines.append("Do not modify any files.")
    lines.append(
        "When done, reply with the final answer only. Keep any answer tags that the task "
        "asks for exactly as specified."
    )
    if answer_hint:
        lines.append(answer_hint)
    if retry:
        lines += [
            "",
            "IMPORTANT: the previous attempt ended without an answer. Re-read `task.md` and the "
            "skill file now, finish the task, and make sure your reply contains the final answer.",
        ]
    return "\n".join(lines)
