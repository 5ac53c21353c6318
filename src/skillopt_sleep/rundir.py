"""One night's run directory: the layout of design section 5, written atomically.

::

    <state_dir>/projects/<key>/runs/<UTC-stamp>-<id>/
      run.json  tasks.jsonl  rollouts.jsonl  trials.json  diagnostics.json
      evidence.jsonl  report.md  report.json  proposal/

``run.json`` is the journal (:class:`RunJournal`, a frozen model; every change makes a new
one): status, per-stage timings, and the small checkpoints (reflect results, the gathered
tasks' cursor) that let a killed night resume. Its JSON keeps the keys and meanings of
every earlier ``run.json``, so old run directories still load. Large stage outputs live
in their own files: tasks in ``tasks.jsonl`` (written once, whole), every judged attempt
in ``rollouts.jsonl`` (appended line by line as it finishes, so a killed night keeps every
answered call; fsyncs are batched by time and done at each stage boundary). Every string
passes the redactor before it is written.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from skillopt.atomicio import (
    AppendJournal,
    atomic_write_json,
    atomic_write_text,
    fsync_dir,
    read_jsonl,
    sweep_temp_files,
)
from skillopt.errors import CorruptStateError
from skillopt.redact import redact_obj, sanitize
from skillopt.run_files import RunFiles
from skillopt_sleep.night_end import RunStatus

__all__ = [
    "DIAGNOSTICS",
    "EVIDENCE",
    "FREE_TEXT",
    "PROPOSAL",
    "REPORT_JSON",
    "REPORT_MD",
    "ROLLOUTS",
    "RUN_JSON",
    "TASKS",
    "TRIALS",
    "Clock",
    "ResumeRecord",
    "RunDir",
    "RunJournal",
    "RunStatus",
    "StageRecord",
    "iso",
    "utc_now",
]

RUN_JSON = "run.json"
TASKS = "tasks.jsonl"
ROLLOUTS = "rollouts.jsonl"
TRIALS = "trials.json"
DIAGNOSTICS = "diagnostics.json"
EVIDENCE = "evidence.jsonl"
REPORT_MD = "report.md"
REPORT_JSON = "report.json"
PROPOSAL = "proposal"


FREE_TEXT = ("response", "reason", "error", "failed_criteria", "tools_called", "member")


def _redact_fields(row: Mapping[str, Any], fields: Iterable[str]) -> dict[str, Any]:
    out = dict(row)
    for key in fields:
        if key in out:
            out[key] = redact_obj(out[key])
    return out


def _clip(value: Any, max_chars: int) -> Any:
    if isinstance(value, str) and len(value) > max_chars:
        return f"{value[:max_chars]}…[truncated {len(value) - max_chars} chars]"
    return value


def _clip_redact(row: Mapping[str, Any], max_chars: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, str):
            if len(value) > max_chars:
                value = f"{value[:max_chars]}…[truncated {len(value) - max_chars} chars]"
            out[key] = sanitize(value)
        else:
            out[key] = redact_obj(value)
    return out


class StageRecord(BaseModel):
    """One stage in the journal. What a stage adds when it ends (``model_calls``,
    ``tasks``, ``rollouts``, ...) is kept as it was given."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: str
    status: str  # running | done | failed
    started_at: str
    seconds: float | None = None
    ended_at: str | None = None  # absent while the stage runs

    def to_json(self) -> dict[str, Any]:
        data = self.model_dump(mode="json")
        if data["ended_at"] is None:
            del data["ended_at"]
        return data


class ResumeRecord(BaseModel):
    """One resume of the run: when, and which process had it before."""

    model_config = ConfigDict(extra="allow", frozen=True)

    at: str
    previous_pid: int | None = None


