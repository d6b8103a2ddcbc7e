"""The egress proxy: the only way out of a sandbox with `network = true` or a host list.

It runs in the worker, in the host's network namespace, for the length of one shell call.
The sandbox's network namespace holds only `lo`; the holder (sandbox/netholder.py) listens on
127.0.0.1:PROXY_PORT there and hands the listening socket over a socketpair to this proxy,
which accepts on it from the worker and speaks HTTP proxy: `CONNECT host:port` (HTTPS, any TLS or
TCP protocol) and absolute-form requests (`GET http://host/path`, plain HTTP).

What it lets through (`decide`, pure): with `network = true` any host; with a host list only
those names, exactly (no subdomains, no IP literals). Either way the names are resolved here
and an address on the loopback, link-local (cloud metadata), unspecified, multicast or
"this network" ranges is refused, so neither `localhost`, `127.0.0.1`, `[::1]` nor a name
that resolves to them reaches a host service.
"""

from __future__ import annotations

import contextlib
import ipaddress
import selectors
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "MAX_CONNECTIONS",
    "Dialer",
    "EgressProxy",
    "HostDialer",
    "Refusal",
    "Target",
    "address_allowed",
    "decide",
    "is_local",
    "parse_head",
]

MAX_CONNECTIONS = 32  # at once, per shell call
_HEAD_MAX = 16 * 1024
_HEAD_TIMEOUT_SEC = 30.0
_CONNECT_TIMEOUT_SEC = 10.0
_CHUNK = 65536

Resolver = Callable[[str, int], Sequence[str]]


class Dialer(Protocol):
    """Where the proxy's names are resolved and its connections made: the worker's own
    network (HostDialer). The seam lets a test stand a network namespace it made for the
    internet; what the proxy allows is decided before either method is called."""

    def resolve(self, host: str, port: int) -> Sequence[str]: ...

    def connect(self, address: str, port: int) -> socket.socket | None: ...


@dataclass(frozen=True, slots=True)
class Target:
    """Where one proxied connection goes, and what to send it first."""

    host: str  # lower case, no trailing dot; an IP literal without brackets
    port: int
    tunnel: bool  # CONNECT: answer 200 and relay; else forward `first` to the server
    first: bytes = b""  # the rewritten request head (plain HTTP), plus any body bytes read


@dataclass(frozen=True, slots=True)
class Refusal:
    status: int  # 400, 403, 405
    reason: str  # one line, shown to the command in the response body


def parse_head(head: bytes, rest: bytes = b"") -> Target | Refusal:
    """The target of one proxy request head (up to and without the blank line)."""
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes every byte
        return Refusal(400, "unreadable request")
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        return Refusal(400, "expected an HTTP/1.x proxy request")
    method, uri, version = parts
    if method == "CONNECT":
        hostport = _host_port(uri, None)
        if hostport is None:
            return Refusal(400, "CONNECT needs host:port")
        return Target(*hostport, tunnel=True, first=rest)
    if not uri.lower().startswith("http://"):
        return Refusal(400, "expected CONNECT host:port or an absolute http:// URL")
    after = uri[len("http://") :]
    authority, slash, path = after.partition("/")
    authority = authority.rpartition("@")[2]  # never forward userinfo as a host
    hostport = _host_port(authority, 80)
    if hostport is None:
        return Refusal(400, "bad host in the URL")
    kept = [
        line
        for line in lines[1:]
        if line and not line.lower().startswith(("proxy-connection:", "proxy-authorization:"))
    ]
    request = "\r\n".join([f"{method} /{path if slash else ''} {version}", *kept, "", ""])
    return Target(*hostport, tunnel=False, first=request.encode("latin-1") + rest)


def _host_port(text: str, default: int | None) -> tuple[str, int] | None:
    if text.startswith("["):
        host, _, tail = text[1:].partition("]")
        port_text = tail[1:] if tail.startswith(":") else ""
        if tail and not tail.startswith(":"):
            return None
    else:
        host, colon, port_text = text.rpartition(":")
        if not colon:
            host, port_text = text, ""
    if not port_text:
        if default is None:
            return None
        port = default
    elif port_text.isdigit() and 0 < int(port_text) < 65536:
        port = int(port_text)
    else:
        return None
    host = host.lower().rstrip(".")
    if not host or any(c in host for c in " \t/\\@%"):
        return None
    return host, port


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def host_allowed(host: str, hosts: tuple[str, ...] | None) -> Refusal | None:
    """None when policy lets `host` (a name or IP literal) through, else why not."""
    if hosts is None:
        return None
    if _is_ip(host):
        return Refusal(403, f"{host} is an address; this routine's network list names hosts")
    if host not in hosts:
        return Refusal(403, f"{host} is not in this routine's network list")
    return None


