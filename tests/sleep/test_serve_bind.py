"""The dashboard's socket: bound to the loopback and listening before its URL is printed.

uvicorn called ``listen`` only once it started serving, after the URL was printed: a browser
opening it at once was refused (``ERR_CONNECTION_REFUSED``, the dashboard's browser test
failing on a busy machine)."""

from __future__ import annotations

import socket

import pytest

from skillopt_sleep.serve.server import bind


def test_a_client_connecting_right_after_bind_is_queued_not_refused() -> None:
    sock = bind("127.0.0.1", 0)
    try:
        with socket.create_connection(sock.getsockname(), timeout=5):
            pass  # accepted into the backlog: nothing has called accept() yet
    finally:
        sock.close()


def test_only_the_loopback_is_bound() -> None:
    with pytest.raises(ValueError, match="this machine only"):
        bind("0.0.0.0", 0)
