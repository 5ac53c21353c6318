"""Watching adopted learned lines in the sessions that came after them.

A learned line is adopted to stop the user having to correct the agent on something. Later
nights harvest the user's real sessions; :func:`watch_lines` reads what they mined for the
requests each line was meant to fix, before and after its adoption:

1. **Adopted lines.** Every adoption receipt of the project's nights (and of their
   ``adopt --edit`` subsets) names what was adopted and when; the night's kept edits of
   those documents that write a line (``add``, ``replace``, ...) are the lines, watched
   while the live document's learned block still holds them.
2. **Its requests.** The tasks the line's own gate trial improved (its single trials in
   the night's report); when it has none, the failing tasks its reflection saw.
3. **Sessions.** Every night's journal records the sessions it mined (id, file time) and
   what it mined from them (task ids, and whether the user pushed back: a ``fail`` or
   ``mixed`` outcome is a correction).
4. **Per line.** The sessions of its requests before and after the adoption, the
   corrections among them, and their dates. A correction after the adoption is flagged:
   the user's real sessions contradict the line (or the agent does not follow it).
   The next night proposes its removal through the gate
   (:mod:`skillopt_sleep.night.line_removals`); the flag says so, and how to undo it by hand.

Nothing here calls a model; it reads run directories only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from skillopt.atomicio import read_json_object
from skillopt.errors import SkillOptError
from skillopt.skilldoc import learned_bullets, near_duplicate_key
from skillopt.types import DeltaStatus
from skillopt_sleep.adopt import SUBSET_FILE, subset_dirs
from skillopt_sleep.adopt_journal import receipts
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.edit_ids import edit_id
from skillopt_sleep.rundir import RunDir
from skillopt_sleep.staging import load_manifest
from skillopt_sleep.state import runs_dir

__all__ = ["Tally", "WatchedLine", "watch_lines"]

_WRITES_A_LINE = frozenset({"add", "append", "insert_after", "replace"})
_CORRECTED = frozenset({"fail", "mixed"})


@dataclass(frozen=True, slots=True)
class _Seen:
    task_id: str
    session_id: str
    at: datetime
    corrected: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Tally:
    """Sessions of a line's requests on one side of its adoption, and the corrections."""

    sessions: int = 0
    corrections: int = 0
    first_correction: datetime | None = None
    last_correction: datetime | None = None

    @classmethod
    def of(cls, seen: Sequence[_Seen]) -> Tally:
        fixes = sorted(s.at for s in seen if s.corrected)
        return cls(
            sessions=len({s.session_id for s in seen}),
            corrections=len({s.session_id for s in seen if s.corrected}),
            first_correction=fixes[0] if fixes else None,
            last_correction=fixes[-1] if fixes else None,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "sessions": self.sessions,
            "corrections": self.corrections,
            "first_correction": _iso(self.first_correction),
            "last_correction": _iso(self.last_correction),
        }

    def describe(self) -> str:
        if not self.corrections:
            return f"{self.sessions} session(s), no correction"
        first, last = _day(self.first_correction), _day(self.last_correction)
        when = first if first == last else f"{first} to {last}"
        return f"{self.sessions} session(s), {self.corrections} with a correction ({when})"


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchedLine:
    """One adopted learned line and what the sessions since say about it."""

    line: str
    target: str
    edit_id: str
    night: int
    adopted_at: datetime
    requests: tuple[str, ...]
    before: Tally
    after: Tally
    run_dir: str = ""
    # the newest night since the adoption that tested removing it: (night, removal, why)
    last_test: tuple[int, str, str] | None = None
    # when that night ended: every correction it could read is dated no later
    last_tested_at: datetime | None = None

    @property
    def settled(self) -> bool:
        """A night tested removing it and kept the line, and no correction came since:
        testing it again could only repeat that answer (or pass by chance)."""
        if self.last_test is None or self.last_test[1] != "kept" or self.last_tested_at is None:
            return False
        last = self.after.last_correction
        return last is None or last <= self.last_tested_at

    @property
    def contradicted(self) -> bool:
        return self.after.corrections > 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "line": self.line,
            "target": self.target,
            "edit_id": self.edit_id,
            "night": self.night,
            "adopted_at": _iso(self.adopted_at),
            "requests": list(self.requests),
            "before": self.before.to_dict(),
            "after": self.after.to_dict(),
            "contradicted": self.contradicted,
            "flag": self.flag(),
            "run_dir": self.run_dir,
        }

    def next_step(self) -> str:
        """What happens to a flagged line next, after the newest night that tested it."""
        night, removal, why = self.last_test or (0, "", "")
        if removal == "removed":
            return (
                f"night {night} staged its removal ({why}): `skillopt-sleep adopt` takes it, "
                "or keep the line by not adopting"
            )
        if removal == "kept":
            return (
                f"night {night} tested removing it and kept the line ({why}); a new "
                "correction has it tested again"
            )
        return (
            "the next night tests removing it through the gate (staged for you to adopt "
            "only if your tasks do better without it)"
        )

    def flag(self) -> str:
        if not self.contradicted:
            return ""
        return (
            f"corrected again since it was adopted ({self.after.describe()}): your sessions "
            f"contradict this line, or the agent does not follow it; {self.next_step()}; "
            "to undo it now, remove it from the learned block by hand or "
            "`skillopt-sleep versions restore` an earlier version"
        )

    def describe(self) -> str:
        return (
            f"{self.target} line {self.edit_id} (night {self.night}, adopted "
            f"{_day(self.adopted_at)}): before: {self.before.describe()}; after: "
            f"{self.after.describe()}"
        )


