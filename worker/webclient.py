"""The worker's HTTP, for Ollama, webhooks and the ntfy push (worker/ntfy.py): httpx2 (the
anthropic and openai SDKs' own HTTP stack), and the httpx2 clients the Anthropic and
OpenAI-compatible routes hand their SDKs.
Every client the worker has is built here (`deadline_client`), and every connection any of
them opens is decided by the connector (worker/connector.py) inside the network backend, as
it is made, and goes to the addresses it decided on (tests/worker/test_outbound.py: nothing else).

One client per worker process, so per run (`shared()`): the tool loop's calls to Ollama reuse
one kept-alive connection. httpx2 is imported on the first request, never by the daemon.

What each request gets, and why:
- a total deadline: httpx2's timeouts bound each socket operation, so a server that drips a
  byte at a time could hold a run far past its limit. `DeadlineBackend` clamps every
  connect, read and write to what is left of the request's deadline;
- proxies from the environment (HTTP(S)_PROXY, ALL_PROXY, NO_PROXY, as curl reads them),
  except for loopback hosts, which are always reached directly (a local Ollama behind a
  corporate proxy would otherwise be unreachable: Go's net/http makes the same exception);
  another name for this machine is refused rather than proxied (the connector);
- redirects: `Redirects.NONE` returns a 3xx as the response (webhooks: the payload goes to
  the URL the user wrote, nowhere else); `Redirects.SAME_HOST` follows up to
  MAX_REDIRECTS to the same host and refuses another (Ollama);
- bodies capped at `max_body` bytes (decoded), the excess an error, never buffered.

Failures raise one of three HttpError kinds; HTTP statuses >= 400 are returned, not raised.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

import orjson

from worker import connector as _connector
from worker.connector import Refused, Trust

if TYPE_CHECKING:
    import httpx2

__all__ = [
    "MAX_BODY",
    "MAX_REDIRECTS",
    "USER_AGENT",
    "Broken",
    "ConnectFailed",
    "DeadlineBackend",
    "HttpError",
    "Redirects",
    "Refused",
    "Response",
    "TimedOut",
    "WebClient",
    "deadline_client",
    "shared",
    "why",
]

MAX_BODY = 64 << 20  # a reply larger than this is not an Ollama chat reply
MAX_REDIRECTS = 3
USER_AGENT = "vinos-routine (worker)"
# Loopback is never proxied (see the module docstring).
_DIRECT = ("all://127.0.0.1", "all://localhost", "all://[::1]")
_PORTS = {"http": 80, "https": 443}


class HttpError(Exception):
    """The request got no usable HTTP response; `str()` says why in a few words."""


class ConnectFailed(HttpError):
    """No connection: refused, unreachable, unknown host, TLS handshake failed."""


class TimedOut(HttpError):
    """Connected, but no complete response before the deadline."""


class Broken(HttpError):
    """The connection broke, the peer did not speak HTTP, or the reply broke a limit."""


class Redirects(Enum):
    NONE = "none"  # a 3xx is the answer (webhooks)
    SAME_HOST = "same-host"  # follow up to MAX_REDIRECTS to the same host (Ollama)


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    reason: str
    body: bytes  # empty when the lines went to `on_line`
    headers: tuple[tuple[str, str], ...] = ()  # lower-case names, as received

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k == name), None)

    def json(self) -> Any:
        """The body as JSON; ValueError when it is not."""
        return orjson.loads(self.body)

    def text(self, limit: int = 300) -> str:
        return self.body[:limit].decode("utf-8", "replace")


LineSink = Callable[[bytes], None]


class WebClient:
    """POST JSON with the rules above; one instance keeps its connections alive."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        connector: _connector.Connector | None = None,
    ) -> None:
        self._clock = clock
        self._connector = connector
        self._client: httpx2.Client | None = None
        self._backend: DeadlineBackend | None = None

    def post_json(
        self,
        url: str,
        payload: Any,
        *,
        timeout: float,
        connect_timeout: float = 5.0,
        redirects: Redirects = Redirects.NONE,
        on_line: LineSink | None = None,
        max_body: int = MAX_BODY,
        headers: dict[str, str] | None = None,
        trust: Trust,
    ) -> Response:
        """POST `payload` as JSON to `url` (`post`'s rules)."""
        return self.post(
            url,
            orjson.dumps(payload),
            "application/json",
            timeout=timeout,
            connect_timeout=connect_timeout,
            redirects=redirects,
            on_line=on_line,
            max_body=max_body,
            headers=headers,
            trust=trust,
        )

    def post(
        self,
        url: str,
        content: bytes,
        content_type: str,
        *,
        timeout: float,
        connect_timeout: float = 5.0,
        redirects: Redirects = Redirects.NONE,
        on_line: LineSink | None = None,
        max_body: int = MAX_BODY,
        headers: dict[str, str] | None = None,
        trust: Trust,
    ) -> Response:
        """POST `content` to `url`; the whole answer must arrive within `timeout` seconds.

        With `on_line`, a 2xx body is handed over line by line as it arrives (NDJSON) and
        not kept; any other status keeps its body for the error message. `headers` are added
        to the request (an Authorization header: never logged, never in an error). `trust`:
        who may listen where a connection lands on this machine (Refused if anyone else).
        """
        import httpx2

        client, backend = self._open()
        backend.trust = trust
        deadline = backend.deadline = self._clock() + timeout
        try:
            request = client.build_request(
                "POST",
                url,
                content=content,
                headers={"Content-Type": content_type, **(headers or {})},
                timeout=httpx2.Timeout(timeout, connect=min(connect_timeout, timeout)),
            )
            for _ in range(MAX_REDIRECTS + 1):
                response = client.send(request, stream=True)
                try:
                    nxt = response.next_request
                    if redirects is Redirects.SAME_HOST and nxt is not None:
                        if nxt.url.host != request.url.host:
                            raise Broken(f"it redirected to another host ({nxt.url.host}): refused")
                        request = nxt
                        continue
                    streaming = on_line is not None and 200 <= response.status_code < 300
                    body = _read(response.iter_bytes(), max_body, on_line if streaming else None)
                    got = tuple((k.lower(), v) for k, v in response.headers.items())
                    return Response(response.status_code, response.reason_phrase, body, got)
                finally:
                    response.close()
            raise Broken(f"more than {MAX_REDIRECTS} redirects")
        except httpx2.TimeoutException:
            raise TimedOut(f"no answer within {timeout:.0f} s") from None
        except (httpx2.ConnectError, httpx2.ProxyError, httpx2.UnsupportedProtocol) as exc:
            raise ConnectFailed(why(exc)) from None
        except httpx2.InvalidURL as exc:
            raise ConnectFailed(f"not a usable URL: {exc}") from None
        except httpx2.HTTPError as exc:
            if self._clock() >= deadline:
                raise TimedOut(f"no answer within {timeout:.0f} s") from None
            raise Broken(why(exc)) from None
        finally:
            backend.deadline = None
            backend.trust = None

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _open(self) -> tuple[httpx2.Client, DeadlineBackend]:
        if self._client is None or self._backend is None:
            self._client, self._backend = deadline_client(
                None,
                self._clock,
                headers={"User-Agent": USER_AGENT, "Accept": "application/json"},
                connector=self._connector,
            )
        return self._client, self._backend


