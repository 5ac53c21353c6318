"""Who may talk to the dashboard: the browser of the user who started it, and nothing else.

1. The server binds a loopback address only (:func:`loopback_host` refuses any other).
2. Every request must name this server in its ``Host`` header (``127.0.0.1:PORT`` or
   ``localhost:PORT``): a page on another site that rebinds its DNS name to 127.0.0.1
   sends its own name, and is refused (DNS rebinding).
3. Every request must carry the per-launch token: in the URL printed at start (which sets
   a cookie and redirects to the same page without it) or in that cookie.
4. Every request that is not ``GET``/``HEAD`` must come from this server's own origin
   (``Origin`` header, which browsers send on every POST) and carry a form token
   (:class:`FormTokens`): a cookie alone never authorises a write (CSRF).
5. A form token is not the launch token: each confirmation page gets its own, bound to the
   action and the fields it confirms and good for one POST. A token seen in one form (or
   the cookie's value) cannot confirm another action, other fields, or the same one twice.

Refusals are plain ``403`` responses and happen before any handler runs.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from urllib.parse import urlencode

from starlette.datastructures import URL
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

__all__ = ["LOOPBACK_NAMES", "FormTokens", "Guard", "loopback_host", "new_token"]

LOOPBACK_NAMES = ("127.0.0.1", "localhost")
SAFE_METHODS = frozenset({"GET", "HEAD"})
# Form tokens a server remembers as used; the oldest are forgotten past this (a user
# confirms a handful of actions per launch).
MAX_SPENT_FORMS = 4096


def new_token() -> str:
    return secrets.token_urlsafe(32)


def loopback_host(host: str) -> str:
    """The address to bind for ``host``, which must be the loopback (else ``ValueError``)."""
    if host == "localhost":
        return "127.0.0.1"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"{host!r} is not a loopback address") from None
    if address.version != 4 or not address.is_loopback:
        raise ValueError(f"{host} is not 127.0.0.1: the dashboard serves this machine only")
    return str(address)


def _form_message(nonce: str, post_to: str, fields: Iterable[tuple[str, str]]) -> bytes:
    pairs = sorted((str(k), str(v)) for k, v in fields)
    return "\0".join([nonce, post_to, *(f"{k}={v}" for k, v in pairs)]).encode()


class FormTokens:
    """One token per confirmation form: ``nonce.mac``, the MAC (under a key that never
    leaves the server) binding the nonce to where the form posts and what it posts."""

    def __init__(self, key: str | None = None) -> None:
        self._key = (key or new_token()).encode()
        self._spent: dict[str, None] = {}

    def _mac(self, nonce: str, post_to: str, fields: Iterable[tuple[str, str]]) -> str:
        digest = hmac.new(self._key, _form_message(nonce, post_to, fields), "sha256")
        return digest.hexdigest()

    def issue(self, post_to: str, fields: Iterable[tuple[str, str]]) -> str:
        nonce = secrets.token_urlsafe(16)
        return f"{nonce}.{self._mac(nonce, post_to, fields)}"

    def redeem(self, offered: object, post_to: str, fields: Iterable[tuple[str, str]]) -> str:
        """Why ``offered`` does not confirm this POST, or ``""`` (and it is spent)."""
        if not isinstance(offered, str) or offered.count(".") != 1:
            return "missing or wrong token in the form"
        nonce, mac = offered.split(".")
        if not hmac.compare_digest(mac.encode(), self._mac(nonce, post_to, fields).encode()):
            return "missing or wrong token in the form"
        if nonce in self._spent:
            return "this form was sent already: open its page again"
        self._spent[nonce] = None
        if len(self._spent) > MAX_SPENT_FORMS:
            del self._spent[next(iter(self._spent))]
        return ""


@dataclass(frozen=True, slots=True)
class Guard:
    token: str
    port: int
    forms: FormTokens = field(default_factory=FormTokens)

    @property
    def cookie(self) -> str:
        return f"skillopt_serve_{self.port}"  # cookies ignore ports: one name per server

    @property
    def hosts(self) -> frozenset[str]:
        return frozenset(f"{name}:{self.port}" for name in LOOPBACK_NAMES)

    @property
    def origins(self) -> frozenset[str]:
        return frozenset(f"http://{host}" for host in self.hosts)

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}?{urlencode({'token': self.token})}"

    def matches(self, offered: str | None) -> bool:
        return bool(offered) and hmac.compare_digest(str(offered).encode(), self.token.encode())

    def refusal(self, request: Request) -> str:
        """Why ``request`` is refused, or ``""``."""
        if request.headers.get("host", "") not in self.hosts:
            return "unknown Host: this dashboard answers to 127.0.0.1 only"
        offered = request.cookies.get(self.cookie) or request.query_params.get("token")
        if not self.matches(offered):
            return "missing or wrong token: open the URL the server printed at start"
        if request.method not in SAFE_METHODS and request.headers.get("origin") not in self.origins:
            return "cross-origin request refused"
        return ""

    async def middleware(
        self, request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        problem = self.refusal(request)
        if problem:
            return PlainTextResponse(problem, status_code=403)
        if request.method == "GET" and "token" in request.query_params:
            return self._drop_token_from_url(request)
        response = await call_next(request)
        response.headers.setdefault("Cache-Control", "no-store")
        return response

    def _drop_token_from_url(self, request: Request) -> Response:
        """The start URL: keep the token in a cookie, show the page without it."""
        kept = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
        target = URL(path=request.url.path, query=urlencode(kept))
        response = RedirectResponse(str(target), status_code=303)
        response.set_cookie(self.cookie, self.token, httponly=True, samesite="strict", path="/")
        return response
