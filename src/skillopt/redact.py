"""Replace known secret shapes with ``[REDACTED:kind]`` and strip terminal control sequences.

Applied to every outbound prompt, every log event and every string we persist.

Public API::

    redact_text(text) -> str      # secrets -> [REDACTED:kind]
    strip_control(text) -> str    # ANSI/OSC/DCS escapes, C0/C1 controls, bidi overrides
    sanitize(text) -> str         # both: what we apply before printing or persisting
    redact_obj(value) -> Any      # recursive over JSON-like data; also blanks secret-named fields
    secret_kinds(text) -> tuple   # the kinds of secret shape redact_text would replace

Each distinct text is scanned once: results are kept in a bounded memo keyed by the text
itself (its content hash, then equality), so re-saving a document whose strings were
already seen (``run.json`` on every checkpoint, a report built from redacted replies)
costs a dictionary look-up per string instead of a scan.

Patterns run most-specific first, so an Anthropic key is labelled ``anthropic_key`` rather
than ``openai_key``; a value already redacted is never redacted again (idempotent). Hex
digests (our sha256 content hashes) are deliberately left alone. This is a best-effort
filter of well-known shapes, not a guarantee: a bare random string with no recognisable
prefix or context cannot be told apart from an id.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

__all__ = [
    "forget_memos",
    "redact_obj",
    "redact_text",
    "sanitize",
    "secret_kinds",
    "strip_control",
]

_NOT_DONE = r"(?!\[REDACTED)"

# Words that make a key or field name secret ("OPENAI_API_KEY", "db-password", "authToken").
_SECRET_WORD = (
    r"(?:api[_-]?key|apikey|secret|token|password|passwd|passphrase|pwd|access[_-]?key|"
    r"client[_-]?secret|private[_-]?key|auth[_-]?token|session[_-]?key|credentials?)"
)
# Suffixes that name *about* a secret rather than hold one ("api_key_env", "token_count").
_META_SUFFIX = (
    r"(?:env|var|name|file|path|source|kind|type|count|len|length|id|url|endpoint|hint|"
    r"header|field|provider|cmd|command|limit|budget|usage|used|estimate|estimated)"
)
_SECRET_NAME = (
    rf"(?:[A-Za-z0-9]+[_-])*{_SECRET_WORD}(?:[_-](?!{_META_SUFFIX}(?![A-Za-z0-9]))[A-Za-z0-9]+)*"
)

_Sub = tuple[str, re.Pattern[str], Callable[[re.Match[str]], str] | None]

# For each kind, substrings of which at least one must be present for the pattern to match
# (a necessary condition, checked with a plain ``in`` before the regex runs). Kinds whose
# pattern ignores case list lower-case triggers and are checked against the folded text.
# Most text holds no secret, so this skips nearly every regex scan.
_TRIGGERS: dict[str, tuple[tuple[str, ...] | re.Pattern[str], bool]] = {
    "private_key": (("PRIVATE KEY",), False),
    "anthropic_key": (("sk-ant-",), False),
    "stripe_key": (("_live_", "_test_"), False),
    "openai_key": (("sk-",), False),
    "github_token": (("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"), False),
    "gitlab_token": (("glpat-",), False),
    "huggingface_token": (("hf_",), False),
    "npm_token": (("npm_",), False),
    "aws_access_key": (("AKIA", "ASIA", "AGPA", "AIDA", "AROA"), False),
    "azure_connection_string": (
        ("defaultendpointsprotocol", "accountkey", "sharedaccesskey", "sharedaccesssignature"),
        True,
    ),
    "azure_sas": (("sig=",), True),
    "jwt": (("eyJ",), False),
    "slack_token": (("xox",), False),
    "google_api_key": (("AIza",), False),
    "authorization": (("authorization",), True),
    "bearer": (("bearer",), True),
    "url_credentials": (("://",), False),
    # A secret word, the rest of the name, then the assignment: far cheaper than the full
    # pattern, which must also rule out meta names and already-redacted values.
    "secret_assignment": (
        re.compile(
            r"(?:key|secret|token|passw|passphrase|pwd|credential)[a-z0-9_\-]*[\"']?\s*[=:]"
        ),
        True,
    ),
    "azure_key": (re.compile(r"[_-]key[\"']?\s*[:=]"), True),
}


def _keep_prefix(kind: str) -> Callable[[re.Match[str]], str]:
    """Keep group 1 (the key and separator) and redact the rest of the match."""

    def repl(m: re.Match[str]) -> str:
        value = m.group(2)
        quote = value[0] if value[:1] in "\"'" else ""
        return f"{m.group(1)}{quote}[REDACTED:{kind}]{quote}"

    return repl


_PATTERNS: list[_Sub] = [
    (
        "private_key",
        # An unterminated block (a truncated transcript) is redacted to the end of the text.
        re.compile(
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----[\s\S]*?"
            r"(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|\Z)"
        ),
        None,
    ),
    ("anthropic_key", re.compile(r"\bsk-ant-[A-Za-z0-9_\-]{16,}"), None),
    ("stripe_key", re.compile(r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}"), None),
    ("openai_key", re.compile(r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{16,}"), None),
    (
        "github_token",
        re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"),
        None,
    ),
    ("gitlab_token", re.compile(r"\bglpat-[A-Za-z0-9_\-]{20,}"), None),
    ("huggingface_token", re.compile(r"\bhf_[A-Za-z0-9]{30,}"), None),
    ("npm_token", re.compile(r"\bnpm_[A-Za-z0-9]{36}\b"), None),
    ("aws_access_key", re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}\b"), None),
    (
        "azure_connection_string",
        re.compile(
            r"(?i)\b(?:DefaultEndpointsProtocol|AccountKey|SharedAccessKey|SharedAccessSignature)"
            r"=[^;\s\"']+(?:;[A-Za-z]+=[^;\s\"']+)*"
        ),
        None,
    ),
    ("azure_sas", re.compile(r"(?i)([?&]sig=)([A-Za-z0-9%/+=]{16,})"), _keep_prefix("azure_sas")),
    (
        "jwt",
        re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
        None,
    ),
    ("slack_token", re.compile(r"\bxox[abposre]-[A-Za-z0-9\-]{10,}"), None),
    ("google_api_key", re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b"), None),
    (
        "authorization",
        re.compile(
            r"(?i)(\b(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?"
            r"(?:(?:basic|bearer|token|digest)\s+)?)"
            rf"({_NOT_DONE}[^\s\"',;]{{8,}})"
        ),
        _keep_prefix("authorization"),
    ),
    (
        "bearer",
        re.compile(rf"(?i)(\bbearer\s+)({_NOT_DONE}[A-Za-z0-9._~+/\-]{{12,}}=*)"),
        _keep_prefix("bearer"),
    ),
    (
        "url_credentials",
        re.compile(r"(?<=://)[^/\s:@\[]+:[^/\s@]+(?=@)"),
        None,
    ),
    (
        "secret_assignment",
        re.compile(
            rf"(?<![A-Za-z0-9])({_SECRET_NAME}[\"']?\s*(?:=|:(?!//))\s*)"
            rf"(\"{_NOT_DONE}[^\"\n]{{4,}}\"|'{_NOT_DONE}[^'\n]{{4,}}'"
            rf"|{_NOT_DONE}[^\s\"'&;,<>]{{6,}})",
            re.IGNORECASE,
        ),
        _keep_prefix("secret_assignment"),
    ),
    (
        # Names the secret words miss (AZURE_OPENAI_KEY, Ocp-Apim-Subscription-Key), so
        # the value must have the shape of an Azure key: 32 hex digits or 84 alphanumerics.
        "azure_key",
        re.compile(
            r"(?i)(?<![A-Za-z0-9])((?:[A-Za-z0-9]+[_-])+key[\"']?\s*[:=]\s*[\"']?)"
            r"([0-9a-f]{32}|[A-Za-z0-9]{84})(?![A-Za-z0-9])"
        ),
        _keep_prefix("azure_key"),
    ),
]

_SECRET_KEY = re.compile(rf"(?i)^{_SECRET_NAME}$")


@functools.lru_cache(maxsize=4096)
def _is_secret_key(key: str) -> bool:
    """A field name that holds a secret whatever its value (few distinct names: cached)."""
    return _SECRET_KEY.match(key) is not None


# CSI, OSC, DCS/SOS/PM/APC strings, charset selection, other two-byte escapes; C0 controls
# except tab and newline; DEL and C1 controls; Unicode bidi overrides and isolates.
_CONTROL = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"
    r"|\x1b[PX^_][\s\S]*?(?:\x1b\\|\x07|\Z)"
    r"|\x1b[()*+][0-9A-Za-z]"
    r"|\x1b[0-~]"
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]"
    r"|[\u202a-\u202e\u2066-\u2069]"
)


class _Memo:
    """Results of a pure ``str -> str`` function, bounded in entries and characters.

    When full it is emptied whole (cheap and simple; the next save fills it again).
    """

    def __init__(self, *, max_entries: int = 50_000, max_chars: int = 16_000_000) -> None:
        self.max_entries = max_entries
        self.max_chars = max_chars
        self._results: dict[str, str] = {}
        self._chars = 0

    def get(self, text: str) -> str | None:
        return self._results.get(text)

    def put(self, text: str, result: str) -> None:
        size = len(text) + (len(result) if result is not text else 0)
        if size > self.max_chars // 8:
            return  # one huge text would push everything else out
        if len(self._results) >= self.max_entries or self._chars + size > self.max_chars:
            self._results = {}
            self._chars = 0
        self._results[text] = result
        self._chars += size

    def __len__(self) -> int:
        return len(self._results)

    def clear(self) -> None:
        self._results = {}
        self._chars = 0

    @property
    def chars(self) -> int:
        return self._chars


_REDACTED = _Memo()
_SANITIZED = _Memo()


def forget_memos() -> None:
    """Empty the redaction memos. They pay off within one job (a night's texts recur
    thousands of times); a long-lived process (the daemon) empties them between jobs, or
    each night's one-off texts (its report pages, ~250 KB) pile up to the bound."""
    _REDACTED.clear()
    _SANITIZED.clear()


