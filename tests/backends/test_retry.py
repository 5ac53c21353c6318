"""Retry delays and error classification: pure, table-driven."""

from __future__ import annotations

import email.utils
import random

import pytest

from skillopt.backends.retry import (
    RetryPolicy,
    classify_status,
    parse_retry_after,
    retry_delay,
    short_cause,
)
from skillopt.errors import (
    BackendAuthError,
    BackendRequestError,
    BackendTimeoutError,
    ContentFilterError,
    QuotaExhaustedError,
    RetryableBackendError,
)

POLICY = RetryPolicy(base_delay=0.5, max_delay=4.0, retry_after_cap=10.0)


@pytest.mark.parametrize(
    ("attempt", "retry_after", "low", "high"),
    [
        (1, None, 0.0, 0.5),
        (2, None, 0.0, 1.0),
        (3, None, 0.0, 2.0),
        (4, None, 0.0, 4.0),
        (9, None, 0.0, 4.0),  # capped
        (500, None, 0.0, 4.0),  # no overflow
        (1, 3.0, 3.0, 3.0),  # hint wins
        (5, 0.0, 0.0, 0.0),
        (1, 99.0, 10.0, 10.0),  # hint capped
    ],
)
def test_delay_table(attempt: int, retry_after: float | None, low: float, high: float) -> None:
    rng = random.Random(1)
    for _ in range(200):
        delay = retry_delay(POLICY, attempt, retry_after=retry_after, rng=rng)
        assert low <= delay <= high


def test_full_jitter_spreads_over_the_whole_range() -> None:
    rng = random.Random(3)
    delays = [retry_delay(POLICY, 4, retry_after=None, rng=rng) for _ in range(2000)]
    assert min(delays) < 0.2 and max(delays) > 3.8
    assert 1.7 < sum(delays) / len(delays) < 2.3


def test_delay_is_deterministic_for_a_seeded_rng() -> None:
    a = [retry_delay(POLICY, 3, retry_after=None, rng=random.Random(5)) for _ in range(3)]
    assert len(set(a)) == 1


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after-ms": "250"}, 0.25),
        ({"Retry-After-Ms": "250", "Retry-After": "9"}, 0.25),  # ms wins
        ({"Retry-After": "7"}, 7.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after": "-3"}, 0.0),
        ({"retry-after": "soon"}, None),
        ({"retry-after-ms": "x", "retry-after": "2"}, 2.0),
        ({}, None),
    ],
)
def test_parse_retry_after(headers: dict[str, str], expected: float | None) -> None:
    assert parse_retry_after(headers) == expected


def test_parse_retry_after_http_date() -> None:
    now = 1_700_000_000.0
    header = email.utils.formatdate(now + 42, usegmt=True)
    assert parse_retry_after({"Retry-After": header}, now=now) == pytest.approx(42, abs=1)
    past = email.utils.formatdate(now - 100, usegmt=True)
    assert parse_retry_after({"Retry-After": past}, now=now) == 0.0


@pytest.mark.parametrize(
    ("status", "code", "kind", "label"),
    [
        (429, None, RetryableBackendError, "rate_limit"),
        (408, None, BackendTimeoutError, "timeout"),
        (409, None, RetryableBackendError, "conflict"),
        (500, None, RetryableBackendError, "server"),
        (503, None, RetryableBackendError, "server"),
        (400, None, BackendRequestError, "request"),
        (404, None, BackendRequestError, "request"),
        (422, None, BackendRequestError, "request"),
        (401, None, BackendAuthError, "auth"),
        (403, None, BackendAuthError, "auth"),
        (400, "content_filter", ContentFilterError, "content_filter"),
        (429, "insufficient_quota", QuotaExhaustedError, "quota"),
    ],
)
def test_classify_status(status: int, code: str | None, kind: type, label: str) -> None:
    error = classify_status(status, member="m1", cause="boom", code=code, retry_after=1.0)
    assert type(error) is kind
    assert error.error_class == label
    assert error.member == "m1" and error.status == status
    assert error.retryable is issubclass(kind, RetryableBackendError)


def test_azure_content_filter_body_is_recognised() -> None:
    body = {"error": {"code": "content_filter", "message": "filtered"}}
    assert isinstance(classify_status(400, member="m", cause="x", body=body), ContentFilterError)


def test_cause_is_redacted_flattened_and_bounded() -> None:
    cause = short_cause("bad key sk-abcdefghijklmnopqrstuvwx\nline two " + "y" * 1000)
    assert "sk-abcdefghijklmnopqrstuvwx" not in cause
    assert "\n" not in cause and len(cause) <= 300


def test_policy_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ValueError):
        RetryPolicy(base_delay=-1)
