"""Every transcript source, by kind: how it lists the sessions that may be the project's."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from skillopt_sleep.harvest import claude_code, codex, copilot_cli, cursor, opencode, pi, vscode
from skillopt_sleep.harvest.common import SessionBuilder
from skillopt_sleep.harvest.digest import SourceKind
from skillopt_sleep.harvest.refs import Lister, Listing, PathReader, ReadOptions, file_refs

__all__ = ["LISTERS"]


def _with_options(read_session: Callable[..., SessionBuilder]) -> PathReader:
    """A reader of the older signature ``(path, tally, max_line_bytes=, self_markers=)``."""

    def read(path: Path, options: ReadOptions) -> SessionBuilder:
        return read_session(
            path,
            options.tally,
            max_line_bytes=options.max_line_bytes,
            self_markers=options.self_markers,
        )

    return read


_read_claude = _with_options(claude_code.read_session)
_read_codex = _with_options(codex.read_session)


def _list_claude(home: Path, scope: Path | None, resources: ExitStack) -> Listing:
    return file_refs(SourceKind.CLAUDE_CODE, claude_code.session_files(home), _read_claude)


def _list_codex(home: Path, scope: Path | None, resources: ExitStack) -> Listing:
    return file_refs(SourceKind.CODEX, codex.session_files(home), _read_codex)


LISTERS: dict[SourceKind, Lister] = {
    SourceKind.CLAUDE_CODE: _list_claude,
    SourceKind.CODEX: _list_codex,
    SourceKind.COPILOT: vscode.list_sessions,
    SourceKind.COPILOT_CLI: copilot_cli.list_sessions,
    SourceKind.CURSOR: cursor.list_sessions,
    SourceKind.PI: pi.list_sessions,
    SourceKind.OPENCODE: opencode.list_sessions,
}
