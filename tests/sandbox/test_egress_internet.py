"""network = true reaches the internet (ports 80 and 443), and a host list only its hosts,
through the egress proxy; neither reaches a service of the host's loopback, and network =
true reaches no LAN address in any of its forms.

The host and its network are namespaces this test makes (tests/sandbox/internet_ns.py): the
"host" namespace, where the egress proxy runs (started under nsenter, the runner's
`proxy_prefix`), with a decoy on its 127.0.0.1 and a test /etc/hosts; and behind a veth link
a "net" namespace with an internet address (192.0.2.10) and LAN ones (10.0.0.5,
192.168.1.5, 100.64.0.5, fd00::5, and 64:ff9b::a00:5 standing for a NAT64 translator). The
sandbox, its holder namespace and the proxy process are the real ones, run as this user; no
packet leaves this machine's namespaces.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sandbox import run_shell
from tests.sandbox.sandbox_testkit import Box, python_in_sandbox

pytestmark = pytest.mark.slow  # namespaces per test: make test-fast leaves these out

HERE = Path(__file__).resolve().parent

SETUP = """set -e
ip link set lo up
mount --bind "$1" /etc/hosts
shift
exec "$@"
"""

HOSTS = """127.0.0.1 localhost
192.0.2.10 allowed.test blocked.test alt.test
10.0.0.5 lan.test
fd00::5 v6lan.test
2001:db8:5::5 v6dev.test
203.0.113.5 v4dev.test
127.0.0.1 sneaky.test
"""


@dataclass
class Internet:
    prefix: tuple[str, ...]  # runs the proxy in the "host" namespace
    hits_file: Path

    def hits(self) -> list[str]:
        if not self.hits_file.exists():
            return []
        return self.hits_file.read_text().splitlines()


@pytest.fixture
def internet(tmp_path: Path, not_root: None) -> Iterator[Internet]:
    for tool in ("ip", "curl", "unshare", "nsenter"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is needed: run scripts/system-deps.sh as root")
    hosts = tmp_path / "hosts"
    hosts.write_text(HOSTS)
    hits = tmp_path / "hits"
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    proc = subprocess.Popen(
        [
            "unshare", "--user", "--map-root-user", "--net", "--mount",
            "sh", "-c", SETUP, "setup", str(hosts), sys.executable,
            str(HERE / "internet_ns.py"), str(theirs.fileno()), str(hits),
        ],
        pass_fds=[theirs.fileno()],
    )  # fmt: skip
    theirs.close()
    ours.settimeout(60)
    try:
        assert ours.recv(100) == b"ready\n", "the test namespaces did not start"
        prefix = ("nsenter", f"--target={proc.pid}", "--user", "--net", "--mount",
                  "--preserve-credentials")  # fmt: skip
        yield Internet(prefix, hits)
    finally:
        ours.close()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run(box: Box, command: str, internet: Internet, **policy: object) -> str:
    shell_policy = box.policy(**policy)  # type: ignore[arg-type]
    r = run_shell(command, shell_policy, timeout_sec=120, proxy_prefix=internet.prefix)
    assert r.error is None, r.error
    return r.stdout + r.stderr


def curl(*urls: str, flags: str = "") -> str:
    return "; ".join(f"curl -sS -m 20 {flags} '{u}'".replace("  ", " ") for u in urls)


def test_network_true_reaches_the_internet_on_ports_80_and_443_only(
    box: Box, internet: Internet
) -> None:
    out = run(
        box,
        curl("http://192.0.2.10/plain")
        + "; "
        + curl("http://allowed.test/tunnel", flags="-p")
        + "; "
        + curl("http://192.0.2.10:8080/port", "http://127.0.0.1/", "http://sneaky.test/")
        + "; exec 3<>/dev/tcp/192.0.2.10/80",
        internet,
        network=True,
    )
    # Plain HTTP is forwarded in origin form; CONNECT is a tunnel (what HTTPS uses).
    assert "hello from 192.0.2.10:80 GET /plain HTTP/1.1" in out
    assert "hello from 192.0.2.10:80 GET /tunnel HTTP/1.1" in out
    assert "port 8080: network = true reaches ports 80 and 443 only" in out
    assert "127.0.0.1 resolves only to loopback" in out
    assert "sneaky.test resolves only to loopback" in out
    # Without the proxy there is no route: the namespace holds only lo.
    assert "Network is unreachable" in out
    assert internet.hits() == [
        "net 192.0.2.10 80 GET /plain HTTP/1.1",
        "net 192.0.2.10 80 GET /tunnel HTTP/1.1",
    ]


LAN_URLS = (
    "http://10.0.0.5/",
    "http://192.168.1.5/",
    "http://100.64.0.5/",
    "http://[fd00::5]/",
    "http://[::ffff:10.0.0.5]/",
    "http://[64:ff9b::a00:5]/",
    "http://lan.test/",
    "http://v6lan.test/",
)


def test_network_true_reaches_no_lan_address_in_any_form(box: Box, internet: Internet) -> None:
    out = run(box, curl(*LAN_URLS) + "; " + curl("https://lan.test/"), internet, network=True)
    assert out.count("resolves to a LAN address") == len(LAN_URLS), out
    assert "lan.test resolves to a LAN address (10.0.0.5)" in out
    assert "v6lan.test resolves to a LAN address (fd00::5)" in out
    assert "CONNECT tunnel failed, response 403" in out  # the https:// one
    assert internet.hits() == []


ON_LINK_URLS = (
    "http://[2001:db8:5::5]/",
    "http://v6dev.test/",
    "http://203.0.113.5/",
    "http://v4dev.test/",
)


def test_network_true_reaches_no_on_link_device(box: Box, internet: Internet) -> None:
    # The chain: an IPv6 LAN gives its devices global addresses (the ISP's prefix), which
    # the proxy classed as the internet; a network = true routine reached a LAN printer by
    # name and by literal address. The host's routes say the prefix is on its link.
    out = run(box, curl(*ON_LINK_URLS), internet, network=True)
    assert out.count("resolves to a LAN address") == len(ON_LINK_URLS), out
    assert "v6dev.test resolves to a LAN address (2001:db8:5::5)" in out
    assert "v4dev.test resolves to a LAN address (203.0.113.5)" in out
    assert internet.hits() == []
    # The opt-in reaches it, as any LAN address.
    out = run(box, curl("http://v6dev.test/a"), internet, network=True, lan=True)
    assert "hello from 2001:db8:5::5:80 GET /a HTTP/1.1" in out


def test_config_lan_opts_network_true_in_to_the_lan(box: Box, internet: Internet) -> None:
    out = run(
        box,
        curl("http://10.0.0.5/a", "http://[fd00::5]/b", "http://127.0.0.1/c"),
        internet,
        network=True,
        lan=True,
    )
    assert "hello from 10.0.0.5:80 GET /a HTTP/1.1" in out
    assert "hello from fd00::5:80 GET /b HTTP/1.1" in out
    assert "127.0.0.1 resolves only to loopback" in out  # the host itself: never
    assert internet.hits() == ["net 10.0.0.5 80 GET /a HTTP/1.1", "net fd00::5 80 GET /b HTTP/1.1"]


def test_a_host_list_lets_its_hosts_and_ports_through_and_no_other(
    box: Box, internet: Internet
) -> None:
    out = run(
        box,
        curl(
            "http://allowed.test/listed",
            "http://blocked.test/unlisted",
            "http://192.0.2.10/by-address",
            "http://sneaky.test/listed-but-loopback",
            "http://lan.test/named-lan-host",
            "http://allowed.test:8080/unlisted-port",
            "http://alt.test:8080/listed-port",
            "http://alt.test/port-80-not-listed",
        ),
        internet,
        network=("allowed.test", "sneaky.test", "lan.test", "alt.test:8080"),
    )
    assert "hello from 192.0.2.10:80 GET /listed HTTP/1.1" in out
    assert "blocked.test is not in this routine's network list" in out
    assert "192.0.2.10 is an address; this routine's network list names hosts" in out
    assert "sneaky.test resolves only to loopback" in out
    assert "hello from 10.0.0.5:80 GET /named-lan-host HTTP/1.1" in out
    assert "allowed.test:8080 is not in this routine's network list" in out
    assert "hello from 192.0.2.10:8080 GET /listed-port HTTP/1.1" in out
    assert "alt.test:80 is not in this routine's network list" in out
    assert internet.hits() == [
        "net 192.0.2.10 80 GET /listed HTTP/1.1",
        "net 10.0.0.5 80 GET /named-lan-host HTTP/1.1",
        "net 192.0.2.10 8080 GET /listed-port HTTP/1.1",
    ]


def test_a_host_list_refuses_a_host_header_for_another_host(box: Box, internet: Internet) -> None:
    out = run(
        box,
        curl("http://allowed.test/fronted", flags="-H 'Host: blocked.test'"),
        internet,
        network=("allowed.test",),
    )
    assert "Host header blocked.test:80 is not the request's target allowed.test" in out
    assert internet.hits() == []


SNI_CLIENT = """
import socket, ssl
for name in ("allowed.test", "blocked.test", None):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=30)
    s.sendall(b"CONNECT allowed.test:443 HTTP/1.1\\r\\nHost: allowed.test:443\\r\\n\\r\\n")
    head = b""
    while b"\\r\\n\\r\\n" not in head:
        head += s.recv(1)
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        context.wrap_socket(s, server_hostname=name)
        print(name, "handshake done")
    except (OSError, ssl.SSLError) as exc:
        print(name, head.split(b"\\r\\n")[0].decode(), "then", type(exc).__name__)
"""


def test_a_host_list_tunnel_carries_only_tls_for_the_connect_host(
    box: Box, internet: Internet, capfd: pytest.CaptureFixture[str]
) -> None:
    out = run(box, python_in_sandbox(SNI_CLIENT), internet, network=("allowed.test",))
    # Every CONNECT is answered 200 (the ClientHello comes only after it); the net side
    # sees only the ClientHello that names allowed.test.
    assert out.count("HTTP/1.1 200 Connection established then") == 3, out
    assert internet.hits() == ["net 192.0.2.10 443 tls allowed.test"]
    log = capfd.readouterr().err
    assert (
        "vinos-routine egress: refused: CONNECT allowed.test: "
        "the TLS ClientHello names blocked.test (SNI)" in log
    )
    assert "CONNECT allowed.test: the TLS ClientHello names no server (SNI)" in log
