"""JSON over HTTP/1.1 on the standard library (http.client), for Ollama and webhooks.

Why not httpx: importing it costs a worker about 60 ms, three times Python's own start-up,
on every local run, and these two callers need nothing it adds: one POST, a JSON body,
separate connect and read timeouts, no redirects, no proxies, no cookies, no .netrc.
Failures are raised as three kinds of HttpError; statuses >= 400 are returned, not raised.
"""

from __future__ import annotations

import http.client
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson

__all__ = ["Broken", "ConnectFailed", "HttpError", "Response", "TimedOut", "post_json"]


class HttpError(Exception):
    """The request got no HTTP response; `str()` says why in a few words."""


class ConnectFailed(HttpError):
    """No connection: refused, unreachable, unknown host, TLS handshake failed."""


class TimedOut(HttpError):
    """Connected, but no (complete) response within the timeout."""


class Broken(HttpError):
    """The connection broke or the peer did not speak HTTP."""


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    reason: str
    body: bytes

    def json(self) -> Any:
        """The body as JSON; ValueError when it is not."""
        return orjson.loads(self.body)

    def text(self, limit: int = 300) -> str:
        return self.body[:limit].decode("utf-8", "replace")


def post_json(url: str, payload: Any, *, timeout: float, connect_timeout: float = 5.0) -> Response:
    """POST `payload` as JSON to `url`. `timeout` bounds each wait for the server once
    connected (a non-streaming reply arrives at once, so in effect the whole answer)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConnectFailed(f"not an http(s) URL: {url!r}")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = cls(parts.hostname, parts.port, timeout=min(connect_timeout, timeout))
    body = orjson.dumps(payload)
    try:
        try:
            conn.connect()
        except TimeoutError:
            raise ConnectFailed("connection timed out") from None
        except OSError as exc:
            raise ConnectFailed(exc.strerror or str(exc) or type(exc).__name__) from None
        assert conn.sock is not None
        conn.sock.settimeout(timeout)
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        try:
            conn.request("POST", path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        except TimeoutError:
            raise TimedOut(f"no answer within {timeout:.0f} s") from None
        except http.client.RemoteDisconnected:
            raise Broken("the server closed the connection without a response") from None
        except (http.client.HTTPException, OSError) as exc:
            raise Broken(str(exc) or type(exc).__name__) from None
        return Response(resp.status, resp.reason, data)
    finally:
        conn.close()
