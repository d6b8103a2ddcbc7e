"""The egress proxy's decisions, pure: what a request asks for, and whether it may go there."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from sandbox_testkit import REPO

from sandbox.egress import Refusal, Target, address_allowed, decide, parse_head


def test_connect_is_a_tunnel_to_host_and_port() -> None:
    head = b"CONNECT API.GitHub.com.:443 HTTP/1.1\r\nHost: api.github.com:443"
    assert parse_head(head, b"early") == Target("api.github.com", 443, True, b"early")
    assert parse_head(b"CONNECT [2001:db8::1]:443 HTTP/1.1") == Target("2001:db8::1", 443, True)


def test_plain_http_is_rewritten_to_origin_form_without_proxy_headers() -> None:
    head = (
        b"GET http://user:pw@example.org:8080/a?b=1 HTTP/1.1\r\nHost: example.org:8080\r\n"
        b"Proxy-Connection: keep-alive\r\nProxy-Authorization: Basic eA==\r\nAccept: */*"
    )
    target = parse_head(head, b"")
    assert target == Target(
        "example.org",
        8080,
        False,
        b"GET /a?b=1 HTTP/1.1\r\nHost: example.org:8080\r\nAccept: */*\r\n\r\n",
    )
    assert parse_head(b"GET http://example.org HTTP/1.0") == Target(
        "example.org", 80, False, b"GET / HTTP/1.0\r\n\r\n"
    )


@pytest.mark.parametrize(
    "head",
    [
        b"CONNECT example.org HTTP/1.1",  # no port
        b"CONNECT example.org:99999 HTTP/1.1",
        b"GET /relative HTTP/1.1",
        b"GET https://example.org/ HTTP/1.1",
        b"GET http://exa mple.org/ HTTP/1.1",
        b"SSH-2.0-OpenSSH_9.2",
    ],
)
def test_what_is_not_a_proxy_request_is_a_400(head: bytes) -> None:
    refusal = parse_head(head)
    assert isinstance(refusal, Refusal) and refusal.status == 400


@pytest.mark.parametrize(
    ("address", "allowed"),
    [
        ("93.184.216.34", True),
        ("192.0.2.10", True),
        ("10.1.2.3", True),  # another machine of the LAN: allowed (README, Security)
        ("2606:2800:220:1::1", True),
        ("127.0.0.1", False),
        ("127.8.9.10", False),
        ("0.0.0.0", False),
        ("0.1.2.3", False),
        ("169.254.169.254", False),  # a cloud's metadata service
        ("224.0.0.1", False),
        ("255.255.255.255", False),
        ("::1", False),
        ("::", False),
        ("fe80::1%eth0", False),
        ("::ffff:127.0.0.1", False),  # IPv4-mapped loopback
        ("2002:7f00:1::1", False),  # 6to4 of 127.0.0.1
        ("ff02::1", False),
    ],
)
def test_addresses_the_proxy_refuses(address: str, allowed: bool) -> None:
    assert address_allowed(address) is allowed


class Names:
    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = table
        self.asked: list[str] = []

    def __call__(self, host: str, port: int) -> Sequence[str]:
        self.asked.append(host)
        if host not in self.table:
            raise OSError("no such host")
        return self.table[host]


def test_any_host_with_network_true_but_never_to_loopback() -> None:
    names = Names({"example.org": ["127.0.0.1", "93.184.216.34"], "evil.test": ["127.0.0.1"]})
    assert decide(Target("example.org", 443, True), None, names) == ("93.184.216.34",)
    refused = decide(Target("evil.test", 443, True), None, names)
    assert refused == Refusal(403, "evil.test resolves only to loopback or link-local addresses")
    assert decide(Target("nowhere.test", 443, True), None, names) == Refusal(
        502, "cannot resolve nowhere.test"
    )


def test_a_host_list_allows_exactly_its_names_and_asks_no_resolver_for_others() -> None:
    names = Names({"api.github.com": ["140.82.112.6"], "gist.github.com": ["140.82.112.4"]})
    hosts = ("api.github.com",)
    assert decide(Target("api.github.com", 443, True), hosts, names) == ("140.82.112.6",)
    for host in ("gist.github.com", "github.com", "x.api.github.com"):
        got = decide(Target(host, 443, True), hosts, names)
        assert got == Refusal(403, f"{host} is not in this routine's network list")
    got = decide(Target("140.82.112.6", 443, True), hosts, names)
    assert got == Refusal(
        403, "140.82.112.6 is an address; this routine's network list names hosts"
    )
    assert names.asked == ["api.github.com"]


LOCAL_DIALER = """
import socket, sys
sys.path.insert(0, sys.argv[1])
from sandbox.egress import HostDialer
server = socket.socket()
server.bind(("192.0.2.10", 0))
server.listen(4)
port = server.getsockname()[1]
dialer = HostDialer()
print("local", dialer.connect("192.0.2.10", port))
"""


def test_the_host_dialer_never_connects_to_an_address_of_this_machine(
    tmp_path: Path, not_root: None
) -> None:
    """A user service on 0.0.0.0 answers on the machine's LAN address as on 127.0.0.1: in a
    namespace this test makes, 192.0.2.10 is such an address, with a listener on it."""
    script = tmp_path / "local.py"
    script.write_text(LOCAL_DIALER)
    setup = 'ip link set lo up && ip addr add 192.0.2.10/32 dev lo && exec "$@"'
    done = subprocess.run(
        ["unshare", "--user", "--map-current-user", "--net", "--keep-caps",
         "sh", "-c", setup, "sh", sys.executable, str(script), str(REPO)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.stdout == "local None\n", done.stderr
