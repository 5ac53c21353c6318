"""A provider's prompt cache, simulated: how many prompt tokens a real endpoint would serve
from its cache, so a fake server can report usage the way OpenAI and Anthropic do.

Providers cache prompt *prefixes*: a request whose first N tokens equal the first N tokens of
an earlier request (OpenAI: in blocks of 128 tokens, for prompts of at least 1024 tokens)
pays for those N tokens at the cached rate and reports them as
``usage.prompt_tokens_details.cached_tokens``. This keeps the hashes of every block-aligned
prefix seen so far (the messages serialised in order, roles included) and answers, per
request, the longest one seen before. Tokens are counted as characters / 4, like
:meth:`skillopt.backends.base.Usage.estimate`.

``min_tokens=0`` measures prompt layout rather than a provider's rule: the share of prompt
text that repeats a prefix already sent, whatever the prompt's length.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from typing import Any

__all__ = ["PromptCache", "PromptUsage", "prompt_text"]

CHARS_PER_TOKEN = 4


@dataclass(frozen=True)
class PromptUsage:
    prompt_tokens: int
    cached_tokens: int


def prompt_text(body: Any) -> str:
    """The request's messages (chat) or input (responses) in order, one canonical string."""
    body = body if isinstance(body, dict) else {}
    items = body.get("messages") or body.get("input") or []
    if isinstance(items, str):
        return items
    parts: list[str] = []
    for item in items:
        if not isinstance(item, dict):
            continue
        content = item.get("content")
        if isinstance(content, list):
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        parts.append(f"<{item.get('role', '')}>{content}")
    return "".join(parts)


class PromptCache:
    """Thread-safe: the fake server answers from its own thread."""

    def __init__(self, *, block_tokens: int = 128, min_tokens: int = 1024) -> None:
        self.block_chars = block_tokens * CHARS_PER_TOKEN
        self.min_chars = min_tokens * CHARS_PER_TOKEN
        self._seen: set[bytes] = set()
        self._lock = threading.Lock()

    def usage(self, text: str) -> PromptUsage:
        """Prompt and cached tokens of a request whose prompt is ``text``; remembers it."""
        digest = hashlib.sha256()
        cached_chars = 0
        hashes: list[bytes] = []
        for end in range(self.block_chars, len(text) + 1, self.block_chars):
            digest.update(text[end - self.block_chars : end].encode())
            hashes.append(digest.copy().digest())
        with self._lock:
            for i, h in enumerate(hashes):
                if h not in self._seen:
                    break
                cached_chars = (i + 1) * self.block_chars
            self._seen.update(hashes)
        prompt = max(1, len(text) // CHARS_PER_TOKEN)
        if len(text) < self.min_chars:
            cached_chars = 0
        return PromptUsage(prompt_tokens=prompt, cached_tokens=cached_chars // CHARS_PER_TOKEN)
