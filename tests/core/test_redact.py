"""Redaction: every secret shape, no false positives on our own data, control stripping."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from skillopt.redact import redact_obj, redact_text, sanitize, secret_kinds, strip_control

# (kind, text with a secret, the secret part that must disappear)
SHAPES = [
    ("openai_key", "key: sk-abc123def456ghi789jkl0 ok", "abc123def456ghi789jkl0"),
    ("openai_key", "sk-proj-AbCdEf0123456789AbCdEf0123", "AbCdEf0123456789AbCdEf0123"),
    ("anthropic_key", "use sk-ant-api03-abcdefghijklmnop123", "abcdefghijklmnop123"),
    ("stripe_key", "sk_live_abcdefghijklmnop1234", "abcdefghijklmnop1234"),
    ("github_token", "ghp_abcdefghijklmnopqrstuvwxyz0123", "abcdefghijklmnopqrstuvwxyz0123"),
    ("github_token", "github_pat_11ABCDEFG0123456789_abcdefghij", "11ABCDEFG0123456789"),
    ("gitlab_token", "glpat-abcdefghij0123456789", "abcdefghij0123456789"),
    (
        "huggingface_token",
        "hf_abcdefghijklmnopqrstuvwxyz012345",
        "abcdefghijklmnopqrstuvwxyz012345",
    ),
    (
        "npm_token",
        "npm_abcdefghijklmnopqrstuvwxyz0123456789",
        "abcdefghijklmnopqrstuvwxyz0123456789",
    ),
    ("aws_access_key", "AKIAIOSFODNN7EXAMPLE", "IOSFODNN7EXAMPLE"),
    (
        "azure_connection_string",
        "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=c2VjcmV0a2V5==;x=y",
        "c2VjcmV0a2V5",
    ),
    (
        "azure_sas",
        "https://a.blob.core.windows.net/c?sv=2020&sig=AbCdEf0123456789%2Bxyz",
        "AbCdEf0123456789",
    ),
    (
        "jwt",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "dozjgNryP4J3jVmNHl0w5N",
    ),
    ("slack_token", "xoxb-1234567890-abcdefghij", "1234567890-abcdefghij"),
    (
        "google_api_key",
        "AIzaSyA1234567890abcdefghijklmnopqrstuv",
        "SyA1234567890abcdefghijklmnopqrstuv",
    ),
    ("authorization", "Authorization: Bearer abcdefghijklmnop1234", "abcdefghijklmnop1234"),
    ("authorization", "authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA"),
    ("bearer", "header bearer abcdefghijklmnop1234", "abcdefghijklmnop1234"),
    ("url_credentials", "postgres://admin:hunter2secret@db:5432/x", "hunter2secret"),
    ("secret_assignment", "export OPENAI_API_KEY=abcd1234efgh5678", "abcd1234efgh5678"),
    ("secret_assignment", "DB_PASSWORD: 's3cret pass phrase'", "s3cret pass phrase"),
    ("secret_assignment", '{"client_secret": "abcdef123456"}', "abcdef123456"),
    ("secret_assignment", "https://x/cb?access_token=abcdef123456&x=1", "abcdef123456"),
    (
        "secret_assignment",
        "azure-openai-api-key = 0123456789abcdef0123456789abcdef",
        "0123456789abcdef",
    ),
    ("azure_key", "export AZURE_OPENAI_KEY=0123456789abcdef0123456789ABCDEF", "0123456789abcdef"),
    (
        "azure_key",
        "-H 'Ocp-Apim-Subscription-Key: 0123456789abcdef0123456789abcdef'",
        "0123456789abcdef",
    ),
    ("azure_key", 'SPEECH_KEY="' + "Ab1" * 28 + '"', "Ab1" * 28),
    (
        "private_key",
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\n-----END OPENSSH PRIVATE KEY-----",
        "b3BlbnNzaC1rZXk",
    ),
    (
        "private_key",
        "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0B (cut off",
        "MIIEvQIBADANBgkq",
    ),
]


@pytest.mark.parametrize(("kind", "text", "secret"), SHAPES)
def test_each_secret_shape(kind: str, text: str, secret: str) -> None:
    out = redact_text(text)
    assert secret not in out
    assert f"[REDACTED:{kind}]" in out


def test_specific_kind_wins() -> None:
    assert redact_text("sk-ant-api03-abcdefghijklmnop123") == "[REDACTED:anthropic_key]"
    assert redact_text("api_key=sk-abc123def456ghi789jkl0") == "api_key=[REDACTED:openai_key]"


@pytest.mark.parametrize(
    "text",
    [
        "sha " + hashlib.sha256(b"x").hexdigest(),
        "the task-abcdefghijklmnopqrstu id",
        "max_tokens: 4096 and prompt_tokens=1234567",
        "api_key_env=OPENAI_API_KEY",
        "token_count: 123456789",
        "the password must be rotated",
        "see https://example.com/path?page=2",
        "ask-anything-about-this-topic-please",
        "plain text with no secrets at all",
        "[REDACTED:openai_key]",
    ],
)
def test_no_false_positives(text: str) -> None:
    assert redact_text(text) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\x1b[31mred\x1b[0m", "red"),
        ("a\x1b]0;title\x07b", "ab"),
        ("a\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\b", "alinkb"),
        ("a\x1bPq#0;2;0;0;0\x1b\\b", "ab"),
        ("a\x1b(Bb", "ab"),
        ("a\x1bcb", "ab"),
        ("tab\tnew\nline\r\nend\r", "tab\tnew\nline\nend"),
        ("bell\x07 nul\x00 del\x7f c1\x9b", "bell nul del c1"),
        ("bidi \u202eevil\u202c and \u2066iso\u2069", "bidi evil and iso"),
        ("unicode é ü 日本 stays", "unicode é ü 日本 stays"),
    ],
)
def test_strip_control(text: str, expected: str) -> None:
    assert strip_control(text) == expected


def test_escape_inside_a_key_does_not_hide_it() -> None:
    text = "sk-abc\x1b[0mdef123456789ghijklmn"
    out = sanitize(text)
    assert "def123456789" not in out
    assert "\x1b" not in out


def test_redact_obj() -> None:
    data = {
        "api_key": "anything-at-all",
        "password": "x",
        "api_key_env": "OPENAI_API_KEY",
        "max_tokens": 5,
        "nested": ("sk-abc123def456ghi789jkl0", {"note": "\x1b[1mbold\x1b[0m"}),
        "empty_token": "",
        "flag": True,
        "n": None,
    }
    out = redact_obj(data)
    assert out == {
        "api_key": "[REDACTED:secret_field]",
        "password": "[REDACTED:secret_field]",
        "api_key_env": "OPENAI_API_KEY",
        "max_tokens": 5,
        "nested": ["[REDACTED:openai_key]", {"note": "bold"}],
        "empty_token": "",
        "flag": True,
        "n": None,
    }


_filler = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
_alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
_body = st.text(alphabet=_alnum, min_size=40, max_size=48)

_PLANTERS = [
    lambda b: ("sk-" + b[:30], b[:30]),
    lambda b: ("sk-ant-api03-" + b[:30], b[:30]),
    lambda b: ("ghp_" + b[:36], b[:36]),
    lambda b: ("github_pat_" + b[:40], b[:40]),
    lambda b: ("AKIA" + b[:16].upper(), b[:16].upper()),
    lambda b: ("xoxb-" + b[:24], b[:24]),
    lambda b: ("AIza" + b[:35], b[:35]),
    lambda b: ("glpat-" + b[:24], b[:24]),
    lambda b: ("hf_" + b[:34], b[:34]),
    lambda b: ("Authorization: Bearer " + b[:32], b[:32]),
    lambda b: ("OPENAI_API_KEY=" + b[:20], b[:20]),
    lambda b: ("password: " + b[:12], b[:12]),
    lambda b: ("https://me:" + b[:16] + "@host/x", b[:16]),
    lambda b: ("eyJ" + b[:12] + ".eyJ" + b[12:24] + "." + b[24:40], b[24:40]),
    lambda b: ("-----BEGIN EC PRIVATE KEY-----\n" + b + "\n-----END EC PRIVATE KEY-----", b),
    lambda b: ("AccountKey=" + b[:40], b[:40]),
]


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(
    before=_filler,
    after=_filler,
    body=_body,
    which=st.integers(0, len(_PLANTERS) - 1),
)
def test_planted_secret_never_survives(before: str, after: str, body: str, which: int) -> None:
    secret_text, secret = _PLANTERS[which](body)
    assume(secret not in before and secret not in after)
    text = f"{before} {secret_text} {after}"
    out = sanitize(text)
    assert secret not in out
    assert sanitize(out) == out  # idempotent
    assert secret not in str(redact_obj({"reply": text, "items": [text]}))


# --- the trigger pre-checks are only a shortcut: same output as running every pattern ------

_FRAGMENTS = [
    "sk-ant-",
    "sk-proj-",
    "sk-",
    "ghp_",
    "github_pat_",
    "glpat-",
    "hf_",
    "npm_",
    "AKIA",
    "eyJ",
    "xoxb-",
    "AIza",
    "sk_live_",
    "Bearer ",
    "Authorization: ",
    "https://",
    "user:pw@",
    "api_key",
    "API-KEY",
    "password",
    "Passphrase",
    "client_secret",
    "token_count",
    "=",
    ": ",
    '"',
    "'",
    "?sig=",
    "AccountKey=",
    "-----BEGIN RSA PRIVATE KEY-----",
    "-----END RSA PRIVATE KEY-----",
    "[REDACTED:x]",
    " ",
    "\n",
    "abcdefghijklmnop",
    "ABCDEFGHIJKLMNOPQRST",
    "0123456789",
    "ſecret",
    "\u212aey",
]


def _every_pattern(text: str) -> str:
    from skillopt.redact import _PATTERNS

    for kind, pattern, repl in _PATTERNS:
        text = pattern.sub(repl if repl is not None else f"[REDACTED:{kind}]", text)
    return text


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_FRAGMENTS), max_size=40).map("".join))
def test_trigger_shortcut_matches_running_every_pattern(text: str) -> None:
    assert redact_text(text) == _every_pattern(text)


@pytest.mark.parametrize(
    "name",
    ["api_key", "API-KEY", "apikey", "password", "passwd", "Passphrase", "client_secret",
     "session-key", "credentials", "auth_token", "PRIVATE_KEY", "pwd", "ſecret", "\u212aey",
     "token_count", "api_key_env"],
)  # fmt: skip
@pytest.mark.parametrize("sep", ["=", ": ", '="', "='", " = ", '": "'])
def test_trigger_shortcut_on_every_secret_name(name: str, sep: str) -> None:
    text = f"config {name}{sep}Zq8vLmN3pR7tXw2K and more"
    assert redact_text(text) == _every_pattern(text)


def test_secret_kinds_names_what_redaction_would_replace() -> None:
    text = "password = hunter2hunter2\nkey AKIAIOSFODNN7EXAMPLE\n[REDACTED:jwt] already"
    assert secret_kinds(text) == ("aws_access_key", "secret_assignment")
    assert secret_kinds("nothing secret here") == ()


def test_a_text_seen_before_is_answered_from_the_memo_with_the_same_redaction() -> None:
    from skillopt import redact

    text = "deploy with token=zq81PfW0xLr2Hd7c and AKIAABCDEFGHIJKLMNOP (memo check)"
    first = sanitize(text)
    assert "zq81PfW0xLr2Hd7c" not in first and "AKIAABCDEFGHIJKLMNOP" not in first
    assert redact._SANITIZED.get(text) == first  # a second save is a look-up, not a scan
    assert sanitize(text) == first
    assert redact_obj({"run": [text, {"note": text}]}) == {"run": [first, {"note": first}]}


def test_the_redaction_memo_stays_within_its_bounds() -> None:
    from skillopt.redact import _Memo

    memo = _Memo(max_entries=50, max_chars=4_000)
    for i in range(1_000):
        memo.put(f"text number {i} " * (i % 7 + 1), f"result {i}")
        assert len(memo) <= 50 and memo.chars <= 4_000
    memo.put("x" * 3_000, "y")  # larger than an eighth of the budget: not kept
    assert memo.get("x" * 3_000) is None
