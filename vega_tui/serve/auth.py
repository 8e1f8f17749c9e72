"""Who may use the served dashboard: the holder of the printed token, from a page served by us.

textual-serve has no authentication (each websocket starts the app and passes it keystrokes),
so every request passes `Guard.middleware`: the Host header must name this server (a DNS-rebinding
guard), the token (query `token`) or the session cookie it is exchanged for must match
(constant-time), and the websocket's Origin must be the page's own. The cookie is HttpOnly and
SameSite=Strict.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from aiohttp import web

TOKEN_PARAM = "token"
WS_PATH = "/ws"
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARDS = frozenset({"", "0.0.0.0", "::"})
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# Sent with every answer: no caching, no token in a Referer, never inside another site's frame.
SAFE_HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
}


def is_loopback(host: str) -> bool:
    """`host` (a name or an address) reaches this machine only."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_name(header: str) -> str:
    """The name in a Host header, without the port ("[::1]:8080" -> "::1")."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def same(given: str | None, secret: str) -> bool:
    """Constant-time comparison; a missing value is never equal."""
    return given is not None and hmac.compare_digest(given.encode(), secret.encode())


class Guard:
    """The token, the session cookie and the host names this server answers to.

    `bound`: the address it listens on (a wildcard answers to any name; the token still guards)."""

    def __init__(self, bound: str, token: str | None = None) -> None:
        self.token = token or secrets.token_urlsafe(32)
        # The cookie holds its own secret, never the token; its name differs per server, so two
        # servers on one host keep their own cookies.
        self.session = secrets.token_urlsafe(32)
        self.cookie = f"vega_session_{secrets.token_hex(4)}"
        self.any_host = bound in WILDCARDS
        self.hosts = LOOPBACK_NAMES | {bound.strip("[]").lower()}

    def host_ok(self, request: web.Request) -> bool:
        return self.any_host or host_name(request.headers.get("Host", "")) in self.hosts

    def origin_ok(self, request: web.Request) -> bool:
        """The websocket was opened by a page of this server (scheme://host:port as in Host)."""
        origin = urlsplit(request.headers.get("Origin", ""))
        host = request.headers.get("Host", "").lower()
        ours = origin.scheme in ("http", "https") and origin.netloc.lower() == host
        return bool(host) and ours

    def signed_in(self, request: web.Request) -> bool:
        return same(request.cookies.get(self.cookie), self.session)

    def set_cookie(self, response: web.StreamResponse) -> None:
        name, value = self.cookie, self.session
        response.set_cookie(name, value, path="/", httponly=True, samesite="Strict")

    def install(self, app: web.Application) -> None:
        """Check every request, and send SAFE_HEADERS with every answer (streamed ones too)."""
        app.middlewares.append(self.middleware)
        app.on_response_prepare.append(add_safe_headers)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if not self.host_ok(request):
            return refuse(421, "this server does not answer to that Host name")
        token = request.query.get(TOKEN_PARAM)
        upgrade = request.headers.get("Upgrade", "").lower() == "websocket"
        if request.path == WS_PATH or upgrade:
            if not self.origin_ok(request):
                return refuse(403, "websocket refused: its Origin is not this page")
            if not (self.signed_in(request) or same(token, self.token)):
                return refuse(401, "websocket refused: no valid session cookie or token")
            return await handler(request)
        if token is not None:
            if not same(token, self.token):
                return refuse(403, "wrong token: open the URL that vega-tui serve printed")
            # Trade the token for the cookie, and drop it from the address bar and the history.
            target = str(request.rel_url.without_query_params(TOKEN_PARAM))
            redirect = web.Response(status=303, headers={"Location": target})
            self.set_cookie(redirect)
            return redirect
        if not self.signed_in(request):
            return refuse(401, "no session: open the URL with ?token= that vega-tui serve printed")
        return await handler(request)


async def add_safe_headers(_request: web.Request, response: web.StreamResponse) -> None:
    for name, value in SAFE_HEADERS.items():
        response.headers.setdefault(name, value)


def refuse(status: int, text: str) -> web.Response:
    return web.Response(status=status, text=f"{text}\n")
