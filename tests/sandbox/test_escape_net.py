"""Escape suite, network: with network = false nothing on the host is reachable, not a TCP
server on 127.0.0.1 nor an abstract Unix socket; with network = true the TCP server is."""

from __future__ import annotations

import secrets
import socket
import threading
from collections.abc import Iterator

import pytest
from sandbox_testkit import Box, python_in_sandbox


class Listener:
    """A real server in this process that counts the connections it accepts."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.accepted = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.sendall(b"hello from the host\n")
            conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def tcp() -> Iterator[tuple[Listener, int]]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    listener = Listener(sock)
    yield listener, sock.getsockname()[1]
    listener.close()


@pytest.fixture
def abstract() -> Iterator[tuple[Listener, str]]:
    name = "vinos-test-" + secrets.token_hex(6)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind("\0" + name)
    sock.listen(8)
    listener = Listener(sock)
    yield listener, name
    listener.close()


def test_a_host_tcp_server_is_unreachable_without_network(
    box: Box, tcp: tuple[Listener, int]
) -> None:
    listener, port = tcp
    r = box.run(f"exec 3<>/dev/tcp/127.0.0.1/{port} && head -n1 <&3")
    assert "hello from the host" not in r.stdout
    assert "Connection refused" in r.stderr
    assert listener.accepted == 0


def test_the_same_tcp_server_is_reachable_with_network(box: Box, tcp: tuple[Listener, int]) -> None:
    listener, port = tcp
    r = box.run(f"exec 3<>/dev/tcp/127.0.0.1/{port} && head -n1 <&3", network=True)
    assert r.stdout == "hello from the host\n", r.stderr
    assert listener.accepted == 1


def test_a_host_abstract_socket_is_unreachable_without_network(
    box: Box, abstract: tuple[Listener, str]
) -> None:
    listener, name = abstract
    code = f"""
import socket
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect("\\0{name}")
    print("CONNECTED", s.recv(100))
except OSError as exc:
    print("refused", exc.errno)
"""
    r = box.run(python_in_sandbox(code))
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith("refused"), r.stdout
    assert listener.accepted == 0
    # Control: the same client on the host does reach it.
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect("\0" + name)
    assert s.recv(100) == b"hello from the host\n"
    s.close()


def test_without_network_only_loopback_exists(box: Box) -> None:
    r = box.run("tail -n +3 /proc/net/dev | cut -d: -f1")
    assert r.stdout.split() == ["lo"]
