"""Plain-language reasons for what a harvest found (or did not), for the report and CLI."""

from __future__ import annotations

from collections.abc import Sequence

from skillopt_sleep.harvest import HarvestResult
from skillopt_sleep.tasks.records import HarvestWindow

__all__ = ["SINCE_HINT", "explain_empty", "harvest_notes"]

SINCE_HINT = "run `skillopt-sleep harvest --since DATE`"


def _day(window: HarvestWindow) -> str:
    return window.start.strftime("%Y-%m-%d %H:%M UTC") if window.start else "the beginning"


def explain_empty(result: HarvestResult, window: HarvestWindow, *, sources: Sequence[str]) -> str:
    """Why a night has no task at all (no new session mined, nothing to recall)."""
    diag = result.diagnostics
    outside = result.outside_window
    if outside and not window.fixed:
        return (
            f"{outside} session(s) are older than the lookback window of "
            f"{window.lookback_hours:g}h; widen it with sources.lookback_hours or {SINCE_HINT}"
        )
    if outside and not result.digests:
        return (
            f"no new session since the last harvest; {outside} older session(s) are outside "
            f"the harvest window (it starts {_day(window)}): {SINCE_HINT} to include them"
        )
    if diag.files_seen == 0:
        return (
            f"no session transcripts of this project found (sources: {', '.join(sources)}; "
            "see sources.kinds and each source's location key)"
        )
    if not result.digests and diag.files_read == 0:
        return f"no new session since the last harvest ({diag.files_harvested_before} harvested)"
    if not result.digests:
        dropped = ", ".join(f"{k} {v}" for k, v in sorted(diag.dropped.items())) or "none"
        return (
            f"{diag.files_read} session(s) read, none usable for this project "
            f"(dropped: {dropped}; unreadable: {diag.files_failed})"
        )
    return f"{len(result.digests)} session(s) read, but none held a request to learn from"


def harvest_notes(
    result: HarvestResult, *, limit: int, n_mined: int, n_taken: int, n_recalled: int
) -> tuple[str, ...]:
    """What the harvest left for later nights and where tonight's tasks came from."""
    notes = []
    if result.backlog:
        notes.append(
            f"{result.backlog} pending session(s) wait for the next nights "
            f"(at most {limit} a night: sources.max_sessions)"
        )
    if n_mined > n_taken:
        notes.append(
            f"{n_mined - n_taken} of {n_mined} mined task(s) are archived for later nights "
            "(night.max_tasks)"
        )
    if n_recalled:
        notes.append(f"{n_recalled} task(s) recalled from the archive")
    if not result.digests and n_recalled:
        notes.append("no new session tonight: learning from the archive")
    return tuple(notes)
