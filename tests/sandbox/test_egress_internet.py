"""network = true reaches the internet, and a host list only its hosts, through the egress
proxy; neither reaches a 127.0.0.1 service.

The internet here is a user+network namespace this test makes (tests/sandbox/internet_ns.py):
192.0.2.10 (TEST-NET-1) with an HTTP server, a decoy on that namespace's 127.0.0.1, and an
/etc/hosts naming allowed.test, blocked.test and sneaky.test (-> 127.0.0.1). The sandbox, its
holder namespace, the forwarder and the proxy are the real ones, run as this user; only the
proxy's last step, resolving a name and opening the socket, happens in that namespace, through
the Dialer seam (the workplace lets no test reach a real internet address).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from sandbox_testkit import Box

pytestmark = pytest.mark.slow  # a network namespace per test: make test-fast leaves these out

HERE = Path(__file__).resolve().parent

SETUP = """set -e
ip link set lo up
ip addr add 192.0.2.10/32 dev lo
mount --bind "$1" /etc/hosts
exec "$2" "$3" "$4"
"""


class NamespaceDialer:
    """The egress proxy's Dialer, answered by internet_ns.py inside its namespace."""

    def __init__(self, channel: socket.socket) -> None:
        self.channel = channel
        self.lock = threading.Lock()

    def _ask(self, line: str) -> tuple[str, list[int]]:
        with self.lock:
            self.channel.sendall(line.encode())
            msg, fds, _, _ = socket.recv_fds(self.channel, 4096, 1)
        return msg.decode(), fds

    def resolve(self, host: str, port: int) -> Sequence[str]:
        answer, _ = self._ask(f"resolve {host} {port}")
        if not answer.startswith("ok"):
            raise OSError(answer)
        return answer.split()[1:]

    def connect(self, address: str, port: int) -> socket.socket | None:
        _answer, fds = self._ask(f"connect {address} {port}")
        if not fds:
            return None
        return socket.socket(fileno=fds[0])

    def hits(self) -> tuple[int, int]:
        answer, _ = self._ask("stats")
        internet, decoy = answer.split()[1:]
        return int(internet), int(decoy)


@pytest.fixture
def internet(tmp_path: Path, not_root: None) -> Iterator[NamespaceDialer]:
    if shutil.which("ip") is None or shutil.which("curl") is None:
        pytest.fail("iproute2 and curl are needed: run scripts/system-deps.sh as root")
    hosts = tmp_path / "hosts"
    hosts.write_text(
        "127.0.0.1 localhost\n192.0.2.10 allowed.test blocked.test\n127.0.0.1 sneaky.test\n"
    )
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    proc = subprocess.Popen(
        [
            "unshare", "--user", "--map-root-user", "--net", "--mount",
            "sh", "-c", SETUP, "setup", str(hosts), sys.executable,
            str(HERE / "internet_ns.py"), str(theirs.fileno()),
        ],
        pass_fds=[theirs.fileno()],
    )  # fmt: skip
    theirs.close()
    ours.settimeout(30)
    try:
        assert ours.recv(100) == b"ready\n", "the internet namespace did not start"
        ours.settimeout(60)
        yield NamespaceDialer(ours)
    finally:
        ours.close()
        proc.kill()
        proc.wait()


def run(box: Box, command: str, network: object, dialer: NamespaceDialer) -> tuple[str, str]:
    from sandbox import run_shell

    r = run_shell(command, box.policy(network=network), timeout_sec=60, dialer=dialer)  # type: ignore[arg-type]
    assert r.error is None, r.error
    return r.stdout, r.stderr


def test_network_true_reaches_the_internet_but_not_its_loopback(
    box: Box, internet: NamespaceDialer
) -> None:
    out, err = run(
        box,
        "curl -sS -m 20 http://192.0.2.10:8080/plain; "
        "curl -sS -m 20 -p http://allowed.test:8080/tunnel; "
        "curl -sS -m 20 http://127.0.0.1:8081/; curl -sS -m 20 http://sneaky.test:8081/; "
        "exec 3<>/dev/tcp/192.0.2.10/8080",
        True,
        internet,
    )
    # Plain HTTP is forwarded in origin form; CONNECT is a tunnel (what HTTPS uses).
    assert "hello from the internet GET /plain HTTP/1.1" in out, err
    assert "hello from the internet GET /tunnel HTTP/1.1" in out, err
    assert "127.0.0.1 resolves only to loopback" in out
    assert "sneaky.test resolves only to loopback" in out
    # Without the proxy there is no route: the namespace holds only lo.
    assert "Network is unreachable" in err
    assert "DECOY" not in out
    assert internet.hits() == (2, 0)


def test_a_host_list_lets_its_hosts_through_and_no_other(
    box: Box, internet: NamespaceDialer
) -> None:
    out, err = run(
        box,
        "curl -sS -m 20 http://allowed.test:8080/listed; "
        "curl -sS -m 20 http://blocked.test:8080/unlisted; "
        "curl -sS -m 20 http://192.0.2.10:8080/by-address; "
        "curl -sS -m 20 http://sneaky.test:8081/listed-but-loopback",
        ("allowed.test", "sneaky.test"),
        internet,
    )
    assert "hello from the internet GET /listed HTTP/1.1" in out, err
    assert "blocked.test is not in this routine's network list" in out
    assert "192.0.2.10 is an address; this routine's network list names hosts" in out
    assert "sneaky.test resolves only to loopback" in out
    assert internet.hits() == (1, 0)
