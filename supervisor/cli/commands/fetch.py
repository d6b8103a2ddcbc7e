"""Fetching a routine file for `install`: https only (plain http only to this machine, for
tests and local galleries), at most 64 KB, within a deadline, redirects held to the same rule.

The standard library's urllib, not httpx: the CLI stays light (`vinos-routine list` must not
pay for importing an HTTP stack), and one GET needs nothing more.
"""

from __future__ import annotations

import ipaddress
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from http.client import HTTPMessage
from typing import IO

__all__ = ["MAX_BYTES", "FetchError", "check_url", "fetch"]

MAX_BYTES = 64 * 1024
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


class FetchError(RuntimeError):
    """The file could not be fetched; the message says why and, where it can, what to do."""


def _is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_url(url: str) -> None:
    """FetchError unless `url` is https, or http to this machine (127.0.0.1, ::1, localhost)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if not host:
        raise FetchError(f"{url}: not a URL with a host name")
    if parts.scheme == "https":
        return
    if parts.scheme == "http" and _is_loopback(host):
        _check_listener(url, host, parts.port or 80)
        return
    if parts.scheme == "http":
        raise FetchError(
            f"{url}: refusing plain http (anyone on the way could change the routine); "
            "use an https:// URL"
        )
    raise FetchError(f"{url}: only https:// URLs can be installed (found {parts.scheme}:)")


def _check_listener(url: str, host: str, port: int) -> None:
    """FetchError when a port of this machine that plain http would reach is held by another
    user's program. "This machine" is not "this person": another local user who binds the
    person's local gallery port first (python -m http.server 8000, started only now and
    then) would serve the file installed, card and all. The same rule as the worker's
    connector, from the same socket tables (routines/listeners.py); no user is trusted but
    this one and root (tests/cli/test_redteam_install.py)."""
    from routines.listeners import foreign_holder, user_name

    try:
        uid = foreign_holder(host, port, ())
    except OSError as exc:  # no socket table to read: refuse rather than guess
        raise FetchError(f"{url}: cannot tell who listens on port {port}: {exc}") from None
    if uid is not None:
        who = user_name(uid)
        raise FetchError(
            f"{url}: port {port} of this machine is held by another user's program (uid "
            f"{uid}{', user ' + who if who else ''}), not yours; nothing was asked of it. "
            "Serve the file as your own user, or install it from an https:// URL or a file"
        )


class _CheckedRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is followed only to a URL `check_url` accepts (never https → http)."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        check_url(newurl)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _user_agent() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"vinos-routine/{version('vinos-routine')}"
    except PackageNotFoundError:
        return "vinos-routine"


def fetch(url: str, timeout: float, max_bytes: int = MAX_BYTES) -> bytes:
    """The body of a GET of `url`; FetchError on refusal, HTTP errors, size and time limits."""
    check_url(url)
    deadline = time.monotonic() + timeout
    opener = urllib.request.build_opener(_CheckedRedirects)
    request = urllib.request.Request(
        url, headers={"User-Agent": _user_agent(), "Accept": "application/toml, text/plain"}
    )
    try:
        with opener.open(request, timeout=timeout) as resp:
            length = resp.headers.get("Content-Length")
            if length and length.isdigit() and int(length) > max_bytes:
                raise FetchError(_too_big(url, int(length), max_bytes))
            chunks: list[bytes] = []
            size = 0
            while True:
                if time.monotonic() > deadline:
                    raise FetchError(f"{url}: did not finish within {timeout:g}s")
                chunk = resp.read1(8192)
                if not chunk:
                    break
                size += len(chunk)
                if size > max_bytes:
                    raise FetchError(_too_big(url, None, max_bytes))
                chunks.append(chunk)
    except FetchError:
        raise
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise FetchError(f"{url}: not found (HTTP 404)") from None
        raise FetchError(f"{url}: the server answered HTTP {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, TimeoutError | socket.timeout):
            raise FetchError(f"{url}: no answer within {timeout:g}s") from None
        if isinstance(reason, FetchError):
            raise reason from None
        text = getattr(reason, "strerror", None) or str(reason)
        raise FetchError(f"{url}: cannot connect: {text}") from None
    except TimeoutError:
        raise FetchError(f"{url}: no answer within {timeout:g}s") from None
    except OSError as exc:
        raise FetchError(f"{url}: {exc.strerror or exc}") from None
    return b"".join(chunks)


def _too_big(url: str, size: int | None, cap: int) -> str:
    what = f"{size:,} bytes" if size is not None else f"more than {cap:,} bytes"
    return f"{url}: {what}, over the {cap // 1024} KB a routine file may have; not installed"
