"""Red team, plain HTTP through a host list: the proxy checks the Host header it finds, so
its reading of the head must be the server's. Servers differ where HTTP/1.1 is lax: a bare
LF ends a line for nginx, Node and Go; a folded line continues the header above it; `Host :`
is a Host header to some. Each let a second Host header ride past the proxy's check, so a
head the proxy cannot read one way only is refused, before any connection."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

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


def _recording_server() -> tuple[socket.socket, list[bytes]]:
    """A server that records every byte it is sent until the sender is quiet for 2 s, then
    answers (a raw socket, not an HTTP library: it sees what a lax server would read)."""
    server = socket.create_server(("127.0.0.1", 0))
    got: list[bytes] = []

    def serve() -> None:
        server.settimeout(10)
        try:
            conn, _ = server.accept()
        except OSError:
            return
        conn.settimeout(2)
        data = b""
        try:
            while chunk := conn.recv(65536):  # until 2 s pass with nothing more
                data += chunk
        except OSError:
            pass
        got.append(data)
        with contextlib.suppress(OSError):
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return server, got


@pytest.mark.parametrize("split", [False, True])
def test_a_pipelined_second_request_never_reaches_the_server(split: bool) -> None:
    """One request per connection: the proxy tells the server `Connection: close`, but then
    relayed whatever followed; a server that ignored the header read a second request whose
    Host was never checked. Now only the first request's body (Content-Length) goes on."""
    server, got = _recording_server()
    proxy_listener = socket.create_server(("127.0.0.1", 0))
    proxy = ProxyServer(
        EgressPolicy((Entry("a.test", None),)),
        proxy_listener,
        _Dialer(server.getsockname()[1]),
        log=print,
    )
    threading.Thread(target=proxy.serve, daemon=True).start()
    first = b"POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: 5\r\n\r\nhello"
    second = b"GET /admin HTTP/1.1\r\nHost: evil.test\r\n\r\n"
    try:
        with socket.create_connection(proxy_listener.getsockname(), timeout=10) as c:
            if split:  # the second request after the first has gone on
                c.sendall(first)
                time.sleep(0.2)
                c.sendall(second)
            else:
                c.sendall(first + second)
            answer = b""
            while chunk := c.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 200"), answer
        [received] = got
        assert received.endswith(b"\r\n\r\nhello"), received
        assert b"evil.test" not in received
    finally:
        proxy.close()
        server.close()


def test_a_chunked_body_through_a_host_list_is_refused() -> None:
    """Its end cannot be found without parsing the chunks, and what follows it would be a
    second request: with a host list, a plain request states its Content-Length."""
    from sandbox.egress import Target, decide

    head = b"POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked"
    target = parse_head(head)
    assert isinstance(target, Target)
    refused = decide(target, EgressPolicy((Entry("a.test", None),)), lambda h, p: ["192.0.2.1"])
    assert isinstance(refused, Refusal) and refused.status == 400
    both = head + b"\r\nContent-Length: 5"
    assert isinstance(parse_head(both), Refusal)
    two = b"POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: 5\r\nContent-Length: 6"
    assert isinstance(parse_head(two), Refusal)
