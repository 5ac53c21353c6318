"""structlog configuration: JSON lines when stderr is not a TTY, a console renderer on a TTY.

Context (``run_id``, ``stage``, ``member``, ``backend``) is bound with
``structlog.contextvars.bound_contextvars`` so it follows tasks across awaits.
Every event passes through the redactor so no secret reaches a log, and terminal control
sequences (from model replies or transcripts) never reach a console.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, MutableMapping
from typing import Any, TextIO

import structlog

__all__ = ["configure_logging", "get_logger", "keep_line", "release_line"]

_configured = False
#: Logger methods the configured level filters out: a call to one of them returns at once
#: instead of building a bound logger first (the pool logs every call at debug).
_disabled: frozenset[str] = frozenset()
_METHOD_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "msg": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "exception": logging.ERROR,
    "critical": logging.CRITICAL,
    "fatal": logging.CRITICAL,
}


#: A live display's redrawn line (a terminal's last line) and how to write a line above it.
_kept: tuple[TextIO, Callable[[str], None]] | None = None


def keep_line(stream: TextIO, write_above: Callable[[str], None]) -> None:
    """A live display keeps the last line of ``stream``: console log lines written there go
    through ``write_above`` (clear the line, write, redraw) instead of landing on it."""
    global _kept
    _kept = (stream, write_above)


def release_line(stream: TextIO) -> None:
    global _kept
    if _kept is not None and _kept[0] is stream:
        _kept = None


class _ConsoleLogger(structlog.PrintLogger):
    """structlog's print logger, but a line meant for a stream whose last line a live display
    keeps is written above that line (see :func:`keep_line`)."""

    def msg(self, message: str) -> None:
        if _kept is not None and _kept[0] is self._file:
            _kept[1](message)
            return
        super().msg(message)

    log = debug = info = warn = warning = msg
    fatal = failure = err = error = critical = exception = msg


def _off(*args: Any, **kwargs: Any) -> None:
    """What a logger method the configured level filters out does."""


def _redact_event(
    _: Any, __: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    from skillopt.redact import redact_obj, sanitize

    for key, value in list(event_dict.items()):
        if isinstance(value, str):
            event_dict[key] = sanitize(value)  # also strips terminal escapes (console on a TTY)
        elif isinstance(value, dict | list | tuple):
            event_dict[key] = redact_obj(value)
    return event_dict


class _ForeignRecords(logging.Handler):
    """Standard-library log records of other libraries (azure-identity warns through
    ``logging``) become our events: redacted, and JSON when the stream is JSON, instead of
    plain text from ``logging``'s last-resort handler in the middle of the JSON lines."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # a record whose arguments do not fit its format
            message = str(record.msg)
        structlog.get_logger().bind(logger=record.name).log(record.levelno, message)


def _route_foreign_logs() -> None:
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, _ForeignRecords)]:
        root.removeHandler(handler)
    root.addHandler(_ForeignRecords())


def configure_logging(
    *, level: str = "INFO", json: bool | None = None, stream: TextIO | None = None
) -> None:
    """Configure structlog once per process. ``json=None`` picks by TTY. Warnings of other
    libraries logged through ``logging`` come out as our events too."""
    global _configured, _disabled
    out = stream or sys.stderr
    use_json = (not out.isatty()) if json is None else json
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if use_json
        else structlog.dev.ConsoleRenderer(colors=out.isatty())
    )
    threshold = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            _redact_event,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(threshold),
        logger_factory=lambda *_: _ConsoleLogger(out),
        cache_logger_on_first_use=False,
    )
    _route_foreign_logs()
    _disabled = frozenset(name for name, value in _METHOD_LEVELS.items() if value < threshold)
    _configured = True


class _LazyLogger:
    """Binds ``initial`` to the configuration active at each call, not at creation.

    structlog's own lazy proxy cannot carry a ``logger`` key (it clashes with a
    parameter name), and ``get_logger().bind()`` freezes the configuration of the
    moment; module-level loggers must follow a later :func:`configure_logging`.
    """

    __slots__ = ("_initial",)

    def __init__(self, initial: dict[str, Any]) -> None:
        self._initial = initial

    def bind(self, **values: Any) -> _LazyLogger:
        return _LazyLogger({**self._initial, **values})

    def new(self, **values: Any) -> _LazyLogger:
        return _LazyLogger(dict(values))

    def unbind(self, *keys: str) -> _LazyLogger:
        return _LazyLogger({k: v for k, v in self._initial.items() if k not in keys})

    def __getattr__(self, method: str) -> Any:
        if method in _disabled:
            return _off
        return getattr(structlog.get_logger().bind(**self._initial), method)


def get_logger(name: str | None = None, **initial: Any) -> Any:
    """A lazy structlog logger; ``name`` becomes the ``logger`` field."""
    if name:
        initial = {"logger": name, **initial}
    return _LazyLogger(initial)
