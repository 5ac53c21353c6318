"""Entra ID (Azure AD) bearer tokens for Azure members, from a synchronous azure-identity
credential, without letting a hung identity endpoint outlive the night.

``azure.identity.aio`` would need ``aiohttp`` as another HTTP stack, so the blocking
``get_token`` runs in a thread. The thread cannot be killed, so it is made harmless:

* it is a **daemon** thread of its own (not the event loop's worker pool), so a fetch that
  never returns never keeps the process alive at exit;
* there is **one fetch in flight per credential**: every caller that needs a token waits
  for that fetch, each under its own deadline (``timeout``), and a caller arriving after
  others gave up joins the same fetch instead of starting another thread. A fetch that
  finishes late still delivers its token to the next caller;
* a caller whose deadline passes gets a retryable :class:`BackendTimeoutError` saying so.

Tokens are cached until five minutes before they expire.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel

from skillopt.config import AzureCliAuth, AzureDefaultAuth, AzureManagedIdentityAuth
from skillopt.errors import BackendTimeoutError, ConfigError
from skillopt.logging import get_logger

__all__ = [
    "CLOSE_TIMEOUT",
    "DEFAULT_TOKEN_TIMEOUT",
    "REFRESH_MARGIN",
    "BackgroundCall",
    "EntraTokenProvider",
    "make_credential",
]

T = TypeVar("T")

REFRESH_MARGIN = 300.0  # refresh a token this many seconds before it expires
DEFAULT_TOKEN_TIMEOUT = 30.0
CLOSE_TIMEOUT = 5.0

_log = get_logger(__name__)


class BackgroundCall(Generic[T]):
    """``fn()`` running in a daemon thread; awaitable (by many) from the starting loop."""

    def __init__(self, fn: Callable[[], T], *, name: str) -> None:
        self._fn = fn
        self._token = anyio.lowlevel.current_token()
        self._done = anyio.Event()
        self.finished = False
        self.result: T | None = None
        self.error: BaseException | None = None
        threading.Thread(target=self._run, name=name, daemon=True).start()

    def _run(self) -> None:
        try:
            self.result = self._fn()
        except BaseException as exc:  # handed to the waiters, raised there
            self.error = exc
        finally:
            self.finished = True
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits
                anyio.from_thread.run_sync(self._done.set, token=self._token)

    async def wait(self) -> None:
        """Return once the call has finished (put a deadline around it)."""
        await self._done.wait()


class EntraTokenProvider:
    """Async bearer-token provider over a synchronous azure-identity credential."""

    def __init__(
        self, credential: Any, scope: str, *, timeout: float = DEFAULT_TOKEN_TIMEOUT
    ) -> None:
        self._credential = credential
        self._scope = scope
        self._timeout = timeout
        self._token: str | None = None
        self._expires_on = 0.0
        self._fetch: BackgroundCall[Any] | None = None
        self.refreshes = 0
        self.fetches = 0  # threads started, ever

    def _fresh(self) -> bool:
        return self._token is not None and time.time() < self._expires_on - REFRESH_MARGIN

    def _take(self, fetch: BackgroundCall[Any]) -> None:
        """Adopt a finished fetch's token (once) and forget the fetch."""
        if self._fetch is fetch:
            self._fetch = None
            if fetch.error is None and fetch.result is not None:
                self._token = str(fetch.result.token)
                self._expires_on = float(fetch.result.expires_on)
                self.refreshes += 1

    async def __call__(self) -> str:
        if self._fetch is not None and self._fetch.finished:
            self._take(self._fetch)
        if self._fresh():
            assert self._token is not None
            return self._token
        if self._fetch is None:
            self.fetches += 1
            self._fetch = BackgroundCall(
                lambda: self._credential.get_token(self._scope), name="skillopt-entra-token"
            )
        fetch = self._fetch
        with anyio.move_on_after(self._timeout):
            await fetch.wait()
        if not fetch.finished:
            raise BackendTimeoutError(
                f"no Entra ID token within {self._timeout:g}s",
                cause=f"the identity endpoint did not answer within {self._timeout:g}s; "
                "the fetch goes on in the background and later calls share it",
            )
        self._take(fetch)
        if fetch.error is not None:
            raise fetch.error
        assert self._token is not None
        return self._token

    async def aclose(self) -> None:
        """Close the credential, waiting at most a few seconds (it may be mid-fetch)."""
        closer = getattr(self._credential, "close", None)
        if not callable(closer):
            return
        call = BackgroundCall(closer, name="skillopt-entra-close")
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_TIMEOUT):
            await call.wait()
        if not call.finished:
            _log.warning("entra.close_pending", seconds=CLOSE_TIMEOUT)


def make_credential(
    auth: AzureDefaultAuth | AzureCliAuth | AzureManagedIdentityAuth, *, key: str = "auth"
) -> Any:
    """The synchronous azure-identity credential for an Entra auth config.

    A credential that cannot be built (``AZURE_AUTHORITY_HOST`` not https, workload identity
    without a client id, ...) is a :class:`ConfigError` naming ``key`` and the cause.
    """
    import azure.identity as identity
    from azure.core.exceptions import AzureError

    try:
        if isinstance(auth, AzureCliAuth):
            return identity.AzureCliCredential()
        if isinstance(auth, AzureManagedIdentityAuth):
            if auth.client_id:
                return identity.ManagedIdentityCredential(client_id=auth.client_id)
            return identity.ManagedIdentityCredential()
        return identity.DefaultAzureCredential()
    except (ValueError, OSError, AzureError) as exc:
        raise ConfigError(
            f"cannot build the {auth.method!r} Entra ID credential; azure-identity says: {exc}",
            key=key,
        ) from exc
