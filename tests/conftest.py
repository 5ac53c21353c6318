"""Shared fixtures. Tests are offline: only 127.0.0.1 is ever contacted."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from hypothesis import settings

from skillopt import logging as skillopt_logging

# Property tests draw their examples from a seed fixed per test (the house rule: every RNG in a
# test is seeded) and have no per-example deadline: a wall-clock limit on a shared, loaded
# machine fails tests that are right.
settings.register_profile("seeded", derandomize=True, deadline=None)
settings.load_profile("seeded")

# The logging configuration before any test or fixture ran.
_PRISTINE: dict[str, Any] = structlog.get_config()
_PRISTINE_OURS = (skillopt_logging._configured, skillopt_logging._disabled)


def _restore_pristine_logging() -> None:
    structlog.configure(**{**_PRISTINE, "processors": list(_PRISTINE["processors"])})
    skillopt_logging._configured, skillopt_logging._disabled = _PRISTINE_OURS


@pytest.fixture(autouse=True)
def _logging_configuration_is_per_test() -> Iterator[None]:
    """Every test starts from the logging configuration of a fresh process, and ends there.
    A CLI run configures logging for the process: a ``--log-level WARNING`` night run by a
    module-scoped fixture (tests/support/nights.py) would otherwise hide the info events a
    later test captures."""
    _restore_pristine_logging()
    yield
    _restore_pristine_logging()
