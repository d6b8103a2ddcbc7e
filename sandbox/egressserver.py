"""The egress proxy process: accepts the sandbox's connections and relays what policy allows.

It parses bytes a hostile sandbox sends, so it runs apart from the worker, which holds the
API key: sandbox/netns.py's ProxyProcess starts it (via sandbox/egressd.py) with an empty
environment, stdin a pipe whose end is the call's end, stdout /dev/null, stderr the worker's
log, and one more fd: the network holder's (sandbox/netholder.py) listener on
127.0.0.1:PROXY_PORT inside the sandbox's namespace. A socket stays in the namespace it was
made in, whoever holds it, so the proxy accepts there and connects from its own, the host's.

It ends when its stdin reaches EOF (the call is over, or the worker died), at once: every
connection it held goes with the process. tests/sandbox/test_egress_process.py holds that.

Threads: one accepting, one per connection, the main one waiting for EOF.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
import sys
import threading
from collections.abc import Callable

from sandbox.egress import (
    CHUNKED,
    Dialer,
    EgressPolicy,
    HostDialer,
    Refusal,
    decide,
    parse_head,
    policy_from_argv,
)
from sandbox.onlink import Network, read_on_link
from sandbox.tlshello import MAX_HELLO, HelloState, parse_client_hello

__all__ = ["MAX_CONNECTIONS", "ProxyServer", "main", "sni_refusal"]

MAX_CONNECTIONS = 32  # at once, per shell call
_HEAD_MAX = 16 * 1024
_HEAD_TIMEOUT_SEC = 30.0
_CHUNK = 65536

Log = Callable[[str], None]


def sni_refusal(first: bytes, host: str) -> Refusal | bool | None:
    """With a host list, whether the first bytes through a tunnel to `host` may go on: None
    (yes), a Refusal (no), or False (not enough bytes yet)."""
    hello = parse_client_hello(first)
    if hello.state is HelloState.INCOMPLETE:
        return False if len(first) <= MAX_HELLO + 4096 else Refusal(403, "no ClientHello")
    if hello.state is HelloState.INVALID:
        return Refusal(403, f"CONNECT {host}: {hello.why} (a host list tunnels TLS only)")
    if hello.state is HelloState.NO_NAME:
        return Refusal(403, f"CONNECT {host}: the TLS ClientHello names no server (SNI)")
    if hello.name != host:
        return Refusal(403, f"CONNECT {host}: the TLS ClientHello names {hello.name} (SNI)")
    return None


def _shown(text: str) -> str:
    """One log line's worth of `text`, printable ASCII only (host names come from the
    sandbox; a terminal escape in one must not reach the user's terminal)."""
    return "".join(c if " " <= c <= "~" else "?" for c in text)[:300]


def stderr_log(line: str) -> None:
    with contextlib.suppress(OSError):
        os.write(2, f"vinos-routine egress: refused: {_shown(line)}\n".encode("ascii"))


class ProxyServer:
    """Serves the holder's listener until `close()`."""

    def __init__(
        self,
        policy: EgressPolicy,
        listener: socket.socket,
        dialer: Dialer | None = None,
        log: Log = stderr_log,
        on_link: tuple[Network, ...] | None = None,
    ) -> None:
        self.policy = policy
        # The host's on-link prefixes, read once per shell call: a device on one is LAN.
        self.on_link = read_on_link() if on_link is None else on_link
        self._listener = listener
        self._dialer = dialer if dialer is not None else HostDialer()
        self._log = log
        self._lock = threading.Lock()
        self._open: set[socket.socket] = {listener}
        self._closed = False

    def serve(self) -> None:
        """Accept until the listener is closed."""
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed by close()
            if not self._track(conn):
                _answer(conn, Refusal(503, "too many connections at once"))
                conn.close()
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            live = list(self._open)
        for s in live:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def _track(self, s: socket.socket) -> bool:
        with self._lock:
            if self._closed or len(self._open) >= MAX_CONNECTIONS * 2:
                return False
            self._open.add(s)
            return True

    def _untrack(self, *socks: socket.socket) -> None:
        with self._lock:
            for s in socks:
                self._open.discard(s)
        for s in socks:
            s.close()

    def _serve(self, conn: socket.socket) -> None:
        upstream: socket.socket | None = None
        try:
            conn.settimeout(_HEAD_TIMEOUT_SEC)
            head, rest = _read_head(conn)
            target = parse_head(head, rest) if head is not None else Refusal(400, "no request")
            if isinstance(target, Refusal):
                return self._refuse(conn, target)
            plan = decide(target, self.policy, self._dialer.resolve, self.on_link)
            if isinstance(plan, Refusal):
                return self._refuse(conn, plan)
            first = target.first
            # With a host list, a tunnel carries only TLS for its own host (sni_refusal).
            sni_checked = target.tunnel and self.policy.hosts is not None
            if sni_checked:
                # A host list: the TLS ClientHello must name the CONNECT host before any
                # connection is made (the tunnel is open, so a refusal can only close it).
                conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                first, refused = _read_hello(conn, first, target.host)
                if refused is not None:
                    self._log(refused.reason)
                    return None
            upstream = next(
                filter(None, (self._dialer.connect(a, target.port) for a in plan)), None
            )
            if upstream is None:
                refusal = Refusal(502, f"cannot connect to {target.host}")
                if sni_checked:  # the tunnel is open: closing it is the answer
                    return self._log(refusal.reason)
                return self._refuse(conn, refusal)
            if not self._track(upstream):
                return None
            if target.tunnel and not sni_checked:
                conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            if first:
                upstream.sendall(first)
            conn.settimeout(None)
            upstream.settimeout(None)
            # A plain request: what is left of its body, then nothing more from the client
            # (a pipelined request would go unchecked; sandbox/egress.py _body_length).
            left = None
            if not target.tunnel and target.body != CHUNKED:
                left = target.body - (len(first) - first.index(b"\r\n\r\n") - 4)
            _relay(conn, upstream, left)
        except OSError:
            pass
        finally:
            self._untrack(conn, *((upstream,) if upstream is not None else ()))
        return None

    def _refuse(self, conn: socket.socket, refusal: Refusal) -> None:
        self._log(refusal.reason)
        _answer(conn, refusal)


