"""Run the dashboard: bind the loopback, print the URL with its token, serve until stopped.

1. Bind ``127.0.0.1`` (port 0 = any free one) and listen before anything else, so the
   printed URL names the real port, a port in use fails at once, and a browser opening the
   URL the moment it is printed is queued rather than refused.
2. Draw the per-launch token; the :class:`~skillopt_sleep.serve.guard.Guard` knows it and
   the port (the only Host and Origin it accepts).
3. Open a task group: the actions (nights, adoptions) run in it, and uvicorn serves the
   Starlette app beside them on the bound socket.
4. On Ctrl-C uvicorn stops serving; then actions still running are cancelled (a night
   marks itself interrupted, and the next ``once`` resumes it).
"""

from __future__ import annotations

import socket
from collections.abc import Callable

import anyio
import uvicorn

from skillopt_sleep.config import SleepConfig
from skillopt_sleep.serve.app import build_app
from skillopt_sleep.serve.guard import Guard, loopback_host, new_token
from skillopt_sleep.serve.jobs import Jobs

__all__ = ["bind", "serve"]


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on the loopback (``ValueError`` for any other host)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((loopback_host(host), port))
        sock.listen(socket.SOMAXCONN)  # before the URL is printed: uvicorn listens later
    except BaseException:
        sock.close()
        raise
    return sock


async def serve(cfg: SleepConfig, sock: socket.socket, on_ready: Callable[[Guard], None]) -> None:
    guard = Guard(token=new_token(), port=int(sock.getsockname()[1]))
    async with anyio.create_task_group() as tg:
        app = build_app(cfg, guard, Jobs(tg))
        config = uvicorn.Config(
            app,
            lifespan="off",
            ws="none",
            log_config=None,  # our structlog setup stays
            access_log=False,
            server_header=False,
            proxy_headers=False,
        )
        server = uvicorn.Server(config)
        on_ready(guard)
        await server.serve(sockets=[sock])
        tg.cancel_scope.cancel()
