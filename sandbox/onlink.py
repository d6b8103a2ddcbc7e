"""The host's on-link prefixes: the networks its routes reach without a gateway (`ip route`'s
`dev eth0` lines with no `via`), IPv4 and IPv6, read from the kernel's route tables.

A device on such a prefix is on the person's LAN whatever its address says: an IPv6 LAN hands
out global addresses (2001:db8:5::/64 from the ISP's delegated prefix), and some IPv4 LANs
are public ranges. The egress proxy (sandbox/egress.py) and the worker's connector
(worker/connector.py) class an address inside one as LAN, not internet
(tests/sandbox/test_egress_internet.py::test_network_true_reaches_no_on_link_device).

Not on-link, whatever the table says: a default route (`default dev wg0` on a tunnel: every
address would be LAN, and the internet unreachable), the loopback device (the machine's own
addresses, and IPv6's local-table lines for them: HostDialer refuses those by binding them),
and a route with a gateway, a rejecting route, or no RTF_UP.

The parsing is pure (tests/sandbox/test_onlink.py, on table text); `read_on_link` is the one
read. Stdlib only, and no dataclasses: the egress proxy imports this at every networked call.
"""

from __future__ import annotations

import contextlib
import ipaddress
import sys
from pathlib import Path

__all__ = ["Network", "parse_ipv4_routes", "parse_ipv6_routes", "read_on_link"]

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

RTF_UP = 0x0001
RTF_GATEWAY = 0x0002
RTF_REJECT = 0x0200
RTF_ANYCAST = 0x00100000
RTF_LOCAL = 0x80000000  # the machine's own address (IPv6's local table lists it on its device)
_LOOPBACK_DEVICE = "lo"


def _v4(hex_word: str) -> ipaddress.IPv4Address:
    """/proc/net/route prints an IPv4 address as one 32-bit word in host byte order."""
    return ipaddress.IPv4Address(int(hex_word, 16).to_bytes(4, sys.byteorder))


def parse_ipv4_routes(text: str) -> tuple[ipaddress.IPv4Network, ...]:
    """The on-link prefixes in the text of /proc/net/route (pure): Iface Destination Gateway
    Flags RefCnt Use Metric Mask ... Lines that do not parse are skipped."""
    out: list[ipaddress.IPv4Network] = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 8 or fields[0] == _LOOPBACK_DEVICE:
            continue
        try:
            dest, gateway, flags = _v4(fields[1]), int(fields[2], 16), int(fields[3], 16)
            net = ipaddress.IPv4Network(f"{dest}/{_v4(fields[7])}", strict=False)
        except ValueError:
            continue
        if _on_link(flags, gateway != 0, net.prefixlen):
            out.append(net)
    return tuple(dict.fromkeys(out))


def parse_ipv6_routes(text: str) -> tuple[ipaddress.IPv6Network, ...]:
    """The on-link prefixes in the text of /proc/net/ipv6_route (pure): destination, its
    prefix length, source, its length, next hop, metric, refcnt, use, flags, device; the
    addresses as 32 hex digits in network order. Lines that do not parse are skipped."""
    out: list[ipaddress.IPv6Network] = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 10 or fields[9] == _LOOPBACK_DEVICE:
            continue
        try:
            dest = ipaddress.IPv6Address(bytes.fromhex(fields[0]))
            net = ipaddress.IPv6Network((dest, int(fields[1], 16)), strict=False)
            via, flags = int(fields[4], 16), int(fields[8], 16)
        except ValueError:
            continue
        if _on_link(flags, via != 0, net.prefixlen) and not (net.is_link_local or net.is_multicast):
            out.append(net)
    return tuple(dict.fromkeys(out))


def _on_link(flags: int, has_gateway: bool, prefix_length: int) -> bool:
    return (
        bool(flags & RTF_UP)
        and not flags & (RTF_GATEWAY | RTF_REJECT | RTF_ANYCAST | RTF_LOCAL)
        and not has_gateway
        and prefix_length > 0
    )


def read_on_link(proc: Path = Path("/proc")) -> tuple[Network, ...]:
    """This network namespace's on-link prefixes now (a table the kernel does not have, IPv6
    switched off, counts as empty: fewer LAN prefixes known, the private ranges still are)."""
    found: list[Network] = []
    with contextlib.suppress(OSError):
        found += parse_ipv4_routes((proc / "net" / "route").read_text())
    with contextlib.suppress(OSError):
        found += parse_ipv6_routes((proc / "net" / "ipv6_route").read_text())
    return tuple(found)
