"""Handoff mode for a project: where its prompts wait, and the config that sends them there.

A night in handoff mode (``[pool] kind = "handoff"`` or ``once --handoff``) calls no model
(:mod:`skillopt.backends.handoff`). This module ties it to a project:

1. :func:`handoff_dir`: ``<state>/projects/<key>/handoff``, the project's handoff directory
   (``PROMPTS.md``, ``pending.json``, ``answers/``).
2. :func:`as_handoff`: the config with its pool replaced by a handoff pool (``--handoff``).
3. :func:`bind_handoff`: the handoff members pointed at the project's directory and told
   the command that resumes the night, before the pool is opened.
4. :func:`waiting_lines`: what ``once`` says when the night stops waiting for answers.
"""

from __future__ import annotations

from pathlib import Path

from skillopt.backends.handoff import PROMPTS_NAME, read_pending
from skillopt.config import HandoffMember, PoolConfig
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.state import project_dir

__all__ = ["HANDOFF_DIR", "as_handoff", "bind_handoff", "handoff_dir", "waiting_lines"]

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
