"""structlog configuration: JSON lines when stderr is not a TTY, a console renderer on a TTY.

Context (``run_id``, ``stage``, ``member``, ``backend``) is bound with
``structlog.contextvars.bound_contextvars`` so it follows tasks across awaits.
Every event passes through the redactor so no secret reaches a log.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any, TextIO

import structlog

_configured = False


def _redact_event(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    from skillopt.redact import redact_text

    for key, value in list(event_dict.items()):
        if isinstance(value, str):
            event_dict[key] = redact_text(value)
    return event_dict


def configure_logging(
    *, level: str = "INFO", json: bool | None = None, stream: TextIO | None = None
) -> None:
    """Configure structlog once per process. ``json=None`` picks by TTY."""
    global _configured
    out = stream or sys.stderr
    use_json = (not out.isatty()) if json is None else json
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if use_json
        else structlog.dev.ConsoleRenderer(colors=out.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            _redact_event,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
        ),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )
    _configured = True


def get_logger(name: str | None = None, **initial: Any) -> Any:
    """A lazy structlog logger; ``name`` becomes the ``logger`` field.

    Lazy so that a module-level logger created before :func:`configure_logging` still
    renders with whatever configuration is active when it is first used.
    """
    if name:
        initial = {"logger": name, **initial}
    return structlog.get_logger(**initial)