def redact_text(text: str) -> str:
    """Return ``text`` with every known secret shape replaced by ``[REDACTED:kind]``."""
    if not text:
        return text
    done = _REDACTED.get(text)
    if done is None:
        done = _scan(text)
        _REDACTED.put(text, done)
    return done


def _scan(text: str) -> str:
    folded = text.casefold()
    for kind, pattern, repl in _PATTERNS:
        triggers, fold = _TRIGGERS[kind]
        haystack = folded if fold else text
        if isinstance(triggers, re.Pattern):
            if not triggers.search(haystack):
                continue
        elif not any(trigger in haystack for trigger in triggers):
            continue
        new = pattern.sub(repl if repl is not None else f"[REDACTED:{kind}]", text)
        if new != text:
            text, folded = new, new.casefold()
    return text


_REDACTED_KIND = re.compile(r"\[REDACTED:([a-z_]+)\]")


def secret_kinds(text: str) -> tuple[str, ...]:
    """The kinds of secret shape in ``text`` (sorted, each once): what redaction would
    replace, for saying so without repeating the secret."""
    before = Counter(_REDACTED_KIND.findall(text))
    after = Counter(_REDACTED_KIND.findall(redact_text(text)))
    return tuple(sorted(after - before))


def strip_control(text: str) -> str:
    """Remove terminal escape sequences and control characters (keeps tab and newline)."""
    return _CONTROL.sub("", text.replace("\r\n", "\n"))


def sanitize(text: str) -> str:
    """Redact, then strip control sequences (and redact again: an escape sequence inside a
    token must not split it past the patterns)."""
    if not text:
        return text
    done = _SANITIZED.get(text)
    if done is None:
        done = _scan(strip_control(_scan(text)))
        _SANITIZED.put(text, done)
    return done


def redact_obj(value: Any) -> Any:
    """Recursively sanitize every string in a JSON-like structure (tuples become lists).

    A string stored under a secret-looking key (``api_key``, ``password``, ``*_token``) is
    replaced whole, whatever its shape.
    """
    if isinstance(value, str):
        return sanitize(value)
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        for key, item in value.items():
            if isinstance(key, str) and isinstance(item, str) and item and _is_secret_key(key):
                out[sanitize(key)] = "[REDACTED:secret_field]"
            else:
                out[sanitize(key) if isinstance(key, str) else key] = redact_obj(item)
        return out
    if isinstance(value, list | tuple):
        return [redact_obj(v) for v in value]
    return value
