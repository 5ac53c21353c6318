"""Replace known secret shapes with ``[REDACTED:kind]`` and strip terminal control sequences.

Applied to every outbound prompt, every log event and every string we persist.
Patterns are ordered most-specific first so that e.g. an Anthropic key is labelled
``anthropic_key`` rather than the generic ``openai_key``.
"""

from __future__ import annotations

import re
from typing import Any

_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    (
        "private_key",
        re.compile(
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----"
        ),
    ),
    ("anthropic_key", re.compile(r"\bsk-ant-[A-Za-z0-9_\-]{16,}")),
    ("openai_key", re.compile(r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{16,}")),
    ("github_token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})")),
    ("aws_access_key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    (
        "azure_connection_string",
        re.compile(
            r"(?i)\b(?:DefaultEndpointsProtocol|AccountKey|SharedAccessKey|SharedAccessSignature)"
            r"=[^;\s\"']+(?:;[A-Za-z]+=[^;\s\"']+)*"
        ),
    ),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}")),
    ("bearer", re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/\-]{12,}=*")),
    ("slack_token", re.compile(r"\bxox[abposr]-[A-Za-z0-9\-]{10,}")),
    ("google_api_key", re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b")),
    ("url_credentials", re.compile(r"(?<=://)[^/\s:@]+:[^/\s@]+(?=@)")),
    (
        "secret_assignment",
        re.compile(
            r"(?i)(?<![A-Za-z0-9])((?:[A-Z0-9_]*_)?(?:api[_-]?key|apikey|secret|token|password|passwd|pwd|"
            r"access[_-]?key|client[_-]?secret|auth)(?:[A-Z0-9_]*)?)(\s*[=:]\s*[\"']?)([^\s\"'&;,]{6,})"
        ),
    ),
]

# CSI / OSC / other escape sequences, plus C0 controls except tab and newline.
_ANSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]|[\x00-\x08\x0b-\x1f\x7f]"
)


def redact_text(text: str) -> str:
    """Return ``text`` with every known secret shape replaced by ``[REDACTED:kind]``."""
    if not text:
        return text
    for kind, pattern in _PATTERNS:
        if kind == "secret_assignment":
            text = pattern.sub(lambda m: f"{m.group(1)}{m.group(2)}[REDACTED:{kind}]", text)
        else:
            text = pattern.sub(f"[REDACTED:{kind}]", text)
    return text


def strip_control(text: str) -> str:
    """Remove terminal escape sequences and control characters (keeps tab, newline)."""
    return _ANSI.sub("", text.replace("\r\n", "\n"))


def sanitize(text: str) -> str:
    """Redact, then strip control sequences: what we apply before printing or persisting."""
    return strip_control(redact_text(text))


def redact_obj(value: Any) -> Any:
    """Recursively redact every string in a JSON-like structure."""
    if isinstance(value, str):
        return sanitize(value)
    if isinstance(value, dict):
        return {k: redact_obj(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_obj(v) for v in value]
    return value