def deadline_client(
    trust: Trust | None,
    clock: Callable[[], float] = time.monotonic,
    *,
    headers: dict[str, str] | None = None,
    connector: _connector.Connector | None = None,
) -> tuple[httpx2.Client, DeadlineBackend]:
    """An httpx2 client with the rules above (no redirects followed, loopback never proxied)
    whose every connection the connector decides (for `trust`; None: set on the backend per
    request, as WebClient does, and no connection without it) and whose every socket
    operation is clamped by the returned backend's `deadline` while it is set. WebClient's
    own, and the ones the Anthropic and OpenAI-compatible routes hand their SDKs."""
    import httpx2

    backend = DeadlineBackend(clock, connector or _connector.default())
    backend.trust = trust

    def note(request: httpx2.Request) -> None:
        # The request's URL, for the connector's refusal and its proxy check: httpcore's
        # connect_tcp sees only a host and a port.
        backend.url = str(request.url)
        backend.target = (request.url.host, request.url.port or _PORTS.get(request.url.scheme))

    client = httpx2.Client(
        headers=headers,
        follow_redirects=False,
        trust_env=True,
        mounts=dict.fromkeys(_DIRECT),
        event_hooks={"request": [note]},
    )
    # httpx2 has no hook for the network backend of the pools it builds (the direct one
    # and one per proxy from the environment): each is given ours. Pinned by
    # tests/worker/test_webclient.py's drip and proxy tests, which fail if this breaks.
    transports = [client._transport, *client._mounts.values()]
    for transport in transports:
        pool = getattr(transport, "_pool", None)
        if pool is not None:
            backend.inner = pool._network_backend
            pool._network_backend = backend
    return client, backend


