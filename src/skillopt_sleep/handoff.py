"""Handoff mode for a project: where its prompts wait, and the config that sends them there.

A night in handoff mode (``[pool] kind = "handoff"`` or ``once --handoff``) calls no model
(:mod:`skillopt.backends.handoff`). This module ties it to a project:

1. :func:`handoff_dir`: ``<state>/projects/<key>/handoff``, the project's handoff directory
   (``PROMPTS.md``, ``pending.json``, ``answers/``).
2. :func:`as_handoff`: the config with its pool replaced by a handoff pool (``--handoff``).
3. :func:`bind_handoff`: the handoff members pointed at the project's directory and told
   the command that resumes the night (and, with ``--wait``, how long to wait for answers),
   before the pool is opened.
4. :func:`waiting_lines`: what ``once`` says when the night stops waiting for answers.
5. :func:`next_prompt` and :func:`take_answer`: one prompt at a time, for the MCP tools
   ``handoff_next`` / ``handoff_answer`` (an agent serves the night from its own session).
   While a waiting night is live (``pending.json`` names its process), :func:`next_prompt`
   waits a little for the night's next prompt rather than saying none waits, so one agent
   session answers a whole night.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import anyio

from skillopt.backends.handoff import (
    ASKED_AGAIN,
    PENDING_NAME,
    POLL_SECONDS,
    PROMPTS_NAME,
    answer_cap,
    answer_path,
    read_pending,
    write_answer,
)
from skillopt.config import HandoffMember, PoolConfig
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.lock import pid_alive
from skillopt_sleep.state import project_dir

__all__ = [
    "HANDOFF_DIR",
    "as_handoff",
    "bind_handoff",
    "handoff_dir",
    "live_night",
    "next_prompt",
    "serve_next",
    "take_answer",
    "waiting_lines",
]

HANDOFF_DIR = "handoff"
WAITING_CALL_TIMEOUT = 30 * 86400.0  # a waiting call lasts until answered, or patience ends
SERVE_WAIT = 30.0  # handoff_next: how long it waits for a live night's next prompt


def handoff_dir(cfg: SleepConfig, project: Path) -> Path:
    """The project's handoff directory (under its state)."""
    return project_dir(cfg.state_path(), project) / HANDOFF_DIR


def as_handoff(cfg: SleepConfig) -> SleepConfig:
    """``cfg`` with a handoff pool: no model is called (the rest of the config is kept)."""
    return cfg.model_copy(update={"pool": PoolConfig.model_validate({"kind": "handoff"})})


def bind_handoff(
    cfg: SleepConfig, project: Path, *, resume: str = "", wait: float = 0.0
) -> SleepConfig:
    """``cfg`` with each handoff member's directory (when unset) the project's, the command
    that resumes the night, and ``wait`` > 0 (waiting mode: the patience in seconds); any
    other config is returned as it is."""
    pool = cfg.pool
    if pool is None or not pool.handoff:
        return cfg
    where = handoff_dir(cfg, project)
    waiting = {"wait": wait, "timeout": WAITING_CALL_TIMEOUT} if wait > 0 else {}
    members = [
        m.model_copy(update={"dir": m.dir or where, "resume": m.resume or resume, **waiting})
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
        if p.problem.startswith(ASKED_AGAIN):
            lines.append(f"  prompt {p.id} is {p.problem}: write {p.answer_file}")
        elif p.problem:
            lines.append(f"  answer {p.id} rejected ({p.problem}): write {p.answer_file} again")
    lines.append(
        f"  write each answer to {directory}/answers/<id>.md (or use the MCP tools "
        f"handoff_next / handoff_answer), then run `{resume}` again"
    )
    return lines


def _pending_doc(directory: Path) -> dict[str, Any]:
    try:
        data = json.loads((directory / PENDING_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def live_night(directory: Path) -> int | None:
    """The process id of a waiting night taking answers in ``directory`` now, if any."""
    live = _pending_doc(directory).get("live")
    pid = live.get("pid") if isinstance(live, dict) else None
    alive = isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 and pid_alive(pid)
    return pid if alive else None


async def serve_next(
    directory: Path, *, patience: float = SERVE_WAIT, poll: float = POLL_SECONDS
) -> dict[str, Any]:
    """:func:`next_prompt`, but while a waiting night is live and has no prompt open, wait
    up to ``patience`` seconds for its next one (it writes it as soon as it asks)."""
    deadline = anyio.current_time() + patience
    while True:
        served = next_prompt(directory)
        if served["remaining"] or live_night(directory) is None:
            return served
        if anyio.current_time() >= deadline:
            return {**served, "message": "the night is still running and asks nothing yet: "
                    "call handoff_next again"}  # fmt: skip
        await anyio.sleep(poll)


def next_prompt(directory: Path) -> dict[str, Any]:
    """The first pending prompt with no answer file yet, with its place in the list; or,
    when every one has its answer (or none waits), what to do next. ``night_running``:
    a waiting night is live and takes each answer as it lands (nothing to resume)."""
    pending = read_pending(directory)
    open_ = [p for p in pending if not answer_path(directory, p.id).exists()]
    resume = str(_pending_doc(directory).get("resume", "")) or "the same night command"
    running = live_night(directory) is not None
    if not open_:
        if running:
            said = "the night is running and takes the answers: call handoff_next again"
        elif pending:
            said = f"all {len(pending)} prompt(s) have answers: run `{resume}` to resume the night"
        else:
            said = "no prompt waits for an answer"
        return {"remaining": 0, "of": len(pending), "night_running": running, "message": said}
    first = open_[0]
    return {
        **asdict(first),
        "number": pending.index(first) + 1,
        "of": len(pending),
        "remaining": len(open_),
        "night_running": running,
        "message": "reply as the model would (only the reply); pass it to handoff_answer "
        f"with id {first.id}" + _problem_said(first.problem),
    }  # fmt: skip


def _problem_said(problem: str) -> str:
    """What ``handoff_next`` adds about a prompt's problem ("" when it has none)."""
    if problem.startswith(ASKED_AGAIN):
        return f"; this prompt is {problem}"
    return f"; the earlier answer was rejected: {problem}" if problem else ""


def take_answer(directory: Path, pid: str, text: str) -> dict[str, Any]:
    """Write the answer to pending prompt ``pid``; ``ValueError`` for an id that is not
    pending, an empty answer or one over the cap (the night checks the format when it
    takes it)."""
    pending = {p.id: p for p in read_pending(directory)}
    if pid not in pending:
        raise ValueError(f"no prompt {pid!r} waits for an answer (see handoff_next)")
    if not text.strip():
        raise ValueError(f"the answer to {pid} is empty; nothing was written")
    cap = answer_cap(pending[pid].max_output_tokens)
    if len(text.encode("utf-8")) > cap:
        raise ValueError(
            f"the answer to {pid} is larger than the {cap}-byte cap for a reply of at most "
            f"about {pending[pid].max_output_tokens} tokens; nothing was written"
        )
    path = write_answer(directory, pid, text)
    left = next_prompt(directory)
    said = left["message"] if not left["remaining"] else "call handoff_next"
    return {"id": pid, "written": str(path), "remaining": left["remaining"], "message": said}
