"""The egress proxy's decisions, pure: what a request asks for, and whether it may go there."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from sandbox.egress import (
    AddressKind,
    EgressPolicy,
    Entry,
    Refusal,
    Target,
    address_allowed,
    address_kind,
    decide,
    egress_policy,
    parse_entry,
    parse_head,
    policy_argv,
    policy_from_argv,
)
from tests.sandbox.sandbox_testkit import REPO


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
        b"GET /a?b=1 HTTP/1.1\r\nHost: example.org:8080\r\nAccept: */*\r\n"
        b"Connection: close\r\n\r\n",
        host_header=("example.org", 8080),
    )
    assert parse_head(b"GET http://example.org HTTP/1.0") == Target(
        "example.org", 80, False, b"GET / HTTP/1.0\r\nConnection: close\r\n\r\n"
    )
    # One request per connection, whatever the client asked: a second one on the same
    # connection would not have had its Host header checked.
    keep = parse_head(b"GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nConnection: keep-alive")
    assert isinstance(keep, Target)
    assert keep.first == b"GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n"


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
    ("address", "kind"),
    [
        ("93.184.216.34", AddressKind.PUBLIC),
        ("192.0.2.10", AddressKind.PUBLIC),
        ("2606:2800:220:1::1", AddressKind.PUBLIC),
        ("64:ff9b::5db8:d822", AddressKind.PUBLIC),  # NAT64 of 93.184.216.34
        ("::ffff:93.184.216.34", AddressKind.PUBLIC),
        # The LAN: RFC 1918, CGNAT, ULA, and their IPv6 forms.
        ("10.1.2.3", AddressKind.LAN),
        ("172.16.0.1", AddressKind.LAN),
        ("172.31.255.254", AddressKind.LAN),
        ("192.168.1.5", AddressKind.LAN),
        ("100.64.0.5", AddressKind.LAN),
        ("100.127.255.254", AddressKind.LAN),
        ("fd00::5", AddressKind.LAN),
        ("fc00::1", AddressKind.LAN),
        ("fec0::1", AddressKind.LAN),
        ("::ffff:10.0.0.1", AddressKind.LAN),  # IPv4-mapped
        ("::10.0.0.1", AddressKind.LAN),  # IPv4-compatible
        ("::ffff:0:10.0.0.1", AddressKind.LAN),  # SIIT
        ("64:ff9b::a00:1", AddressKind.LAN),  # NAT64 of 10.0.0.1
        ("64:ff9b::c0a8:105", AddressKind.LAN),  # NAT64 of 192.168.1.5
        ("64:ff9b:1::5db8:d822", AddressKind.LAN),  # local-use NAT64: a local translator
        ("64:ff9b:1:5db8:d8:2200::", AddressKind.LAN),  # the same in its /48 form
        ("2002:a00:1::1", AddressKind.LAN),  # 6to4 of 10.0.0.1
        # Never: this machine, link-local (cloud metadata), multicast, reserved.
        ("127.0.0.1", AddressKind.LOCAL),
        ("127.8.9.10", AddressKind.LOCAL),
        ("0.0.0.0", AddressKind.LOCAL),
        ("0.1.2.3", AddressKind.LOCAL),
        ("169.254.169.254", AddressKind.LOCAL),
        ("224.0.0.1", AddressKind.LOCAL),
        ("240.0.0.1", AddressKind.LOCAL),
        ("255.255.255.255", AddressKind.LOCAL),
        ("::1", AddressKind.LOCAL),
        ("::", AddressKind.LOCAL),
        ("fe80::1%eth0", AddressKind.LOCAL),
        ("ff02::1", AddressKind.LOCAL),
        ("::ffff:127.0.0.1", AddressKind.LOCAL),
        ("::127.0.0.1", AddressKind.LOCAL),
        ("::ffff:169.254.169.254", AddressKind.LOCAL),
        ("64:ff9b::7f00:1", AddressKind.LOCAL),  # NAT64 of 127.0.0.1
        ("64:ff9b::a9fe:a9fe", AddressKind.LOCAL),  # NAT64 of 169.254.169.254
        ("64:ff9b:1:7f00:0:100::", AddressKind.LOCAL),  # local NAT64 /48 of 127.0.0.1
        ("2002:7f00:1::1", AddressKind.LOCAL),  # 6to4 of 127.0.0.1
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", AddressKind.LOCAL),  # Teredo of 127.0.0.1
    ],
)
def test_where_an_address_is(address: str, kind: AddressKind) -> None:
    assert address_kind(address) is kind
    assert address_allowed(address) is (kind is AddressKind.PUBLIC)
    assert address_allowed(address, lan=True) is (kind is not AddressKind.LOCAL)


class Names:
    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = table
        self.asked: list[str] = []

    def __call__(self, host: str, port: int) -> Sequence[str]:
        self.asked.append(host)
        if host not in self.table:
            raise OSError("no such host")
        return self.table[host]


ANY = EgressPolicy(None)


def listed(*entries: str) -> EgressPolicy:
    return egress_policy(entries)


def test_any_host_with_network_true_but_never_to_loopback() -> None:
    names = Names({"example.org": ["127.0.0.1", "93.184.216.34"], "evil.test": ["127.0.0.1"]})
    assert decide(Target("example.org", 443, True), ANY, names) == ("93.184.216.34",)
    refused = decide(Target("evil.test", 443, True), ANY, names)
    assert refused == Refusal(403, "evil.test resolves only to loopback or link-local addresses")
    assert decide(Target("nowhere.test", 443, True), ANY, names) == Refusal(
        502, "cannot resolve nowhere.test"
    )


def test_network_true_means_the_internet_unless_config_opts_in_to_the_lan() -> None:
    names = Names({"nas.lan": ["192.168.1.5"], "both.test": ["10.0.0.1", "93.184.216.34"]})
    refused = decide(Target("nas.lan", 80, False), ANY, names)
    assert isinstance(refused, Refusal) and refused.status == 403
    assert refused.reason.startswith("nas.lan resolves to a LAN address (192.168.1.5)")
    assert "[sandbox].lan = true" in refused.reason
    # Only the addresses that passed are returned: the proxy connects to nothing else.
    assert decide(Target("both.test", 443, True), ANY, names) == ("93.184.216.34",)
    lan = EgressPolicy(None, lan=True)
    assert decide(Target("nas.lan", 80, False), lan, names) == ("192.168.1.5",)
    assert decide(Target("both.test", 443, True), lan, names) == ("10.0.0.1", "93.184.216.34")


def test_network_true_reaches_ports_80_and_443_only() -> None:
    names = Names({"example.org": ["93.184.216.34"]})
    for port in (22, 25, 8080, 11434):
        got = decide(Target("example.org", port, True), ANY, names)
        assert got == Refusal(
            403,
            f"port {port}: network = true reaches ports 80 and 443 only "
            f'(a host list entry "host:{port}" allows another)',
        )
    assert names.asked == []  # refused before any lookup
    assert decide(Target("example.org", 80, False), ANY, names) == ("93.184.216.34",)


def test_a_host_list_allows_exactly_its_names_and_asks_no_resolver_for_others() -> None:
    names = Names({"api.github.com": ["140.82.112.6"], "gist.github.com": ["140.82.112.4"]})
    hosts = listed("api.github.com")
    assert decide(Target("api.github.com", 443, True), hosts, names) == ("140.82.112.6",)
    for host in ("gist.github.com", "github.com", "x.api.github.com"):
        got = decide(Target(host, 443, True), hosts, names)
        assert got == Refusal(403, f"{host} is not in this routine's network list")
    got = decide(Target("140.82.112.6", 443, True), hosts, names)
    assert got == Refusal(
        403, "140.82.112.6 is an address; this routine's network list names hosts"
    )
    assert names.asked == ["api.github.com"]


def test_a_host_list_names_its_ports_and_may_name_a_lan_host() -> None:
    names = Names({"git.example.org": ["93.184.216.34"], "nas.lan": ["192.168.1.5"]})
    hosts = listed("git.example.org:8443", "nas.lan")
    assert decide(Target("git.example.org", 8443, True), hosts, names) == ("93.184.216.34",)
    assert decide(Target("git.example.org", 443, True), hosts, names) == Refusal(
        403,
        "git.example.org:443 is not in this routine's network list (a host reaches ports 80 "
        'and 443; list "git.example.org:443" for another)',
    )
    assert decide(Target("nas.lan", 80, False, host_header=("nas.lan", 80)), hosts, names) == (
        "192.168.1.5",
    )
    assert isinstance(decide(Target("nas.lan", 8080, True), hosts, names), Refusal)


def test_with_a_host_list_a_plain_request_s_host_header_names_its_target() -> None:
    names = Names({"api.github.com": ["140.82.112.6"]})
    hosts = listed("api.github.com")
    head = b"GET http://api.github.com/x HTTP/1.1\r\nHost: gist.github.com"
    target = parse_head(head)
    assert isinstance(target, Target) and target.host_header == ("gist.github.com", 80)
    assert decide(target, hosts, names) == Refusal(
        403, "Host header gist.github.com:80 is not the request's target api.github.com"
    )
    assert decide(target, ANY, names) == ("140.82.112.6",)  # network = true: any host anyway
    missing = parse_head(b"GET http://api.github.com/x HTTP/1.0")
    assert isinstance(missing, Target)
    assert decide(missing, hosts, names) == Refusal(
        400, "a request to api.github.com without a Host header"
    )
    good = parse_head(b"GET http://api.github.com/x HTTP/1.1\r\nhost: API.GitHub.com.:80")
    assert isinstance(good, Target)
    assert decide(good, hosts, names) == ("140.82.112.6",)
    two = b"GET http://api.github.com/ HTTP/1.1\r\nHost: api.github.com\r\nHost: evil.test"
    assert parse_head(two) == Refusal(400, "more than one Host header")


@pytest.mark.parametrize(
    "policy",
    [ANY, EgressPolicy(None, lan=True), listed("a.example", "b.example:8443")],
)
def test_the_policy_travels_to_the_proxy_process_in_its_arguments(policy: EgressPolicy) -> None:
    assert policy_from_argv(policy_argv(policy)) == policy


def test_a_bad_host_list_entry_is_refused_before_any_proxy_runs() -> None:
    assert parse_entry("Git.Example.org.:8443") == Entry("git.example.org", 8443)
    for bad in ("a.example:0", "a.example:99999", "a.example:x", "[::1]:80", ""):
        with pytest.raises(ValueError, match="network list entry"):
            parse_entry(bad)
    with pytest.raises(ValueError):
        egress_policy(False)


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
