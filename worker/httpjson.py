"""POST JSON, get JSON: the worker's HTTP for Ollama and webhooks, on the standard library.

Why not httpx: importing it costs a worker about 60 ms, three times Python's own start-up,
on every local run, and these callers need nothing it adds: one POST with a JSON body,
a connect timeout and a deadline, no redirects, no proxies, no cookies, no .netrc.

Plain `http://` (a local Ollama: the start-up path) is one HTTP/1.0 exchange on a socket:
the server then sends no chunked encoding and ends the body by closing, so reading to EOF
under a size cap and a deadline is the whole client. `https://` goes through http.client.
Failures raise one of three HttpError kinds; HTTP statuses >= 400 are returned, not raised.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from typing import Any

import orjson

from routines.safetext import redact_url

__all__ = [
    "MAX_BODY",
    "Broken",
    "ConnectFailed",
    "HttpError",
    "Response",
    "TimedOut",
    "parse_response",
    "post_json",
    "split_url",
]

MAX_BODY = 64 << 20  # a reply larger than this is not an Ollama chat reply
_CHUNK = 1 << 16


class HttpError(Exception):
    """The request got no HTTP response; `str()` says why in a few words."""


class ConnectFailed(HttpError):
    """No connection: refused, unreachable, unknown host, TLS handshake failed."""


class TimedOut(HttpError):
    """Connected, but no complete response before the deadline."""


class Broken(HttpError):
    """The connection broke, or the peer did not speak HTTP."""


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


def split_url(url: str) -> tuple[str, str, int, str]:
    """(scheme, host, port, path) of an http(s) URL; ConnectFailed when it is not one."""
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in ("http", "https"):
        raise ConnectFailed(f"not an http(s) URL: {redact_url(url)}")
    hostport, slash, path = rest.partition("/")
    hostport, _, query = hostport.partition("?")
    path = "/" + path if slash else "/"
    if query:
        path += "?" + query
    if "@" in hostport or any(c in url for c in "\r\n\0 "):
        raise ConnectFailed(f"unsupported URL: {redact_url(url)}")
    if hostport.startswith("["):  # [::1]:11434
        host, _, tail = hostport[1:].partition("]")
        port_text = tail[1:] if tail.startswith(":") else ""
    else:
        host, _, port_text = hostport.partition(":")
    if not host:
        raise ConnectFailed(f"no host in URL: {redact_url(url)}")
    try:
        port = int(port_text) if port_text else (443 if scheme == "https" else 80)
    except ValueError:
        raise ConnectFailed(f"bad port in URL: {redact_url(url)}") from None
    return scheme, host, port, path


def post_json(url: str, payload: Any, *, timeout: float, connect_timeout: float = 5.0) -> Response:
    """POST `payload` as JSON to `url`; the whole answer must arrive within `timeout`."""
    scheme, host, port, path = split_url(url)
    body = orjson.dumps(payload)
    if scheme == "https":
        return _post_tls(host, port, path, body, timeout, connect_timeout)
    deadline = time.monotonic() + timeout
    try:
        sock = socket.create_connection((host, port), timeout=min(connect_timeout, timeout))
    except TimeoutError:
        raise ConnectFailed("connection timed out") from None
    except OSError as exc:
        raise ConnectFailed(exc.strerror or str(exc) or type(exc).__name__) from None
    with sock:
        authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        head = (
            f"POST {path} HTTP/1.0\r\nHost: {authority}\r\n"
            "Content-Type: application/json\r\nAccept: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        data = bytearray()
        try:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            sock.sendall(head.encode("ascii") + body)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                sock.settimeout(left)
                chunk = sock.recv(_CHUNK)
                if not chunk:
                    break
                data += chunk
                if len(data) > MAX_BODY:
                    raise Broken(f"the reply passed {MAX_BODY >> 20} MiB")
        except TimeoutError:
            raise TimedOut(f"no answer within {timeout:.0f} s") from None
        except OSError as exc:
            raise Broken(exc.strerror or str(exc) or type(exc).__name__) from None
    return parse_response(bytes(data))


def parse_response(data: bytes) -> Response:
    """An HTTP/1.x response read to EOF (no chunked encoding: we asked in HTTP/1.0)."""
    if not data:
        raise Broken("the server closed the connection without a response")
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        raise Broken("the server's response ended inside its headers")
    lines = head.decode("iso-8859-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise Broken(f"not an HTTP response: {lines[0][:80]!r}")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        raise Broken("the server sent a chunked body to an HTTP/1.0 request")
    length = headers.get("content-length")
    if length is not None and length.isdigit():
        if len(body) < int(length):
            raise Broken("the server closed the connection inside the body")
        body = body[: int(length)]
    return Response(int(parts[1]), parts[2] if len(parts) > 2 else "", body)


def _post_tls(
    host: str, port: int, path: str, body: bytes, timeout: float, connect_timeout: float
) -> Response:
    import http.client  # imports ssl and email: only for an https:// URL

    conn = http.client.HTTPSConnection(host, port, timeout=min(connect_timeout, timeout))
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
            data = resp.read(MAX_BODY + 1)
        except TimeoutError:
            raise TimedOut(f"no answer within {timeout:.0f} s") from None
        except http.client.RemoteDisconnected:
            raise Broken("the server closed the connection without a response") from None
        except (http.client.HTTPException, OSError) as exc:
            raise Broken(str(exc) or type(exc).__name__) from None
        if len(data) > MAX_BODY:
            raise Broken(f"the reply passed {MAX_BODY >> 20} MiB")
        return Response(resp.status, resp.reason, data)
    finally:
        conn.close()