def _read(chunks: Iterable[bytes], limit: int, on_line: LineSink | None) -> bytes:
    """The body under `limit` bytes; with `on_line`, each complete line goes out at once."""
    data = bytearray()
    total = 0
    for chunk in chunks:
        total += len(chunk)
        if total > limit:
            raise Broken(f"the reply passed {_size(limit)}")
        data += chunk
        if on_line is not None:
            *lines, rest = bytes(data).split(b"\n")
            data = bytearray(rest)
            for line in lines:
                if line.strip():
                    on_line(line)
    if on_line is not None:
        if data.strip():
            on_line(bytes(data))
        return b""
    return bytes(data)


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n:,} bytes"


def why(exc: Exception) -> str:
    text = str(exc).strip()
    cause = exc.__cause__ or exc.__context__
    if not text and cause is not None:
        text = str(cause).strip()
    return text or type(exc).__name__


_SHARED: WebClient | None = None


def shared() -> WebClient:
    """The run's client (a worker process is one run)."""
    global _SHARED
    if _SHARED is None:
        _SHARED = WebClient()
    return _SHARED


class DeadlineBackend:
    """httpcore2's network backend with every blocking call clamped to `deadline` (a clock
    reading; None: unclamped), which the caller sets before a request and clears after."""

    def __init__(self, clock: Callable[[], float], connector: _connector.Connector) -> None:
        self.clock = clock
        self.connector = connector
        # Who may listen where a connection lands on this machine (None: no connection), and
        # the request being sent (set by the client's request hook).
        self.trust: Trust | None = None
        self.url: str | None = None
        self.target: tuple[str, int | None] | None = None
        self.deadline: float | None = None
        # Bytes the request may still read off the wire (None: uncounted), set beside
        # `deadline`: a caller that cannot cap what a library buffers (the openai SDK reads
        # the body itself) caps it here. Pinned by tests/worker/test_worker_openai.py::
        # test_a_reply_past_the_cap_is_cut_not_buffered.
        self.left: int | None = None
        self.inner: Any = None

    def spend(self, count: int) -> None:
        """Count `count` bytes read; past the budget, the read fails (nothing more is read)."""
        if self.left is None:
            return
        self.left -= count
        if self.left < 0:
            import httpcore2

            raise httpcore2.ReadError("the reply passed its size cap")

    def clamp(self, timeout: float | None, kind: str) -> float | None:
        if self.deadline is None:
            return timeout
        left = self.deadline - self.clock()
        if left <= 0:
            import httpcore2

            error: type[Exception] = getattr(httpcore2, f"{kind}Timeout")
            raise error("the request's deadline passed")
        return left if timeout is None else min(timeout, left)

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> _DeadlineStream:
        """Connect to where the connector decides `host` may be reached, trying the
        addresses of its one resolution in order (as socket.create_connection would)."""
        import httpcore2

        if self.trust is None:
            raise Refused(f"no connection to {host}:{port}: nobody said whom it may reach")
        url = self.url or f"//{host}:{port}"
        proxied = self.target is not None and self.target != (host, port)
        try:
            if proxied and self.target is not None:
                # Through a proxy: the proxy connects on to the URL's host, where no check
                # of ours reaches; a host of this machine must not go that way.
                self.connector.not_proxied(url, *self.target, host, port, self.trust)
            # A TLS tunnel through a proxy carries nothing of ours the proxy can read.
            tunnel = proxied and url.startswith("https:")
            addresses = self.connector.addresses(url, host, port, self.trust, sends=not tunnel)
        except Refused as exc:
            if not proxied:
                raise
            raise Refused(f"{exc}. That port is the proxy HTTP(S)_PROXY names") from None
        except (OSError, UnicodeError) as exc:  # does not resolve (IDNA refuses `a..b`)
            why = getattr(exc, "strerror", None) or exc
            raise httpcore2.ConnectError(f"cannot resolve {host}: {why}") from None
        error: Exception = httpcore2.ConnectError(f"{host} resolves to no address")
        for address in addresses:
            try:
                stream = self.inner.connect_tcp(
                    address, port, self.clamp(timeout, "Connect"), local_address, socket_options
                )
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                error = exc
                continue
            return _DeadlineStream(stream, self)
        raise error

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> _DeadlineStream:
        # No client here is given a socket path (httpx2's `uds`): a Unix socket's owner is
        # not decided by the connector, so none is connected to.
        raise Refused(f"no connection to the Unix socket {path}: the worker sends only over TCP")

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)


class _DeadlineStream:
    def __init__(self, inner: Any, backend: DeadlineBackend) -> None:
        self._inner = inner
        self._backend = backend

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data: bytes = self._inner.read(max_bytes, self._backend.clamp(timeout, "Read"))
        self._backend.spend(len(data))
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, self._backend.clamp(timeout, "Write"))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> _DeadlineStream:
        tls = self._inner.start_tls(
            ssl_context, server_hostname, self._backend.clamp(timeout, "Connect")
        )
        return _DeadlineStream(tls, self._backend)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)
