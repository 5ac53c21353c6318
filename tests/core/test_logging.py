from __future__ import annotations

import io
import json

from structlog.testing import capture_logs

from skillopt.logging import configure_logging, get_logger

EARLY = get_logger("early.module", component="x")  # created before any configuration


def test_module_level_logger_follows_later_configuration() -> None:
    stream = io.StringIO()
    configure_logging(json=True, stream=stream)
    EARLY.info("hello", n=1)
    record = json.loads(stream.getvalue().strip().splitlines()[-1])
    assert record["event"] == "hello"
    assert record["logger"] == "early.module"
    assert record["component"] == "x"
    assert record["n"] == 1


def test_secrets_never_reach_the_log() -> None:
    stream = io.StringIO()
    configure_logging(json=True, stream=stream)
    key = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2"
    get_logger("t").warning("call failed", detail=f"Authorization: Bearer {key}", extra={"k": key})
    out = stream.getvalue()
    assert key not in out
    assert "REDACTED" in out


def test_bound_context_is_captured() -> None:
    log = get_logger("t", run_id="r1").bind(stage="replay")
    with capture_logs() as captured:
        log.info("stage.done", calls=3)
    assert captured == [
        {
            "logger": "t",
            "run_id": "r1",
            "stage": "replay",
            "calls": 3,
            "event": "stage.done",
            "log_level": "info",
        }
    ]


def test_terminal_escapes_never_reach_the_console() -> None:
    stream = io.StringIO()
    configure_logging(json=False, stream=stream)
    hostile = "reply \x1b]0;owned\x07\x1b[2J\x1b[31mred\x1b[0m \u202eevil"
    # The console renderer repr()s keyword values but prints the event text as is.
    get_logger("t").warning(f"odd {hostile}", text=hostile, nested={"t": hostile})
    out = stream.getvalue()
    assert "red" in out and "evil" in out
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out


def test_a_level_that_is_off_costs_no_logger_and_emits_nothing() -> None:
    from skillopt import logging as ours

    stream = io.StringIO()
    configure_logging(level="WARNING", json=True, stream=stream)
    log = get_logger("quiet")
    assert log.debug is log.info is ours._off  # no bound logger is built for them
    log.debug("unseen", n=1)
    log.info("unseen either")
    log.warning("seen", n=2)
    events = [json.loads(line)["event"] for line in stream.getvalue().splitlines()]
    assert events == ["seen"]
    configure_logging(level="DEBUG", json=True, stream=stream)
    assert log.debug is not ours._off


def test_a_quiet_configuration_ends_with_its_test() -> None:
    """Paired with the next test: the conftest restores the logging configuration after
    each test, so a WARNING threshold set here does not hide the next test's info events."""
    configure_logging(level="WARNING", json=True, stream=io.StringIO())


def test_info_events_are_captured_after_a_quiet_test() -> None:
    with capture_logs() as captured:
        get_logger("t").info("seen", n=1)
    assert [e["event"] for e in captured] == ["seen"]
