"""Every transcript source, by kind: how it lists the sessions that may be the project's.

Each source module offers ``list_sessions(home, scope, resources)`` (a :data:`~.refs.Lister`)
whose refs read a session with ``read(options)``; file sources read with
``read_session(path, options)`` (:data:`~.refs.PathReader`).
"""

from __future__ import annotations

from skillopt_sleep.harvest import claude_code, codex, copilot_cli, cursor, opencode, pi, vscode
from skillopt_sleep.harvest.digest import SourceKind
from skillopt_sleep.harvest.refs import Lister

__all__ = ["LISTERS"]

LISTERS: dict[SourceKind, Lister] = {
    SourceKind.CLAUDE_CODE: claude_code.list_sessions,
    SourceKind.CODEX: codex.list_sessions,
    SourceKind.COPILOT: vscode.list_sessions,
    SourceKind.COPILOT_CLI: copilot_cli.list_sessions,
    SourceKind.CURSOR: cursor.list_sessions,
    SourceKind.PI: pi.list_sessions,
    SourceKind.OPENCODE: opencode.list_sessions,
}