def _iso(at: datetime | None) -> str | None:
    return at.isoformat().replace("+00:00", "Z") if at else None


def _day(at: datetime | None) -> str:
    return at.strftime("%d %b %Y") if at else "—"


def _when(text: Any) -> datetime | None:
    try:
        at = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def _night_no(report: Mapping[str, Any]) -> int:
    """A report's night number; 0 when a damaged report holds none that reads as one."""
    try:
        return int(report.get("night") or 0)
    except (TypeError, ValueError):
        return 0


# --------------------------------------------------------------------------- sessions


def _sessions(runs: Iterable[Path]) -> list[_Seen]:
    """Every (task, session) the nights mined, dated by the session's file time."""
    mined: list[tuple[dict[str, Any], dict[str, Any]]] = []
    times: dict[str, datetime] = {}
    for run in runs:
        gather = read_json_object(run / "run.json").get("checkpoint", {}).get("gather") or {}
        for f in gather.get("sessions") or []:
            if isinstance(f, dict) and f.get("session_id") and f.get("mtime_ns"):
                times[str(f["session_id"])] = datetime.fromtimestamp(
                    int(f["mtime_ns"]) / 1e9, tz=UTC
                )
        seen_at = gather.get("seen_at") or {}
        mined += [(t, seen_at) for t in gather.get("mined") or [] if isinstance(t, dict)]
    out: dict[tuple[str, str], _Seen] = {}
    for task, seen_at in mined:
        task_id = str(task.get("id") or "")
        corrected = str(task.get("outcome") or "") in _CORRECTED
        for session in task.get("source_sessions") or []:
            at = times.get(str(session)) or _when(seen_at.get(task_id))
            if task_id and at is not None:
                out[(task_id, str(session))] = _Seen(task_id, str(session), at, corrected)
    return list(out.values())


# --------------------------------------------------------------------------- adoptions


@dataclass(frozen=True, slots=True)
class _Adopted:
    run: Path
    report: dict[str, Any]
    at: datetime
    targets: frozenset[str]
    ids: frozenset[str] | None  # None: every kept edit of ``targets``


def _adoptions(run: Path) -> Iterable[_Adopted]:
    """The night's adoptions of its managed skill / memory: whole, or a checked subset."""
    report: dict[str, Any] | None = None
    own = receipts(run)
    if own:
        try:
            fanout = {e.name for e in load_manifest(run).entries if e.fanout}
        except SkillOptError:
            fanout = set()
        mine = [r for r in own if r.get("name") not in fanout]
        at = min((a for r in mine if (a := _when(r.get("adopted_at")))), default=None)
        if mine and at is not None:
            report = read_json_object(run / "report.json")
            kinds = frozenset(str(r.get("kind")) for r in mine)
            yield _Adopted(run, report, at, kinds, None)
    for folder in subset_dirs(run):
        done = receipts(folder)
        at = min((a for r in done if (a := _when(r.get("adopted_at")))), default=None)
        if at is None:
            continue
        report = report if report is not None else read_json_object(run / "report.json")
        ids = frozenset(str(i) for i in read_json_object(folder / SUBSET_FILE).get("edits") or [])
        yield _Adopted(run, report, at, frozenset({"skill", "memory"}), ids)


