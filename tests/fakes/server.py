"""A scripted HTTP/1.1 server on 127.0.0.1, the base of the fake providers.

Each request to a scripted route takes the next entry of the script: a `Reply`, or a callable
that gets the `Recorded` request and returns a `Reply`. Every request is recorded (method,
path, headers, parsed JSON body, arrival time) for assertions. A reply can be slow (`delay`)
or drop the connection without answering (`drop`), or send its body in chunks (`chunks`, with
Transfer-Encoding: chunked, `chunk_delay` seconds apart). The server runs in daemon threads and
stops at `close()` / the end of a `with` block, even while a slow reply is still waiting.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

__all__ = ["FakeServer", "Recorded", "Reply", "Script"]


@dataclass(frozen=True)
class Reply:
    """One scripted answer."""

    status: int = 200
    body: Any = None  # a dict/list is sent as JSON; bytes/str as is
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds to wait before answering (a slow provider)
    drop: bool = False  # close the connection without any response
    # Send these as a chunked body instead of `body`; a callable is called in its place (a
    # test's gate: the server waits there).
    chunks: tuple[bytes | Callable[[], None], ...] | None = None
    chunk_delay: float = 0.0  # seconds before each chunk after the first


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: Any  # parsed JSON, or None when the body was empty or not JSON
    raw: bytes
    at: float  # time.monotonic() when the request had been read


Script = Reply | Callable[[Recorded], Reply]


class FakeServer:
    """Subclasses set `scripted` (routes that consume the script) and may override `route`."""

    scripted: frozenset[tuple[str, str]] = frozenset()

    def __init__(self, script: Iterable[Script] = (), *, default: Script | None = None) -> None:
        self._script: deque[Script] = deque(script)
        self.default = default
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    # --- public ---

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def add(self, *replies: Script) -> None:
        """Append replies to the script."""
        with self._lock:
            self._script.extend(replies)

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._script)

    def requests_to(self, path: str) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.path == path]

    def close(self) -> None:
        self._stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- for subclasses ---

    def route(self, req: Recorded) -> Reply:
        """Answer a request that is not scripted (default: 404 in the provider's error shape)."""
        return Reply(404, {"error": f"no route {req.method} {req.path}"})

    def finish(self, req: Recorded, reply: Reply) -> Reply:
        """The reply as sent (default: as scripted); e.g. streamed when the request asks."""
        return reply

    def exhausted(self, req: Recorded) -> Reply:
        return Reply(500, {"error": f"fake server: script exhausted at {req.method} {req.path}"})

    # --- internals ---

    def _next(self, req: Recorded) -> Reply:
        with self._lock:
            entry = self._script.popleft() if self._script else self.default
        if entry is None:
            return self.exhausted(req)
        return entry(req) if callable(entry) else entry

    def _answer(self, req: Recorded) -> Reply:
        if (req.method, req.path) in self.scripted:
            return self._next(req)
        return self.route(req)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass  # keep test output clean

            def _serve(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = None
                req = Recorded(
                    method=self.command,
                    path=self.path.split("?", 1)[0],
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=body,
                    raw=raw,
                    at=time.monotonic(),
                )
                with server._lock:
                    server.requests.append(req)
                reply = server.finish(req, server._answer(req))
                if reply.delay and server._stop.wait(reply.delay):
                    self.close_connection = True
                    return
                if reply.drop:
                    self.close_connection = True
                    return
                if reply.chunks is not None:
                    self._send_chunks(reply)
                    return
                data, ctype = _encode(reply.body)
                self.send_response(reply.status)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(data)))
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _send_chunks(self, reply: Reply) -> None:
                self.send_response(reply.status)
                if not any(k.lower() == "content-type" for k in reply.headers):
                    self.send_header("content-type", "application/x-ndjson")
                self.send_header("transfer-encoding", "chunked")
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                for i, chunk in enumerate(reply.chunks or ()):
                    if callable(chunk):
                        chunk()
                        continue
                    if i and reply.chunk_delay and server._stop.wait(reply.chunk_delay):
                        self.close_connection = True
                        return
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _serve

        return Handler


def _encode(body: Any) -> tuple[bytes, str]:
    """A scripted body as bytes and its content type: JSON, text, or bytes as they are."""
    if isinstance(body, dict | list):
        return json.dumps(body).encode(), "application/json"
    if isinstance(body, str):
        return body.encode(), "text/plain; charset=utf-8"
    return body or b"", "application/octet-stream"
