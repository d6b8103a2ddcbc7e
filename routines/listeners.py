"""Who listens on a port of this machine, from the kernel's socket tables: what the dashboard
(dashboard/listener.py) and the worker's connector (worker/connector.py) read before they
send anything to a loopback address another local user may have bound first.

The kernel lists every listening socket with its address, port, owner uid and inode: over
netlink (sock_diag, asked for listeners only: about 0.1 ms) or, where that is refused, in
`/proc/net/tcp` and `/proc/net/tcp6` (whose read walks every connection's hash bucket: some
10 ms on a large machine, too slow before a worker's first request). Asking sends nothing to
the listener, so nobody learns we asked. The parsing and the decisions are pure
(tests/routines/test_listeners.py, on table text and netlink bytes); `read_listeners` is the one
read.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import struct
import sys
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DiagError",
    "IPAddress",
    "Listener",
    "Owners",
    "foreign_holder",
    "owners",
    "parse_diag",
    "parse_table",
    "reachable",
    "read_listeners",
    "read_tables",
    "untrusted",
]

TCP_LISTEN = "0A"  # the st column of /proc/net/tcp for a listening socket (TCP_LISTEN = 10)
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True, slots=True)
class Listener:
    """One listening TCP socket as the kernel lists it."""

    address: IPAddress
    port: int
    uid: int
    inode: int


def _address(hex_addr: str) -> IPAddress:
    """The kernel prints addresses as 32-bit words in host byte order."""
    raw = bytes.fromhex(hex_addr)
    if sys.byteorder == "little":
        raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return ipaddress.IPv4Address(raw) if len(raw) == 4 else ipaddress.IPv6Address(raw)


def parse_table(text: str) -> list[Listener]:
    """The listening sockets in the text of /proc/net/tcp or /proc/net/tcp6 (pure). Lines
    that do not parse are skipped: the kernel's format, not an attacker's, is read here."""
    out = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != TCP_LISTEN:
            continue
        try:
            addr, port = fields[1].split(":")
            out.append(Listener(_address(addr), int(port, 16), int(fields[7]), int(fields[9])))
        except ValueError:
            continue
    return out


def read_tables(proc: Path = Path("/proc")) -> list[Listener]:
    """Every listening TCP socket now: one read of tcp and one of tcp6 (a table the kernel
    does not have, IPv6 switched off, counts as empty)."""
    listeners: list[Listener] = []
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            listeners += parse_table((proc / "net" / table).read_text())
    return listeners


# sock_diag (linux/inet_diag.h, linux/sock_diag.h, linux/netlink.h)
NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
TCPF_LISTEN = 1 << 10
_NLMSG = struct.Struct("=IHHII")  # nlmsghdr: len, type, flags, seq, pid
# inet_diag_msg after the header: family, state, timer, retrans; the sockid (sport, dport big
# endian, src[16], dst[16], interface, cookie[2]); expires, rqueue, wqueue, uid, inode.
_DIAG_MSG = struct.Struct("=BBBB2s2s16s16sI8sIIIII")


class DiagError(OSError):
    """The kernel refused the sock_diag request (no inet_diag module, a filter): read /proc."""


def parse_diag(data: bytes) -> tuple[list[Listener], bool]:
    """The listeners in one netlink datagram of a sock_diag dump, and whether the dump is
    done (pure). DiagError when the kernel answered with an error."""
    out: list[Listener] = []
    off = 0
    while off + _NLMSG.size <= len(data):
        length, kind, _, _, _ = _NLMSG.unpack_from(data, off)
        if kind == NLMSG_DONE:
            return out, True
        if kind == NLMSG_ERROR or length < _NLMSG.size + _DIAG_MSG.size:
            raise DiagError(f"sock_diag answered message type {kind}")
        fields = _DIAG_MSG.unpack_from(data, off + _NLMSG.size)
        family, sport, src, uid, inode = fields[0], fields[4], fields[6], fields[13], fields[14]
        raw = src[:4] if family == socket.AF_INET else src
        address = ipaddress.IPv4Address(raw) if len(raw) == 4 else ipaddress.IPv6Address(raw)
        out.append(Listener(address, int.from_bytes(sport, "big"), uid, inode))
        off += (length + 3) & ~3
    return out, False


def _diag_dump(family: int) -> list[Listener]:
    """The kernel's listening TCP sockets of one address family, over sock_diag."""
    request = struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, TCPF_LISTEN) + bytes(48)
    header = _NLMSG.pack(
        _NLMSG.size + len(request), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, 1, 0
    )
    listeners: list[Listener] = []
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG) as nl:
        nl.settimeout(5)
        nl.sendto(header + request, (0, 0))
        done = False
        while not done:
            got, done = parse_diag(nl.recv(65536))
            listeners += got
    return listeners


