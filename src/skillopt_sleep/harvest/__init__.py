"""Harvest agent transcripts into :class:`SessionDigest` records.

Every agent is a source (:mod:`.sources`): Claude Code, Codex, VS Code Copilot Chat,
Copilot CLI, Cursor, Pi and OpenCode, each found where :mod:`.locations` says. A source
lists the sessions that may be the project's (:mod:`.refs`); :mod:`.scan` decides which to
read, reads them newest first and keeps the project's; :mod:`.result` is what it returns.

:func:`harvest` is **synchronous** local-disk reading (no network, no writes). From async
code call it through ``anyio.to_thread.run_sync(functools.partial(harvest, ...))``.
It never raises for bad transcript content: malformed lines (of any shape or depth),
unreadable files and overlong lines are skipped and counted in :class:`HarvestDiagnostics`;
invalid UTF-8 is replaced and counted.

Two cursors: given ``harvested`` (the set of :class:`SessionFile` s already harvested),
a session is pending until its exact file version is recorded, so nothing is skipped
for ever (the night's way). Without it, ``since`` is a time cursor (the older way).

This module is the package face only: it names what callers use.
"""

from __future__ import annotations

from skillopt_sleep.harvest.common import SELF_MARKER, DropReason
from skillopt_sleep.harvest.digest import FeedbackSignal, Sentiment, SessionDigest, SourceKind
from skillopt_sleep.harvest.files import SessionFile
from skillopt_sleep.harvest.locations import SourceSpec
from skillopt_sleep.harvest.result import HarvestDiagnostics, HarvestResult
from skillopt_sleep.harvest.scan import harvest
from skillopt_sleep.harvest.timeparse import parse_instant

__all__ = [
    "SELF_MARKER",
    "DropReason",
    "FeedbackSignal",
    "HarvestDiagnostics",
    "HarvestResult",
    "Sentiment",
    "SessionDigest",
    "SessionFile",
    "SourceKind",
    "SourceSpec",
    "harvest",
    "parse_instant",
]