class RunJournal(BaseModel):
    """``run.json``. Keys a newer (or older) version wrote are kept as they are; every
    key but ``status`` may be missing from a journal written by something else."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)

    schema_: str = Field(default="skillopt-sleep-run/1", alias="schema")
    run_id: str = ""
    project: str = ""
    project_key: str = ""
    status: RunStatus
    started_at: str = ""
    ended_at: str | None = None
    pid: int | None = None
    dry_run: bool = False
    config: dict[str, Any] = Field(default_factory=dict)
    config_hash: str = ""
    stages: tuple[StageRecord, ...] = ()
    resumed: tuple[ResumeRecord, ...] = ()
    outcome: str | None = None
    reason: str = ""
    failed_stage: str = ""
    versions: dict[str, int] = Field(default_factory=dict)
    checkpoint: dict[str, Any] = Field(default_factory=dict)
    # set as the night goes; absent from run.json until then
    night: int | None = None
    demo: bool | None = None
    resumable: bool | None = None
    spend: dict[str, Any] | None = None

    def with_(self, **changes: Any) -> RunJournal:
        """A copy with ``changes`` (validated, so a stage or status is always typed)."""
        return RunJournal.model_validate({**self._fields(), **changes})

    def to_json(self) -> dict[str, Any]:
        """The JSON object of ``run.json``."""
        data = self.model_dump(mode="json", by_alias=True, exclude={"stages"})
        data["stages"] = [s.to_json() for s in self.stages]
        return {k: v for k, v in data.items() if not (k in _ABSENT_WHEN_NONE and v is None)}

    def _fields(self) -> dict[str, Any]:
        data = dict(self)  # declared fields and the kept extras
        data["schema"] = data.pop("schema_")
        return data


_ABSENT_WHEN_NONE = frozenset({"night", "demo", "resumable", "spend"})


# What a night, and the daemon that starts nights, read the time from (tests pass their own).
Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


def iso(ts: datetime) -> str:
    return ts.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def iso_ms(ts: datetime) -> str:
    """``iso`` to the millisecond: stage times, whose seconds are computed from it."""
    return ts.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


#: How often ``run.json``'s directory is fsynced while a night runs (and at its end).
DIR_SYNC_EVERY = 1.0


def _run_seq(path: Path) -> int:
    """The sequence number at the end of a run directory name (``<stamp>-<seq>``)."""
    tail = path.name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


class RunDir(RunFiles):
    """A run directory plus its in-memory journal (mirrored to ``run.json``)."""

    def __init__(self, path: Path, journal: RunJournal) -> None:
        super().__init__(path)
        self.journal = journal
        self._rollouts = AppendJournal(path / ROLLOUTS)
        self._evidence = AppendJournal(path / EVIDENCE)
        self._dir_synced_at = time.monotonic()

    @property
    def path(self) -> Path:
        return self.root

    def sync(self) -> None:
        """fsync the appended files (their lines are already on the kernel's side)."""
        self._rollouts.sync()
        self._evidence.sync()

    # -- creation and discovery -------------------------------------------------

    @classmethod
    def create(
        cls,
        root: Path,
        *,
        now: datetime,
        project: str,
        project_key: str,
        config: Mapping[str, Any],
        config_hash: str,
        dry_run: bool,
    ) -> RunDir:
        stamp = now.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
        existing = cls.list_runs(root)
        seq = max((_run_seq(p) for p in existing), default=0) + 1
        path = root / f"{stamp}-{seq:04d}"
        path.mkdir(parents=True, exist_ok=False)
        journal = RunJournal(
            run_id=path.name,
            project=project,
            project_key=project_key,
            status=RunStatus.RUNNING,
            started_at=iso(now),
            pid=os.getpid(),
            dry_run=dry_run,
            config=dict(config),
            config_hash=config_hash,
        )
        run = cls(path, journal)
        run.save(durable=True)
        return run

    @classmethod
    def open(cls, path: Path) -> RunDir:
        try:
            data = json.loads((path / RUN_JSON).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise CorruptStateError(str(path / RUN_JSON), f"unreadable run journal: {exc}") from exc
        if not isinstance(data, dict):
            raise CorruptStateError(str(path / RUN_JSON), "run journal is not an object")
        try:
            return cls(path, RunJournal.model_validate(data))
        except ValidationError as exc:
            raise CorruptStateError(str(path / RUN_JSON), f"invalid run journal: {exc}") from exc

    @staticmethod
    def list_runs(root: Path) -> list[Path]:
        """Run directories under ``root``, oldest first.

        Ordered by the per-project sequence number in the name, so two runs started in the
        same second (or under a clock that stepped back) still come out in creation order.
        """
        if not root.is_dir():
            return []
        runs = [p for p in root.iterdir() if p.is_dir() and (p / RUN_JSON).is_file()]
        return sorted(runs, key=lambda p: (_run_seq(p), p.name))

    # -- journal ----------------------------------------------------------------

    @property
    def run_id(self) -> str:
        return self.journal.run_id or self.path.name

    @property
    def status(self) -> RunStatus:
        return self.journal.status

    def update(self, **changes: Any) -> None:
        """Change the journal in memory; the next :meth:`save` (or stage) writes it."""
        self.journal = self.journal.with_(**changes)

    def save(self, *, durable: bool = False, claims_done: bool = True) -> None:
        """Rewrite ``run.json``. Its directory's fsync is grouped by time (and forced with
        ``durable``): after a power cut it holds this or an earlier checkpoint, and what
        any checkpoint calls done was fsynced before it was written. A save that marks
        nothing done (a stage starting) leaves the appended files' fsync to the next."""
        if claims_done:
            self.sync()  # what the journal says is done is durable before it says so
        atomic_write_json(self.path / RUN_JSON, redact_obj(self.journal.to_json()), sync_dir=False)
        if durable or time.monotonic() - self._dir_synced_at >= DIR_SYNC_EVERY:
            fsync_dir(self.path)
            self._dir_synced_at = time.monotonic()

    def stage_done(self, name: str) -> bool:
        return any(s.name == name and s.status == "done" for s in self.journal.stages)

    def begin_stage(self, name: str, now: datetime) -> None:
        stages = [s for s in self.journal.stages if s.name != name]
        stages.append(StageRecord(name=name, status="running", started_at=iso_ms(now)))
        self.update(stages=stages)
        self.save(claims_done=False)

    def end_stage(self, name: str, now: datetime, *, status: str = "done", **extra: Any) -> None:
        self.update(stages=[_ended(s, now, status, extra) if s.name == name else s
                            for s in self.journal.stages])  # fmt: skip
        self.save()

    def checkpoint(self, key: str, value: Any) -> None:
        self.update(checkpoint={**self.journal.checkpoint, key: value})
        self.save()

    def finish(
        self,
        status: RunStatus,
        now: datetime,
        *,
        outcome: str,
        reason: str = "",
        failed_stage: str = "",
    ) -> None:
        self.update(
            status=status,
            ended_at=iso(now),
            outcome=outcome,
            reason=sanitize(reason),
            failed_stage=failed_stage,
        )
        self.save(durable=True)

    def mark_resumed(self, now: datetime, *, pid: int) -> None:
        resume = ResumeRecord(at=iso(now), previous_pid=self.journal.pid)
        self.update(resumed=[*self.journal.resumed, resume], pid=pid, status=RunStatus.RUNNING)
        sweep_temp_files(self.path)
        self.save(durable=True)

    # -- stage outputs ----------------------------------------------------------

    def write_tasks(self, rows: Iterable[Mapping[str, Any]]) -> None:
        text = "".join(
            json.dumps(redact_obj(dict(r)), sort_keys=True, ensure_ascii=False) + "\n" for r in rows
        )
        atomic_write_text(self.path / TASKS, text)

    def read_tasks(self) -> list[dict[str, Any]]:
        return [dict(r) for r in read_jsonl(self.path / TASKS)]

    def append_rollouts(self, rows: list[dict[str, Any]]) -> None:
        """Free-text fields are redacted; the rest are ids, hashes and numbers we made."""
        self._rollouts.append([_redact_fields(r, FREE_TEXT) for r in rows])

    def read_rollouts(self) -> list[dict[str, Any]]:
        return [dict(r) for r in read_jsonl(self.path / ROLLOUTS)]

    def append_evidence(
        self, rows: list[dict[str, Any]], *, max_chars: int = 4000, sanitized: bool = False
    ) -> None:
        """Prompt/reply pairs, each string cut to ``max_chars`` and redacted.

        ``sanitized=True`` is for rows built only from strings that already went through
        the redactor (the night's prompts and replies); they are clipped, not re-scanned.
        """
        if sanitized:
            clipped = [{k: _clip(v, max_chars) for k, v in r.items()} for r in rows]
            self._evidence.append(clipped)
            return
        self._evidence.append([_clip_redact(r, max_chars) for r in rows])


def _ended(stage: StageRecord, now: datetime, status: str, extra: dict[str, Any]) -> StageRecord:
    started = datetime.fromisoformat(stage.started_at.replace("Z", "+00:00"))
    seconds = round((now - started).total_seconds(), 3)
    return StageRecord.model_validate(
        {**dict(stage), "status": status, "ended_at": iso_ms(now), "seconds": seconds, **extra}
    )
