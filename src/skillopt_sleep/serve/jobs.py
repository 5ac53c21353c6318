"""The dashboard's actions in flight: each runs as a task of the server's task group and
reports its progress to a :class:`Job` the pages poll (``/jobs/<id>``).

One action per project at a time: a second is refused while the first runs (the project
lock would refuse it anyway, but only after the user confirmed).
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from anyio.abc import TaskGroup

from skillopt.errors import SkillOptError
from skillopt.logging import get_logger
from skillopt.redact import sanitize
from skillopt.storage_errors import storage_failures

__all__ = ["Job", "JobProgress", "Jobs"]

_log = get_logger(__name__)


@dataclass(slots=True, kw_only=True)
class Job:
    ident: str
    project: str  # the project's key
    title: str
    state: str = "running"  # running | done | failed
    lines: list[str] = field(default_factory=list)
    result: dict[str, Any] = field(default_factory=dict)
    started_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.ident,
            "project": self.project,
            "title": self.title,
            "state": self.state,
            "lines": list(self.lines[-200:]),
            "result": self.result,
            "started_at": self.started_at,
        }


class JobProgress:
    """The night's progress protocol, written into a job's lines (a line per stage, the
    calls of the current stage counted in place)."""

    def __init__(self, job: Job) -> None:
        self._job = job
        self._stage = ""
        self._planned = self._done = self._errors = 0

    def _show(self) -> None:
        line = f"{self._stage}: {self._done}/{self._planned} model call(s)"
        line += f", {self._errors} failed" if self._errors else ""
        if self._job.lines and self._job.lines[-1].startswith(f"{self._stage}:"):
            self._job.lines[-1] = line
        else:
            self._job.lines.append(line)

    def stage(self, name: str) -> None:
        self._stage, self._planned, self._done, self._errors = name, 0, 0, 0
        self._show()

    def calls_planned(self, n: int) -> None:
        self._planned += n
        self._show()

    def call_done(self, *, ok: bool = True, stage: str = "", cached: bool = False) -> None:
        if cached:
            return
        self._done += 1
        self._errors += 0 if ok else 1
        self._show()

    def note(self, message: str) -> None:
        self._job.lines.append(sanitize(message))

    def close(self) -> None:
        return None


Action = Callable[[Job], Awaitable[dict[str, Any]]]


class Jobs:
    def __init__(self, tg: TaskGroup) -> None:
        self._tg = tg
        self._jobs: dict[str, Job] = {}
        self._ids = itertools.count(1)

    def get(self, ident: str) -> Job | None:
        return self._jobs.get(ident)

    def running(self, project: str) -> Job | None:
        return next(
            (j for j in self._jobs.values() if j.project == project and j.state == "running"),
            None,
        )

    def all(self) -> list[Job]:
        return list(reversed(self._jobs.values()))

    def start(self, project: str, title: str, action: Action) -> Job:
        """Run ``action`` in the background; the caller checked :meth:`running` first."""
        job = Job(ident=str(next(self._ids)), project=project, title=title)
        self._jobs[job.ident] = job
        self._tg.start_soon(self._run, job, action, name=f"serve job {job.ident}")
        return job

    async def _run(self, job: Job, action: Action) -> None:
        try:
            job.result = await action(job)
            job.state = "done" if job.result.get("ok", True) else "failed"
        except SkillOptError as exc:  # refused, locked, a bad selection: said, not raised
            job.state = "failed"
            job.result = {"ok": False, "error": type(exc).__name__, "message": str(exc)}
        except Exception as exc:  # one broken action must not end the server
            failure = storage_failures(exc)  # a full disk is said, not a crash
            if failure is None:
                _log.exception("serve.job_crashed", job=job.ident, title=job.title)
            job.state = "failed"
            job.result = {"ok": False, "error": type(exc).__name__,
                          "message": str(failure or exc)}  # fmt: skip
        job.lines.append(sanitize(str(job.result.get("message") or job.state)))
        _log.info("serve.job", job=job.ident, title=job.title, state=job.state)
