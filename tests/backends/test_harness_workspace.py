"""Text the harness writes into a workspace is redacted: the agent forwards it to its model."""

from __future__ import annotations

from pathlib import Path

from skillopt.backends.harness.workspace import (
    SkillFile,
    WorkspaceSpec,
    build_workspace,
    skill_paths,
)

SECRET = "sk-proj-abcdefghijklmnopqrstuvwxyz123456"


def test_task_skill_and_extra_files_are_redacted(tmp_path: Path) -> None:
    spec = WorkspaceSpec(
        skill=SkillFile(name="s", description="d", body=f"Use the key {SECRET} when asked."),
        task=f"Call the API with {SECRET}.",
        files={"notes/config.txt": f"token={SECRET}\n"},
    )
    root = build_workspace(tmp_path / "ws", spec)
    written = [
        root / "task.md",
        root / "notes/config.txt",
        *(root / rel for rel in skill_paths("s")),
    ]
    for path in written:
        text = path.read_text()
        assert SECRET not in text, path
        assert "REDACTED" in text, path
