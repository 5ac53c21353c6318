"""How many bytes of one reply a member reads before it gives up on the call.

A reply far larger than the request asked for (a model that never stops, a hostile or
broken endpoint, a CLI that floods stdout) is a failed call
(:class:`~skillopt.errors.ReplyTooLargeError`,
retryable, class ``too_large``), and reading stops at the cap instead of holding the whole
thing in memory first. The default cap is sized from the request's own output budget
(``max_output_tokens``): a 300-token judgement gets well under a hundred kilobytes over
HTTP, a long answer more. A member's ``max_reply_bytes`` replaces it. How HTTP bodies are
cut off: :mod:`skillopt.backends.http.cap`; CLI output: :mod:`skillopt.backends.cli.process`.
"""

from __future__ import annotations

__all__ = [
    "CLI_BASE_BYTES",
    "CLI_BYTES_PER_TOKEN",
    "CLI_UNSIZED_BYTES",
    "HTTP_BASE_BYTES",
    "HTTP_BYTES_PER_TOKEN",
    "cli_reply_cap",
    "http_reply_cap",
]

HTTP_BASE_BYTES = 64 * 1024  # envelope, usage, headers of the JSON body
HTTP_BYTES_PER_TOKEN = 64  # a token is ~4 characters; escaped non-ASCII is 6-12 bytes each
CLI_BASE_BYTES = 1024 * 1024  # a CLI's event stream and metadata around the answer
CLI_BYTES_PER_TOKEN = 1024
CLI_UNSIZED_BYTES = 4 * 1024 * 1024  # a CLI run with no request to size it from (harness)


def http_reply_cap(max_output_tokens: int, override: int | None = None) -> int:
    """The cap for one HTTP reply asking for at most ``max_output_tokens`` tokens."""
    if override is not None:
        return override
    return HTTP_BASE_BYTES + HTTP_BYTES_PER_TOKEN * max(0, max_output_tokens)


def cli_reply_cap(max_output_tokens: int, override: int | None = None) -> int:
    """The cap for each captured stream (stdout, stderr) of one CLI call."""
    if override is not None:
        return override
    return CLI_BASE_BYTES + CLI_BYTES_PER_TOKEN * max(0, max_output_tokens)
