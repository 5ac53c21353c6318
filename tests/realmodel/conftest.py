"""The small real model these tests run against: one server for the session (``make tools``
installs it; without it every test here is skipped with the reason)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.real_model import RealModelServer, real_model_server, why_unavailable


@pytest.fixture(scope="session")
def real_model() -> Iterator[RealModelServer]:
    why = why_unavailable()
    if why is not None:
        pytest.skip(f"no real model: {why}")
    with real_model_server() as server:
        yield server
