"""The model's side of a mining prompt for a fake server: read the prompt's session entries
(``# Session S1``, ...) and answer each one, in the shape the prompt asks for.

``batch_reply(per_entry)`` makes a ``reply_fn``: ``per_entry(body)`` gives the tasks of one
entry (its text under the heading), ``None`` to leave the entry out of the reply (a model
that skipped it), or a non-list value to send as that entry's garbled ``tasks``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from support.fake_model_server import Request

ENTRY = re.compile(r"^# Session (S\d+)\b.*$", re.M)

PerEntry = Callable[[str], Any]


def entries(prompt: str) -> list[tuple[str, str]]:
    """``(label, body)`` of each session entry of a mining prompt, in order."""
    found = list(ENTRY.finditer(prompt))
    out = []
    for i, match in enumerate(found):
        end = found[i + 1].start() if i + 1 < len(found) else len(prompt)
        out.append((match.group(1), prompt[match.end() : end]))
    return out


def answer(prompt: str, per_entry: PerEntry) -> str:
    """The reply to a mining prompt: ``{"sessions": [{"session", "tasks"}, ...]}``."""
    sessions = []
    for label, body in entries(prompt):
        tasks = per_entry(body)
        if tasks is not None:
            sessions.append({"session": label, "tasks": tasks})
    return json.dumps({"sessions": sessions})


def batch_reply(per_entry: PerEntry) -> Callable[[Request], str]:
    """A fake server's ``reply_fn`` answering mining prompts entry by entry."""
    return lambda request: answer(request.user_text, per_entry)