def read_listeners(proc: Path = Path("/proc")) -> list[Listener]:
    """Every listening TCP socket now, IPv4 and IPv6: over sock_diag, or from `proc`'s tables
    where the kernel refuses that (one read each)."""
    try:
        return _diag_dump(socket.AF_INET) + _diag_dump(socket.AF_INET6)
    except OSError:
        return read_tables(proc)


_ANY4 = ipaddress.IPv4Address("0.0.0.0")
_ANY6 = ipaddress.IPv6Address("::")


def _lands_on(target: IPAddress, bound: IPAddress) -> bool:
    """Whether a connection to `target` can land on a socket bound to `bound`: that address,
    its family's wildcard, or, for an IPv4 target, an IPv6 socket that takes IPv4 too (`::`,
    which the table cannot tell from a v6-only one, so it counts; or ::ffff:TARGET)."""
    if bound == target:
        return True
    if isinstance(target, ipaddress.IPv4Address):
        if bound in (_ANY4, _ANY6):
            return True
        mapped = bound.ipv4_mapped if isinstance(bound, ipaddress.IPv6Address) else None
        return mapped is not None and mapped in (target, _ANY4)
    return bound == _ANY6


def reachable(
    listeners: Iterable[Listener], targets: Collection[IPAddress], port: int
) -> list[Listener]:
    """The listeners a connection to any of `targets` on `port` could reach (pure). Every one
    counts, not only the one the kernel would pick: a foreign socket beside ours is foreign."""
    return [
        s for s in listeners if s.port == port and any(_lands_on(t, s.address) for t in targets)
    ]


@dataclass(frozen=True, slots=True)
class Owners:
    """Where a connection lands on this machine: the addresses it may reach, and the port
    (worker/connector.py finds them from the addresses a name resolved to)."""

    targets: tuple[IPAddress, ...]
    port: int


def owners(listeners: Iterable[Listener], where: Owners) -> tuple[int, ...]:
    """The uids of the sockets a connection to `where` could reach, sorted (pure)."""
    return tuple(sorted({s.uid for s in reachable(listeners, where.targets, where.port)}))


def untrusted(
    uids: Iterable[int],
    me: int,
    trusted_names: Collection[str],
    name_of: Callable[[int], str | None],
) -> tuple[int, ...]:
    """The uids among `uids` we may not send to (pure but for `name_of`, the user database):
    ours and root's are trusted, and a user whose name is in `trusted_names`."""
    out = []
    for uid in uids:
        if uid in (me, 0):
            continue
        name = name_of(uid)
        if name is None or name not in trusted_names:
            out.append(uid)
    return tuple(out)


def _here(address: IPAddress) -> bool:
    """Whether `address` is this machine's: loopback, or one it can bind (its LAN address)."""
    if address.is_loopback:
        return True
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((str(address), 0))
        except OSError:
            return False
    return True


def foreign_holder(host: str, port: int, trusted_names: Collection[str]) -> int | None:
    """The uid of another user's program a TCP connection to `host`:`port` could reach on
    this machine (not ours, root's or a user in `trusted_names`), or None. For a client that
    connects by itself (libpq): asked just before it connects, over one resolution; a name
    that does not resolve, or resolves off this machine, is None. OSError when the socket
    tables cannot be read."""
    import os

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return None
    targets = tuple(
        a
        for a in dict.fromkeys(ipaddress.ip_address(str(i[4][0]).split("%", 1)[0]) for i in infos)
        if _here(a)
    )
    if not targets:
        return None
    found = owners(read_listeners(), Owners(targets, port))
    bad = untrusted(found, os.getuid(), trusted_names, user_name)
    return bad[0] if bad else None


def user_name(uid: int) -> str | None:
    """The user name of `uid`, or None when it has none (what a refusal names)."""
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None
