"""Who may use the dashboard, and how: its secrets, the Host check, CSRF, the headers.

The secrets, each with one job (tests/dashboard/test_dashboard_units.py pins them apart):
- The launch token (32 random bytes) is kept in $XDG_RUNTIME_DIR/vinos-routine/dashboard.token,
  mode 0600 in a 0700 directory: another local user can reach 127.0.0.1:PORT but cannot read
  it. It is made anew at each start and is good for ONE exchange: `/?token=…` gets the session
  cookie and a redirect without the token, and the file then holds a fresh token for the next
  `vinos-routine dashboard`. A token seen in the browser's history opens nothing.
- The session cookie is made at each start and held only in memory: a restart drops every
  session. HttpOnly, SameSite=Strict, no Max-Age (it ends with the browser session). Not
  `__Host-`: that prefix needs `Secure`, which browsers honour on http://127.0.0.1
  unevenly, and it would not help here: every port of 127.0.0.1 is the same host to the
  cookie jar, so another port could set the same cookie. What keeps the cookie from another
  port is its path, below, and that the dashboard never links there (dashboard.render).
- The session's base path (`/s/` and 24 random characters, per start): every page is under
  it, and so is the cookie (`Path=`). A cookie jar is per host, not per port, so a page that
  another local user serves on another port of 127.0.0.1, loaded in the same browser, would
  receive a `Path=/` cookie; it does not know the base path, so it receives nothing
  (tests/dashboard/test_dashboard_squatter.py, in Chromium).
- The CSRF key, its own random value per start, is in every form: a holder of the cookie
  alone cannot compute it.
- Host must be 127.0.0.1:PORT or localhost:PORT exactly (DNS rebinding: a page on evil.test
  resolved to 127.0.0.1 sends Host: evil.test).
- A POST must say where it comes from: an Origin of this very server, or, without Origin,
  `Sec-Fetch-Site: same-origin`. Neither: 403. SameSite=Strict alone is not enough: another
  port on localhost is the *same site*, so the cookie goes along with its requests.
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
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

from routines.store import write_atomic

__all__ = [
    "COOKIE",
    "CSP",
    "AccessVerdict",
    "Guard",
    "Secrets",
    "allowed_hosts",
    "check",
    "cookie_values",
    "new_token",
    "private_dir",
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


def private_dir(directory: Path) -> None:
    """Make `directory` (the runtime dir) if missing, and make sure it is ours and private
    before anything is written there: a dir of another uid raises PermissionError, a link
    in its place OSError; one of ours with a looser mode is made 0700 (as the daemon does).

    $XDG_RUNTIME_DIR may be a place others can write (a shared /tmp); the dir's owner could
    then swap the opener page or plant the state file the listener check reads.
    tests/dashboard/test_redteam_runtime_dir.py holds it.
    """
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if st.st_uid != os.getuid():
            raise PermissionError(
                f"{directory} belongs to uid {st.st_uid}, not to you: the dashboard writes "
                "its secrets only in a private dir of yours (set XDG_RUNTIME_DIR to one, "
                f"normally /run/user/{os.getuid()})"
            )
        if stat.S_IMODE(st.st_mode) != 0o700:
            os.fchmod(fd, 0o700)
    finally:
        os.close(fd)


def new_token(path: Path) -> str:
    """A fresh launch token, written to `path` (0600, atomically, never through a link
    planted there). Whatever the file held before is no longer good."""
    private_dir(path.parent)
    token = secrets.token_urlsafe(TOKEN_BYTES)
    write_atomic(path, (token + "\n").encode(), mode=0o600)
    return token


@dataclass(frozen=True, slots=True)
class Secrets:
    """The per-start secrets: the session cookie's value, the CSRF form value and the base
    path every page and the cookie live under. Never written anywhere, never derived from
    each other or from the launch token."""

    session: str
    csrf: str
    base: str  # "/s/…": no trailing slash

    @classmethod
    def new(cls) -> Secrets:
        return cls(
            secrets.token_urlsafe(TOKEN_BYTES),
            secrets.token_urlsafe(TOKEN_BYTES),
            "/s/" + secrets.token_urlsafe(18),
        )


def allowed_hosts(port: int) -> frozenset[str]:
    return frozenset({f"127.0.0.1:{port}", f"localhost:{port}"})


def cookie_values(header: str, name: str = COOKIE) -> list[str]:
    """Every value the Cookie header gives `name` (pure). All of them, not the last: a page
    on another port of 127.0.0.1 can set a cookie of the same name (the jar is per host), and
    that must not hide ours."""
    out = []
    for part in header.split(";"):
        key, sep, value = part.strip().partition("=")
        if sep and key == name:
            out.append(value.strip().strip('"'))
    return out


@dataclass(frozen=True, slots=True)
class AccessVerdict:
    """What to do with a request: serve it, refuse it (403 and why), or exchange the launch
    token: set the cookie, make a new token, and redirect to `location` (the same URL
    without the token)."""

    allow: bool
    reason: str = ""
    set_cookie: bool = False
    location: str = ""


def check(
    *,
    launch: str,
    session: str,
    base: str,
    port: int,
    method: str,
    path: str,
    query: str,
    headers: dict[str, str],
) -> AccessVerdict:
    """The pure decision for one request (headers lower-cased). `launch` is the launch token
    good now ("" when none is); `base` the session's base path. The CSRF form field is
    checked by the handler that reads the form (dashboard.app.Pages.change)."""
    host = headers.get("host", "")
    if host not in allowed_hosts(port):
        return AccessVerdict(False, f"Host {host!r} is not this dashboard (127.0.0.1:{port})")
    params = parse_qsl(query, keep_blank_values=True)
    given = next((v for k, v in params if k == "token"), None)
    if given is not None:
        if method not in SAFE_METHODS:
            return AccessVerdict(False, "the launch token is taken by a GET only")
        if launch and hmac.compare_digest(given.encode(), launch.encode()):
            rest = urlencode([(k, v) for k, v in params if k != "token"])
            inside = path if _within(path, base) else base + path
            return AccessVerdict(
                True, set_cookie=True, location=inside + (f"?{rest}" if rest else "")
            )
        return AccessVerdict(
            False,
            "this link was used already or is from an earlier start: "
            "run 'vinos-routine dashboard' again to open a new one",
        )
    held = cookie_values(headers.get("cookie", ""))
    if not _within(path, base) or not any(
        hmac.compare_digest(h.encode(), session.encode()) for h in held
    ):
        return AccessVerdict(False, "no token: open the dashboard with 'vinos-routine dashboard'")
    if method not in SAFE_METHODS:
        ours = {f"http://{h}" for h in allowed_hosts(port)}
        origin = headers.get("origin")
        site = headers.get("sec-fetch-site")
        if origin is not None and origin not in ours:
            return AccessVerdict(False, f"cross-origin request from {origin!r} refused")
        if site is not None and site != "same-origin":
            return AccessVerdict(False, f"cross-site request ({site}) refused")
        if origin is None and site is None:
            return AccessVerdict(
                False, "a change needs an Origin or Sec-Fetch-Site: same-origin header"
            )
    return AccessVerdict(True)


def _within(path: str, base: str) -> bool:
    return path == base or path.startswith(base + "/")


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
    """ASGI middleware: every request passes `check`; every response gets the headers. It
    holds the launch token good now, and makes the next one (into `token_file`) when a
    browser has exchanged it."""

    def __init__(
        self, app: App, *, keys: Secrets, launch: str, token_file: Path, port: int
    ) -> None:
        self.app = app
        self.keys = keys
        self.launch = launch
        self.token_file = token_file
        self.port = port

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        verdict = check(
            launch=self.launch,
            session=self.keys.session,
            base=self.keys.base,
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
            # One exchange per token: the next `vinos-routine dashboard` reads the new one.
            self.launch = ""
            with contextlib.suppress(OSError):
                self.launch = new_token(self.token_file)
            keys = self.keys
            cookie = f"{COOKIE}={keys.session}; HttpOnly; SameSite=Strict; Path={keys.base}"
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

        # The routes are matched below the base path (Starlette reads root_path).
        await self.app({**scope, "root_path": self.keys.base}, receive, send_with_headers)


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
