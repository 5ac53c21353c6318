"""Shared fixtures. Tests are offline: only 127.0.0.1 is ever contacted."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from skillopt import logging as skillopt_logging


@pytest.fixture(autouse=True)
def _logging_configuration_is_per_test() -> Iterator[None]:
    """A test that configures logging (a CLI run with ``--quiet``, say) leaves it as it was:
    a WARNING threshold carried into a later test hides the info events it captures."""
    config: dict[str, Any] = structlog.get_config()
    ours = (skillopt_logging._configured, skillopt_logging._disabled)
    yield
    structlog.configure(**config)
    skillopt_logging._configured, skillopt_logging._disabled = ours