def _read_head(conn: socket.socket) -> tuple[bytes | None, bytes]:
    buf = b""
    while b"\r\n\r\n" not in buf:
        if len(buf) > _HEAD_MAX:
            return None, b""
        chunk = conn.recv(4096)
        if not chunk:
            return None, b""
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    return head, rest


def _read_hello(conn: socket.socket, buf: bytes, host: str) -> tuple[bytes, Refusal | None]:
    while True:
        verdict = sni_refusal(buf, host)
        if verdict is not False:
            return buf, verdict if isinstance(verdict, Refusal) else None
        chunk = conn.recv(16384)
        if not chunk:
            return buf, Refusal(403, f"CONNECT {host}: closed before a TLS ClientHello")
        buf += chunk


_TEXT = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway", 503: "Service Unavailable"}


def _answer(conn: socket.socket, refusal: Refusal) -> None:
    body = f"vinos-routine egress proxy: {refusal.reason}\n".encode()
    head = (
        f"HTTP/1.1 {refusal.status} {_TEXT.get(refusal.status, 'Error')}\r\n"
        f"Content-Type: text/plain; charset=utf-8\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    with contextlib.suppress(OSError):
        conn.sendall(head.encode() + body)


def _relay(a: socket.socket, b: socket.socket, a_left: int | None = None) -> None:
    """Copy both ways until both sides have finished sending; from `a` (the client) at
    most `a_left` more bytes when given: what it sends past them is read and dropped (its
    end of sending still reaches `b`)."""
    peer = {a: b, b: a}
    open_reads = {a, b}
    with selectors.DefaultSelector() as sel:
        for s in open_reads:
            sel.register(s, selectors.EVENT_READ)
        while open_reads:
            for key, _ in sel.select():
                src = key.fileobj
                assert isinstance(src, socket.socket)
                try:
                    data = src.recv(_CHUNK)
                except OSError:
                    data = b""
                if data:
                    if src is a and a_left is not None:
                        data, a_left = data[:a_left], max(0, a_left - len(data))
                        if not data:
                            continue  # past the body: a second request, never sent on
                    try:
                        peer[src].sendall(data)
                        continue
                    except OSError:
                        return
                sel.unregister(src)
                open_reads.discard(src)
                with contextlib.suppress(OSError):
                    peer[src].shutdown(socket.SHUT_WR)


def main(argv: list[str]) -> None:
    """`egressd.py LISTENER_FD POLICY...`: serve until stdin reaches EOF, then exit 0."""
    try:
        listener = socket.socket(fileno=int(argv[0]))
        policy = policy_from_argv(argv[1:])
    except (IndexError, ValueError, OSError) as exc:
        sys.stderr.write(f"vinos-routine egress: cannot start: {exc}\n")
        os._exit(2)
    server = ProxyServer(policy, listener)
    threading.Thread(target=server.serve, name="vinos-egress", daemon=True).start()
    while True:  # the main thread: the call is over when the worker closes our stdin
        try:
            if not os.read(0, 512):
                break
        except InterruptedError:  # pragma: no cover - PEP 475 retries
            continue
        except OSError:
            break
    os._exit(0)  # not sys.exit: the daemon threads and their sockets end with the process
