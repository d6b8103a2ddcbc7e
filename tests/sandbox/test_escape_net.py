"""Escape suite, network: with the network off or on (through the egress proxy), nothing of
the host is reachable: not a TCP server on its 127.0.0.1, not an abstract Unix socket, not an
ssh-agent's pathname socket under $HOME. That the network, when on, does reach a server
standing for the internet is tests/sandbox/test_egress_internet.py's."""

from __future__ import annotations

import secrets
import socket
import threading
from collections.abc import Iterator

import pytest

from tests.sandbox.sandbox_testkit import Box, python_in_sandbox


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


def test_a_host_tcp_server_is_unreachable_with_network(box: Box, tcp: tuple[Listener, int]) -> None:
    """network = true is a namespace of its own: 127.0.0.1 is the sandbox's, and the egress
    proxy refuses loopback by address and by name (a name resolving to loopback as well), on
    80 and 443; on any other port it refuses the port first."""
    listener, port = tcp
    r = box.run(
        f"exec 3<>/dev/tcp/127.0.0.1/{port} && head -n1 <&3; "
        f"curl -sS -m 10 http://127.0.0.1:{port}/; "
        f"curl -sS -m 10 -p http://localhost:{port}/; "
        f"curl -sS -m 10 -p http://[::1]:{port}/; "
        f"curl -sS -m 10 http://0.0.0.0:{port}/; "
        "curl -sS -m 10 http://127.0.0.1/; curl -sS -m 10 -p http://localhost:443/; "
        "curl -sS -m 10 http://0.0.0.0/",
        network=True,
    )
    assert "hello from the host" not in r.stdout + r.stderr, r.stderr
    assert "Connection refused" in r.stderr, r.stderr
    assert r.stdout.count(f"port {port}: network = true reaches ports 80 and 443 only") == 2
    # localhost and [::1] through a CONNECT tunnel: curl shows only the status.
    assert r.stderr.count("CONNECT tunnel failed, response 403") == 3, r.stderr
    assert "127.0.0.1 resolves only to loopback" in r.stdout
    assert "0.0.0.0 resolves only to loopback" in r.stdout
    assert listener.accepted == 0


def _unix_client(address: str) -> str:
    """Python run in the sandbox: connect to the Unix socket `address` ("\\0name" for an
    abstract one) and print "CONNECTED" and what it sent, or "refused" and the errno."""
    return f"""
import socket
try:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # refused by seccomp first
    s.connect({address!r})
    print("CONNECTED", s.recv(100))
except OSError as exc:
    print("refused", exc.errno)
"""


@pytest.mark.parametrize("network", [False, True], ids=["network-off", "network-on"])
def test_a_host_abstract_socket_is_unreachable(
    box: Box, abstract: tuple[Listener, str], network: bool
) -> None:
    """X11's and D-Bus's abstract sockets belong to the network namespace: a fresh one each."""
    listener, name = abstract
    r = box.run(python_in_sandbox(_unix_client("\0" + name)), network=network)
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith("refused"), r.stdout
    assert listener.accepted == 0
    # Control: the same client on the host does reach it.
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect("\0" + name)
    assert s.recv(100) == b"hello from the host\n"
    s.close()


@pytest.mark.parametrize("network", [False, True], ids=["network-off", "network-on"])
def test_a_host_ssh_agent_socket_under_home_is_unreachable(box: Box, network: bool) -> None:
    """A pathname socket is reached through the filesystem, not the network namespace: what
    keeps it out is that the sandbox cannot see it (read-only is not enough for connect)."""
    (box.home / ".1password").mkdir()
    path = box.home / ".1password" / "agent.sock"  # where 1Password's ssh-agent listens
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.listen(8)
    listener = Listener(sock)
    try:
        r = box.run(python_in_sandbox(_unix_client(str(path))), network=network)
        assert r.exit_code == 0, r.stderr
        assert r.stdout.startswith("refused"), r.stdout
        assert listener.accepted == 0
        control = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        control.connect(str(path))
        assert control.recv(100) == b"hello from the host\n"
        control.close()
    finally:
        listener.close()


@pytest.mark.parametrize("network", [False, True], ids=["network-off", "network-on"])
def test_only_loopback_exists(box: Box, network: bool) -> None:
    r = box.run("tail -n +3 /proc/net/dev | cut -d: -f1; ip route", network=network)
    assert r.stdout.split() == ["lo"], r.stdout


def test_without_network_there_is_no_proxy(box: Box) -> None:
    r = box.run("env | grep -i proxy; exec 3<>/dev/tcp/127.0.0.1/3128", network=False)
    assert r.stdout == ""
    assert "Connection refused" in r.stderr
