"""Who may use the dashboard, and how: a per-user token, the Host check, CSRF, the headers.

- The token (32 random bytes) is kept in $XDG_RUNTIME_DIR/vinos-routine/dashboard.token,
  mode 0600 in a 0700 directory: another local user can reach 127.0.0.1:PORT but cannot read
  it. The command opens `/?token=…`; the first request with it gets an HttpOnly,
  SameSite=Strict cookie and a redirect to the same page without the token, so the token
  leaves the address bar and the history.
- Host must be 127.0.0.1:PORT or localhost:PORT exactly (DNS rebinding: a page on evil.test
  resolved to 127.0.0.1 sends Host: evil.test).
- Every change is a POST carrying a CSRF token derived from the secret (HMAC), and an Origin,
  when the browser sends one, of this very server. SameSite=Strict alone is not enough:
  another port on localhost is the *same site*, so the cookie goes along with its requests.
- A strict Content-Security-Policy: only this origin's script and style, no inline script,
  no third-party origin, no framing.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import secrets
import stat
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from hashlib import sha256
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

__all__ = [
    "COOKIE",
    "CSP",
    "AccessVerdict",
    "Guard",
    "allowed_hosts",
    "check",
    "csrf_token",
    "load_or_create_token",
]

COOKIE = "vinos_dashboard"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SAFE_METHODS = frozenset({"GET", "HEAD"})
TOKEN_BYTES = 32

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


def load_or_create_token(path: Path) -> str:
    """The token in `path`, or a new one written there (0600). A file that is not ours, not a
    regular file or readable by others is replaced rather than trusted."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        fd = -1
    if fd >= 0:
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            text = f.read(256).decode("ascii", "replace").strip()
        private = stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and st.st_mode & 0o077 == 0
        if (
            private
            and len(text) >= 32
            and text.isascii()
            and text.replace("-", "").replace("_", "").isalnum()
        ):
            return text
    token = secrets.token_urlsafe(TOKEN_BYTES)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    tmp.replace(path)
    return token


def csrf_token(secret: str) -> str:
    """The form token for POSTs: a page on another origin can neither read nor compute it."""
    return hmac.new(secret.encode(), b"vinos-dashboard csrf", sha256).hexdigest()


def allowed_hosts(port: int) -> frozenset[str]:
    return frozenset({f"127.0.0.1:{port}", f"localhost:{port}"})


@dataclass(frozen=True, slots=True)
class AccessVerdict:
    """What to do with a request: serve it, refuse it (403 and why), or set the cookie and
    redirect to `location` (the same URL without the token)."""

    allow: bool
    reason: str = ""
    set_cookie: bool = False
    location: str = ""


def check(
    *,
    secret: str,
    port: int,
    method: str,
    path: str,
    query: str,
    headers: dict[str, str],
) -> AccessVerdict:
    """The pure decision for one request (headers lower-cased). The CSRF form field is
    checked by the handler that reads the form (dashboard.app.Pages.change)."""
    host = headers.get("host", "")
    if host not in allowed_hosts(port):
        return AccessVerdict(False, f"Host {host!r} is not this dashboard (127.0.0.1:{port})")
    params = parse_qsl(query, keep_blank_values=True)
    given = next((v for k, v in params if k == "token"), None)
    if given is not None:
        if method in SAFE_METHODS and hmac.compare_digest(given.encode(), secret.encode()):
            rest = urlencode([(k, v) for k, v in params if k != "token"])
            return AccessVerdict(
                True, set_cookie=True, location=path + (f"?{rest}" if rest else "")
            )
        return AccessVerdict(False, "wrong token")
    cookie = SimpleCookie()
    with contextlib.suppress(Exception):
        cookie.load(headers.get("cookie", ""))
    held = cookie[COOKIE].value if COOKIE in cookie else ""
    if not hmac.compare_digest(held.encode(), secret.encode()):
        return AccessVerdict(False, "no token: open the dashboard with 'vinos-routine dashboard'")
    if method not in SAFE_METHODS:
        origin = headers.get("origin")
        if origin is not None and origin not in {f"http://{h}" for h in allowed_hosts(port)}:
            return AccessVerdict(False, f"cross-origin request from {origin!r} refused")
        site = headers.get("sec-fetch-site")
        if site is not None and site not in ("same-origin", "none"):
            return AccessVerdict(False, f"cross-site request ({site}) refused")
    return AccessVerdict(True)


HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    # same-origin, not no-referrer: with no-referrer Chromium sends "Origin: null" on our own
    # form POSTs, which the Origin check must refuse.
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]


class Guard:
    """ASGI middleware: every request passes `check`; every response gets the headers."""

    def __init__(self, app: App, secret: str, port: int) -> None:
        self.app = app
        self.secret = secret
        self.port = port

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        verdict = check(
            secret=self.secret,
            port=self.port,
            method=scope["method"],
            path=scope["path"],
            query=scope.get("query_string", b"").decode("latin-1"),
            headers=headers,
        )
        if not verdict.allow:
            await _plain(send, 403, f"403 forbidden: {verdict.reason}\n")
            return
        if verdict.set_cookie:
            cookie = (
                f"{COOKIE}={self.secret}; HttpOnly; SameSite=Strict; Path=/; Max-Age={30 * 86400}"
            )
            await send(
                {
                    "type": "http.response.start",
                    "status": 303,
                    "headers": [
                        *HEADERS,
                        (b"location", (verdict.location or "/").encode("latin-1")),
                        (b"set-cookie", cookie.encode("latin-1")),
                        (b"content-length", b"0"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": b""})
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        await self.app(scope, receive, send_with_headers)


async def _plain(send: Send, status: int, text: str) -> None:
    body = text.encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                *HEADERS,
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
