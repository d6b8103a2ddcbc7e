"""The host's on-link prefixes from the kernel's route tables, and the LAN classing they give
the egress proxy (sandbox/onlink.py, sandbox/egress.py). Table text as this machine's kernel
prints it; the proxy's use of it, against real namespaces, is
tests/sandbox/test_egress_internet.py::test_network_true_reaches_no_on_link_device."""

from __future__ import annotations

import ipaddress
import sys

from sandbox.egress import AddressKind, EgressPolicy, Refusal, Target, address_kind, decide
from sandbox.onlink import parse_ipv4_routes, parse_ipv6_routes, read_on_link


def v4(address: str) -> str:
    """An IPv4 address as /proc/net/route prints it: one word in host byte order."""
    return ipaddress.IPv4Address(address).packed[:: -1 if sys.byteorder == "little" else 1].hex()


ROUTE_HEAD = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT"


def route(dev: str, dest: str, gateway: str, flags: int, mask: str) -> str:
    return f"{dev}\t{v4(dest)}\t{v4(gateway)}\t{flags:04X}\t0\t0\t0\t{v4(mask)}\t0\t0\t0"


def test_ipv4_on_link_prefixes_are_the_routes_without_a_gateway() -> None:
    text = "\n".join(
        [
            ROUTE_HEAD,
            route("eth0", "0.0.0.0", "192.168.1.1", 0x3, "0.0.0.0"),  # default via: no
            route("eth0", "192.168.1.0", "0.0.0.0", 0x1, "255.255.255.0"),
            route("eth1", "203.0.113.0", "0.0.0.0", 0x1, "255.255.255.0"),  # public, on-link
            route("wg0", "0.0.0.0", "0.0.0.0", 0x1, "0.0.0.0"),  # default dev wg0: no
            route("eth0", "10.9.0.0", "192.168.1.7", 0x3, "255.255.0.0"),  # via a gateway
            route("eth0", "10.8.0.0", "0.0.0.0", 0x0, "255.255.0.0"),  # not up
            route("lo", "127.0.0.0", "0.0.0.0", 0x1, "255.0.0.0"),
            "garbage line",
        ]
    )
    assert parse_ipv4_routes(text) == (
        ipaddress.IPv4Network("192.168.1.0/24"),
        ipaddress.IPv4Network("203.0.113.0/24"),
    )


def v6route(dest: str, plen: int, via: str, flags: int, dev: str) -> str:
    def hexed(a: str) -> str:
        return ipaddress.IPv6Address(a).packed.hex()

    zero, counters = "0" * 32, "00000100 00000001 00000000"
    return f"{hexed(dest)} {plen:02x} {zero} 00 {hexed(via)} {counters} {flags:08x} {dev:>8}"


def test_ipv6_on_link_prefixes_are_the_routes_without_a_next_hop() -> None:
    text = "\n".join(
        [
            v6route("2001:db8:5::", 64, "::", 0x1, "eth0"),  # the delegated LAN prefix
            v6route("fd00::", 64, "::", 0x1, "eth0"),
            v6route("fe80::", 64, "::", 0x1, "eth0"),  # link-local: already local
            v6route("::", 0, "fe80::1", 0x3, "eth0"),  # default via the router
            v6route("::", 0, "::", 0x1, "wg0"),  # default dev wg0
            v6route("2001:db8:9::", 48, "fe80::1", 0x3, "eth0"),  # via a gateway
            v6route("2001:db8:5::2", 128, "::", 0x80200001, "eth0"),  # our own address
            v6route("::1", 128, "::", 0x80200001, "lo"),
            v6route("ff00::", 8, "::", 0x1, "eth0"),
            v6route("::", 0, "::", 0x00200200, "lo"),  # the reject route
            "not a route",
        ]
    )
    assert parse_ipv6_routes(text) == (
        ipaddress.IPv6Network("2001:db8:5::/64"),
        ipaddress.IPv6Network("fd00::/64"),
    )


def test_an_address_on_an_on_link_prefix_is_lan() -> None:
    on_link = (ipaddress.ip_network("2001:db8:5::/64"), ipaddress.ip_network("203.0.113.0/24"))
    assert address_kind("2001:db8:5::5") is AddressKind.PUBLIC  # without the routes
    assert address_kind("2001:db8:5::5", on_link) is AddressKind.LAN
    assert address_kind("203.0.113.5", on_link) is AddressKind.LAN
    assert address_kind("::ffff:203.0.113.5", on_link) is AddressKind.LAN  # the mapped form
    assert address_kind("2001:db8:6::5", on_link) is AddressKind.PUBLIC
    assert address_kind("127.0.0.1", on_link) is AddressKind.LOCAL  # local stays local
    names = {"printer.test": ["2001:db8:5::5"]}.__getitem__
    refused = decide(
        Target("printer.test", 80, False), EgressPolicy(None), lambda h, p: names(h), on_link
    )
    assert refused == Refusal(
        403,
        "printer.test resolves to a LAN address (2001:db8:5::5); network = true reaches the "
        "internet only (name the host in a host list, or set [sandbox].lan = true in "
        "config.toml)",
    )


def test_this_machines_tables_read() -> None:
    # Every machine the suite runs on has a route; what it is varies, so only the shape.
    assert all(net.prefixlen > 0 for net in read_on_link())
