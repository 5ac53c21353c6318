"""Handoff mode for a project: where its prompts wait, and the config that sends them there.

A night in handoff mode (``[pool] kind = "handoff"`` or ``once --handoff``) calls no model
(:mod:`skillopt.backends.handoff`). This module ties it to a project:

1. :func:`handoff_dir`: ``<state>/projects/<key>/handoff``, the project's handoff directory
   (``PROMPTS.md``, ``pending.json``, ``answers/``).
2. :func:`as_handoff`: the config with its pool replaced by a handoff pool (``--handoff``).
3. :func:`bind_handoff`: the handoff members pointed at the project's directory and told
   the command that resumes the night, before the pool is opened.
4. :func:`waiting_lines`: what ``once`` says when the night stops waiting for answers.
5. :func:`next_prompt` and :func:`take_answer`: one prompt at a time, for the MCP tools
   ``handoff_next`` / ``handoff_answer`` (an agent serves the night from its own session).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from skillopt.backends.handoff import (
    PENDING_NAME,
    PROMPTS_NAME,
    answer_path,
    read_pending,
    write_answer,
)
from skillopt.config import HandoffMember, PoolConfig
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.state import project_dir

__all__ = [
    "HANDOFF_DIR",
    "as_handoff",
    "bind_handoff",
    "handoff_dir",
    "next_prompt",
    "take_answer",
    "waiting_lines",
]

HANDOFF_DIR = "handoff"


def handoff_dir(cfg: SleepConfig, project: Path) -> Path:
    """The project's handoff directory (under its state)."""
    return project_dir(cfg.state_path(), project) / HANDOFF_DIR


def as_handoff(cfg: SleepConfig) -> SleepConfig:
    """``cfg`` with a handoff pool: no model is called (the rest of the config is kept)."""
    return cfg.model_copy(update={"pool": PoolConfig.model_validate({"kind": "handoff"})})


def bind_handoff(cfg: SleepConfig, project: Path, *, resume: str = "") -> SleepConfig:
    """``cfg`` with each handoff member's directory (when unset) the project's, and the
    command that resumes the night; any other config is returned as it is."""
    pool = cfg.pool
    if pool is None or not pool.handoff:
        return cfg
    where = handoff_dir(cfg, project)
    members = [
        m.model_copy(update={"dir": m.dir or where, "resume": m.resume or resume})
        if isinstance(m, HandoffMember)
        else m
        for m in pool.members
    ]
    return cfg.model_copy(update={"pool": pool.model_copy(update={"members": members})})


def waiting_lines(directory: Path, resume: str) -> list[str]:
    """How many prompts wait, which answers were rejected, and what to do next."""
    pending = read_pending(directory)
    lines = [f"  {len(pending)} prompt(s) wait for answers: {directory / PROMPTS_NAME}"]
    for p in pending:
        if p.problem:
            lines.append(f"  answer {p.id} rejected ({p.problem}): write {p.answer_file} again")
    lines.append(
        f"  write each answer to {directory}/answers/<id>.md (or use the MCP tools "
        f"handoff_next / handoff_answer), then run `{resume}` again"
    )
    return lines


def _resume(directory: Path) -> str:
    try:
        data = json.loads((directory / PENDING_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    return str(data.get("resume", "")) if isinstance(data, dict) else ""


def next_prompt(directory: Path) -> dict[str, Any]:
    """The first pending prompt with no answer file yet, with its place in the list; or,
    when every one has its answer (or none waits), what to do next."""
    pending = read_pending(directory)
    open_ = [p for p in pending if not answer_path(directory, p.id).exists()]
    resume = _resume(directory) or "the same night command"
    if not open_:
        said = (
            f"all {len(pending)} prompt(s) have answers: run `{resume}` to resume the night"
            if pending
            else "no prompt waits for an answer"
        )
        return {"remaining": 0, "of": len(pending), "message": said}
    first = open_[0]
    return {
        **asdict(first),
        "number": pending.index(first) + 1,
        "of": len(pending),
        "remaining": len(open_),
        "message": "reply as the model would (only the reply); pass it to handoff_answer "
        f"with id {first.id}" + (f"; the earlier answer was rejected: {first.problem}"
                                 if first.problem else ""),
    }  # fmt: skip


def take_answer(directory: Path, pid: str, text: str) -> dict[str, Any]:
    """Write the answer to pending prompt ``pid``; ``ValueError`` for an id that is not
    pending or an empty answer (the night checks the format when it resumes)."""
    pending = {p.id: p for p in read_pending(directory)}
    if pid not in pending:
        raise ValueError(f"no prompt {pid!r} waits for an answer (see handoff_next)")
    if not text.strip():
        raise ValueError(f"the answer to {pid} is empty; nothing was written")
    path = write_answer(directory, pid, text)
    left = next_prompt(directory)
    said = left["message"] if not left["remaining"] else "call handoff_next"
    return {"id": pid, "written": str(path), "remaining": left["remaining"], "message": said}