_NETS_REFUSED = tuple(
    ipaddress.ip_network(n)
    for n in ("0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "224.0.0.0/4", "255.255.255.255/32")
)


def address_allowed(address: str) -> bool:
    """Whether the proxy may connect to `address`: never the host's own loopback, never
    link-local (169.254.169.254 is a cloud's metadata service), multicast or unspecified."""
    ip = ipaddress.ip_address(address.split("%", maxsplit=1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        mapped = ip.ipv4_mapped or ip.sixtofour
        if mapped is not None:
            ip = mapped
    if isinstance(ip, ipaddress.IPv4Address):
        return not any(ip in net for net in _NETS_REFUSED)
    return not (ip.is_loopback or ip.is_link_local or ip.is_multicast or ip.is_unspecified)


def decide(
    target: Target, hosts: tuple[str, ...] | None, resolve: Resolver
) -> tuple[str, ...] | Refusal:
    """The addresses the proxy may try for `target`, in order, or why it refuses."""
    refused = host_allowed(target.host, hosts)
    if refused is not None:
        return refused
    try:
        addresses = resolve(target.host, target.port)
    except OSError:
        return Refusal(502, f"cannot resolve {target.host}")
    allowed = tuple(a for a in addresses if address_allowed(a))
    if not allowed:
        return Refusal(403, f"{target.host} resolves only to loopback or link-local addresses")
    return allowed


class HostDialer:
    """The worker's network namespace: getaddrinfo and connect, with a timeout.

    Never to an address of this machine (its LAN or VPN address, a bridge's gateway): a
    service of the user's listening on 0.0.0.0 answers there just as on 127.0.0.1. An address
    is this machine's when a socket can be bound to it; where the kernel lets any address be
    bound (net.ipv4.ip_nonlocal_bind = 1) every connection is refused, which fails closed.
    """

    def resolve(self, host: str, port: int) -> Sequence[str]:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        return list(dict.fromkeys(str(info[4][0]) for info in infos))

    def connect(self, address: str, port: int) -> socket.socket | None:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        if is_local(address, family):
            return None
        s = socket.socket(family, socket.SOCK_STREAM)
        s.settimeout(_CONNECT_TIMEOUT_SEC)
        try:
            s.connect((address, port))
        except OSError:
            s.close()
            return None
        return s


def is_local(address: str, family: int) -> bool:
    """Whether `address` belongs to this machine (in this network namespace)."""
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((address, 0))
        except OSError:
            return False
        return True


class EgressProxy:
    """One shell call's proxy. `start()` gives the fd to pass to the holder; `close()` ends
    every connection it holds. Threads: one accepting, one per connection."""

    def __init__(self, hosts: tuple[str, ...] | None, dialer: Dialer | None = None) -> None:
        self.hosts = hosts
        self._dialer = dialer if dialer is not None else HostDialer()
        self._ours, self._theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._closed = False
        self.refused: list[str] = []  # one line per refusal, for the tool result's note

    def start(self) -> int:
        """Start accepting handed-over sockets; returns the fd the holder must inherit."""
        threading.Thread(target=self._accept_loop, name="vinos-egress", daemon=True).start()
        return self._theirs.fileno()

    def handed_over(self) -> None:
        """The holder has its copy: drop ours, so its exit ends the accept loop."""
        self._theirs.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            live = list(self._open)
        for s in (*live, self._ours):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        with contextlib.suppress(OSError):
            self._theirs.close()

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

    def _accept_loop(self) -> None:
        try:
            _, fds, _, _ = socket.recv_fds(self._ours, 16, 1)
        except OSError:
            return
        if not fds:
            return  # the holder failed before it listened, or is gone
        listener = socket.socket(fileno=fds[0])
        if not self._track(listener):
            listener.close()
            return
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return  # closed by close(): the call is over
            if not self._track(conn):
                _answer(conn, Refusal(503, "too many connections at once"))
                conn.close()
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        upstream: socket.socket | None = None
        try:
            conn.settimeout(_HEAD_TIMEOUT_SEC)
            head, rest = _read_head(conn)
            target = parse_head(head, rest) if head is not None else Refusal(400, "no request")
            if isinstance(target, Refusal):
                return self._refuse(conn, target)
            plan = decide(target, self.hosts, self._dialer.resolve)
            if isinstance(plan, Refusal):
                return self._refuse(conn, plan)
            upstream = next(
                filter(None, (self._dialer.connect(a, target.port) for a in plan)), None
            )
            if upstream is None:
                return self._refuse(conn, Refusal(502, f"cannot connect to {target.host}"))
            if not self._track(upstream):
                return
            if target.tunnel:
                conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            if target.first:
                upstream.sendall(target.first)
            conn.settimeout(None)
            upstream.settimeout(None)
            _relay(conn, upstream)
        except OSError:
            pass
        finally:
            self._untrack(conn, *((upstream,) if upstream is not None else ()))

    def _refuse(self, conn: socket.socket, refusal: Refusal) -> None:
        with self._lock:
            if len(self.refused) < 20:
                self.refused.append(refusal.reason)
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


def _relay(a: socket.socket, b: socket.socket) -> None:
    """Copy both ways until both sides have finished sending."""
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
                    try:
                        peer[src].sendall(data)
                        continue
                    except OSError:
                        return
                sel.unregister(src)
                open_reads.discard(src)
                with contextlib.suppress(OSError):
                    peer[src].shutdown(socket.SHUT_WR)
