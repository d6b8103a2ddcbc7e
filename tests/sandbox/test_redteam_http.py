"""Red team, plain HTTP through a host list: the proxy checks the Host header it finds, so
its reading of the head must be the server's. Servers differ where HTTP/1.1 is lax: a bare
LF ends a line for nginx, Node and Go; a folded line continues the header above it; `Host :`
is a Host header to some. Each let a second Host header ride past the proxy's check, so a
head the proxy cannot read one way only is refused, before any connection."""

from __future__ import annotations

import socket
import threading

import pytest

from sandbox.egress import EgressPolicy, Entry, Refusal, parse_head
from sandbox.egressserver import ProxyServer

GOOD = b"GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n"


@pytest.mark.parametrize(
    "extra",
    [
        b"X: 1\nHost: evil.test\r\n",  # a bare LF: two headers to nginx, one to a CRLF split
        b"X: 1\rHost: evil.test\r\n",  # a bare CR
        b"X: 1\r\n Host: evil.test\r\n",  # obs-fold: a continuation line
        b"X: 1\r\n\tHost: evil.test\r\n",
        b"Host : evil.test\r\n",  # whitespace before the colon
        b"Host\t: evil.test\r\n",
        b"Ho\x00st: evil.test\r\n",  # not a token
        b"no colon at all\r\n",
    ],
)
def test_a_head_the_proxy_could_read_otherwise_than_the_server_is_refused(extra: bytes) -> None:
    head = (GOOD + extra).removesuffix(b"\r\n")
    got = parse_head(head)
    assert isinstance(got, Refusal) and got.status == 400, got


class _Dialer:
    """Resolves a.test to 192.0.2.1 (a public address, so `decide` lets it through) and
    connects every allowed address to a real local server: the test's stand-in for the
    internet (HostDialer itself never connects to this machine)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.connects = 0

    def resolve(self, host: str, port: int) -> list[str]:
        return ["192.0.2.1"]

    def connect(self, address: str, port: int) -> socket.socket:
        self.connects += 1
        return socket.create_connection(("127.0.0.1", self.port))


def test_through_the_real_proxy_the_smuggled_header_never_reaches_a_server() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    proxy_listener = socket.create_server(("127.0.0.1", 0))
    received: list[bytes] = []

    def serve() -> None:
        server.settimeout(10)
        try:
            conn, _ = server.accept()
        except OSError:
            return
        received.append(conn.recv(65536))
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        conn.close()

    threading.Thread(target=serve, daemon=True).start()
    dialer = _Dialer(server.getsockname()[1])
    proxy = ProxyServer(EgressPolicy((Entry("a.test", None),)), proxy_listener, dialer, log=print)
    threading.Thread(target=proxy.serve, daemon=True).start()
    try:
        for head, status in (
            (GOOD + b"X: 1\nHost: evil.test\r\n\r\n", b"400"),
            (GOOD + b"\r\n", b"200"),
        ):
            with socket.create_connection(proxy_listener.getsockname(), timeout=10) as c:
                c.sendall(head)
                answer = b""
                while chunk := c.recv(65536):
                    answer += chunk
            assert answer.split(b" ")[1] == status, answer
        # Only the clean request was sent on, and it carried one Host header.
        assert dialer.connects == 1
        assert len(received) == 1 and received[0].lower().count(b"host:") == 1
    finally:
        proxy.close()
        server.close()


@pytest.mark.parametrize(
    "head",
    [
        b"CONNECT a.test:\xb2 HTTP/1.1",  # latin-1 superscript two: str.isdigit() says yes
        b"GET http://a.test:\xb9/ HTTP/1.1\r\nHost: a.test",
        b"GET http://a.test/ HTTP/1.1\r\nHost: a.test:\xb3",
    ],
)
def test_a_port_of_digits_int_cannot_read_is_a_400_not_a_dead_thread(head: bytes) -> None:
    """The parser raised ValueError: the proxy's thread for that connection died with a
    traceback in the worker's log and the command got no answer."""
    got = parse_head(head)
    assert isinstance(got, Refusal) and got.status == 400, got


@pytest.mark.parametrize("host", ["a..b", "a" * 64 + ".test", "."])
def test_a_name_the_resolver_cannot_encode_is_a_502_not_a_dead_thread(host: str) -> None:
    """getaddrinfo raises UnicodeError (a ValueError, not an OSError) for an empty or
    over-long label; with network = true the proxy's thread died on it, unanswered."""
    from sandbox.egress import HostDialer, Target, decide

    got = decide(Target(host, 443, True), EgressPolicy(None), HostDialer().resolve)
    assert isinstance(got, Refusal) and got.status == 502, got
