"""Content-addressed response cache: in memory, optionally persisted as a JSONL file.

The key is ``sha256(role, model, full request text, sample_id)``. Only successful,
non-empty replies are ever stored, so a transient failure can never stick for a night.
Callers that need a fresh sample (the gate's final check) set ``use_cache=False`` on the
request and the pool bypasses the cache both ways.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from skillopt.atomicio import append_jsonl, read_jsonl
from skillopt.backends.base import CompletionRequest, Usage
from skillopt.errors import CorruptStateError
from skillopt.redact import sanitize


@dataclass(frozen=True, slots=True, kw_only=True)
class CachedReply:
    text: str
    usage: Usage
    member: str


def cache_key(*, role: str, model: str, request: CompletionRequest) -> str:
    """A stable hex key; fields are length-prefixed so no two tuples collide by joining."""
    digest = hashlib.sha256()
    for part in (role, model, request.text_for_key(), str(request.sample_id)):
        data = part.encode("utf-8")
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()


class ResponseCache:
    """Memory cache with an optional append-only JSONL file behind it.

    With ``path`` set, existing entries are loaded at construction and each new entry is
    appended (redacted) as one complete line. A torn last line from a crash is ignored.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *, max_entries: int = 100_000):
        self._path = Path(path) if path is not None else None
        self._max_entries = max_entries
        self._entries: dict[str, CachedReply] = {}
        self.hits = 0
        self.misses = 0
        if self._path is not None:
            self._load(self._path)

    def _load(self, path: Path) -> None:
        try:
            rows = read_jsonl(path)
        except (OSError, ValueError) as exc:
            raise CorruptStateError(str(path), f"response cache unreadable: {exc}") from exc
        for row in rows:
            try:
                usage = row["usage"]
                self._entries[str(row["key"])] = CachedReply(
                    text=str(row["text"]),
                    member=str(row.get("member", "")),
                    usage=Usage(
                        prompt_tokens=int(usage["prompt_tokens"]),
                        completion_tokens=int(usage["completion_tokens"]),
                        estimated=bool(usage.get("estimated", False)),
                    ),
                )
            except (KeyError, TypeError, ValueError) as exc:
                raise CorruptStateError(str(path), f"bad cache entry: {exc}") from exc

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> CachedReply | None:
        hit = self._entries.get(key)
        if hit is None:
            self.misses += 1
        else:
            self.hits += 1
        return hit

    def put(self, key: str, reply: CachedReply) -> bool:
        """Store a reply; refuses (returns False) empty text. Existing keys are kept."""
        if not reply.text.strip() or key in self._entries:
            return False
        if len(self._entries) >= self._max_entries:
            # Drop the oldest entry (dicts keep insertion order).
            self._entries.pop(next(iter(self._entries)))
        stored = CachedReply(text=sanitize(reply.text), usage=reply.usage, member=reply.member)
        self._entries[key] = stored
        if self._path is not None:
            append_jsonl(
                self._path,
                [
                    {
                        "key": key,
                        "text": stored.text,
                        "member": stored.member,
                        "usage": {
                            "prompt_tokens": stored.usage.prompt_tokens,
                            "completion_tokens": stored.usage.completion_tokens,
                            "estimated": stored.usage.estimated,
                        },
                    }
                ],
            )
        return True