def _requests(report: Mapping[str, Any], ident: str) -> tuple[str, ...]:
    """The tasks the edit's own single trials improved, else those its reflection saw fail."""
    improved: list[str] = []
    motivated: list[str] = []
    for trial in report.get("trials") or []:
        if trial.get("kind") != "single":
            continue
        if ident not in {edit_id(e) for e in trial.get("applied") or []}:
            continue
        deltas = (trial.get("decision") or {}).get("task_deltas") or []
        improved += [str(d["task_id"]) for d in deltas if d.get("status") == DeltaStatus.IMPROVED]
        motivated += [str(t) for t in trial.get("motivated_by") or []]
    return tuple(dict.fromkeys(improved or motivated))


def _live_keys(cfg: SleepConfig, project: Path) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for target, path in (("skill", cfg.live_skill_path(project)),
                         ("memory", cfg.live_memory_path(project))):  # fmt: skip
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            text = ""
        out[target] = {near_duplicate_key(b) for b in learned_bullets(text)}
    return out


def watch_lines(cfg: SleepConfig, project: Path) -> list[WatchedLine]:
    """Every adopted learned line still in the live documents, with the sessions of its
    requests before and after its adoption (see the module docstring)."""
    runs = RunDir.list_runs(runs_dir(cfg.state_path(), project))
    seen = _sessions(runs)
    live = _live_keys(cfg, project)
    out: dict[tuple[str, str], WatchedLine] = {}
    for run in runs:
        for adopted in _adoptions(run):
            for edit in adopted.report.get("accepted_edits") or []:
                line = _watched(adopted, edit, live, seen)
                if line is not None:
                    out[(line.target, near_duplicate_key(line.line))] = line  # newest wins
    return [_with_last_test(line, runs) for line in out.values()]


def _with_last_test(line: WatchedLine, runs: Sequence[Path]) -> WatchedLine:
    """``line`` with the newest removal test a night after its adoption reported."""
    if not line.contradicted:
        return line
    key = near_duplicate_key(line.line)
    for run in reversed(runs):
        report = read_json_object(run / "report.json")
        started = _when(report.get("started_at"))
        if started is not None and started < line.adopted_at.replace(microsecond=0):
            break  # runs are oldest first (their start is to the second): none older tested it
        for row in report.get("watched_lines") or []:
            tonight = row.get("tonight") if isinstance(row, dict) else None
            if isinstance(tonight, dict) and near_duplicate_key(str(row.get("line", ""))) == key:
                test = (_night_no(report), str(tonight.get("removal", "")),
                        str(tonight.get("why", "")))  # fmt: skip
                ended = _when(report.get("ended_at")) or started
                return dataclasses.replace(line, last_test=test, last_tested_at=ended)
    return line


def _watched(
    adopted: _Adopted, edit: Any, live: Mapping[str, set[str]], seen: Sequence[_Seen]
) -> WatchedLine | None:
    if not isinstance(edit, dict) or str(edit.get("op", "")).lower() not in _WRITES_A_LINE:
        return None
    ident, target = str(edit.get("id") or edit_id(edit)), str(edit.get("target", ""))
    content = str(edit.get("content", "")).strip().removeprefix("- ").strip()
    if target not in adopted.targets or (adopted.ids is not None and ident not in adopted.ids):
        return None
    if near_duplicate_key(content) not in live.get(target, set()):
        return None  # no longer in the documents: nothing to watch
    requests = _requests(adopted.report, ident)
    mine = [s for s in seen if s.task_id in set(requests)]
    return WatchedLine(
        line=content,
        target=target,
        edit_id=ident,
        night=_night_no(adopted.report),
        adopted_at=adopted.at,
        requests=requests,
        before=Tally.of([s for s in mine if s.at < adopted.at]),
        after=Tally.of([s for s in mine if s.at >= adopted.at]),
        run_dir=str(adopted.run),
    )
