"""Content-addressed response cache: in memory, optionally persisted as a JSONL file.

The key is ``sha256(role, model, full request text, sample_id)``. Only successful,
non-empty replies are ever stored, so a transient failure can never stick for a night.
Callers that need a fresh sample (the gate's final check) set ``use_cache=False`` on the
request and the pool bypasses the cache both ways.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from skillopt.atomicio import append_jsonl, atomic_write_text, read_jsonl
from skillopt.backends.base import CompletionRequest, Usage
from skillopt.errors import CorruptStateError
from skillopt.redact import sanitize

__all__ = ["CachedReply", "ResponseCache", "cache_key"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CachedReply:
    text: str
    usage: Usage
    member: str


def cache_key(*, role: str, model: str, request: CompletionRequest) -> str:
    """A stable hex key; fields are length-prefixed so no two tuples collide by joining.

    The output cap and JSON mode are part of the key: a reply cut short under a small cap,
    or free text asked without JSON mode, must not answer a request that differs there.
    """
    digest = hashlib.sha256()
    shape = f"{request.max_output_tokens}|{int(request.json_mode)}"
    for part in (role, model, request.text_for_key(), str(request.sample_id), shape):
        data = part.encode("utf-8")
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()


class ResponseCache:
    """Memory cache with an optional append-only JSONL file behind it.

    With ``path`` set, existing entries are loaded at construction; new entries (sanitized
    on the way to disk; memory keeps them as served) are buffered and appended in batches
    of ``flush_every`` lines, one write and one fsync per batch, so the event loop is not
    stalled by an fsync per call. :meth:`flush` writes
    the rest (the pool calls it on close); a crash loses at most one unflushed batch of a
    cache, never a result. A torn last line is ignored on load, and a file that has grown
    past twice ``max_entries`` lines is compacted (atomically) when loaded.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        max_entries: int = 100_000,
        flush_every: int = 64,
    ) -> None:
        self._path = Path(path) if path is not None else None
        self._max_entries = max_entries
        self._flush_every = max(1, flush_every)
        self._entries: dict[str, CachedReply] = {}
        self._pending: list[dict[str, object]] = []
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
        while len(self._entries) > self._max_entries:
            self._entries.pop(next(iter(self._entries)))
        if len(rows) > 2 * self._max_entries:
            lines = [_row(key, reply) for key, reply in self._entries.items()]
            atomic_write_text(path, "".join(_dumps_line(line) for line in lines))

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
        # In memory the reply is kept as served, so a hit is judged exactly like the miss
        # was (a redacted or stripped text could change its length and its score); only
        # what reaches the disk is sanitized.
        self._entries[key] = reply
        if self._path is not None:
            self._pending.append(_row(key, reply))
            if len(self._pending) >= self._flush_every:
                self.flush()
        return True

    def flush(self) -> None:
        """Append the buffered entries to the file (no-op without a path)."""
        if self._path is not None and self._pending:
            batch, self._pending = self._pending, []
            append_jsonl(self._path, batch)


def _row(key: str, reply: CachedReply) -> dict[str, object]:
    return {
        "key": key,
        "text": sanitize(reply.text),
        "member": reply.member,
        "usage": {
            "prompt_tokens": reply.usage.prompt_tokens,
            "completion_tokens": reply.usage.completion_tokens,
            "estimated": reply.usage.estimated,
        },
    }


def _dumps_line(row: dict[str, object]) -> str:
    """One JSONL line, in the same form :func:`append_jsonl` writes."""
    return json.dumps(row, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"
