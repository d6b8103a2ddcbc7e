"""The egress proxy's decisions, pure: what a request asks for, and whether it may go there.

The proxy itself runs in a process of its own (sandbox/egressserver.py, started by
sandbox/netns.py's ProxyProcess), in the host's network namespace, for the length of one shell
call. It speaks HTTP proxy: `CONNECT host:port` (HTTPS) and absolute-form requests
(`GET http://host/path`, plain HTTP).

What it lets through (`decide`):
- `network = true` (`hosts` None): any host on the internet, ports 80 and 443 only. An address
  on the LAN (RFC 1918, CGNAT 100.64/10, ULA fc00::/7, or inside one of the host's on-link
  prefixes, sandbox/onlink.py: an IPv6 LAN's global addresses) is refused unless
  [sandbox].lan = true.
- A host list: exactly its names (no subdomains, no IP literals), on ports 80 and 443, or on
  the one port an entry `host:port` names. A named host may resolve to a LAN address: naming
  it is the opt-in. A plain request's Host header must name its target (one request per
  connection: nothing past its body is relayed, and a chunked body is refused); a CONNECT's
  TLS ClientHello must carry the CONNECT host as its SNI (sandbox/tlshello.py), so a listed
  front cannot carry a request for another virtual host.
- Never, whatever the list: loopback, link-local (169.254.169.254 is a cloud's metadata
  service), unspecified, multicast, reserved, and the IPv4-mapped, IPv4-compatible, SIIT,
  NAT64, 6to4 and Teredo forms of any refused IPv4 address.

Every check is made on the address the proxy connects to: `decide` resolves once and returns
the addresses that passed, and the proxy connects to those (no second lookup, so a name
cannot rebind between check and connect).

Stdlib only, and no dataclasses (its import pulls in `inspect`, ~10 ms): the proxy process
imports this module at the start of every networked shell call.
"""

from __future__ import annotations

import enum
import ipaddress
import socket
from collections.abc import Callable, Sequence
from typing import NamedTuple, Protocol

__all__ = [
    "CHUNKED",
    "DEFAULT_PORTS",
    "AddressKind",
    "Dialer",
    "EgressPolicy",
    "Entry",
    "HostDialer",
    "Refusal",
    "Target",
    "address_allowed",
    "address_kind",
    "decide",
    "egress_policy",
    "is_local",
    "parse_entry",
    "parse_head",
    "policy_argv",
    "policy_from_argv",
    "port_refusal",
]

DEFAULT_PORTS = (80, 443)  # what a bare host name, and network = true, may reach
_CONNECT_TIMEOUT_SEC = 10.0

Resolver = Callable[[str, int], Sequence[str]]
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class Target(NamedTuple):
    """Where one proxied connection goes, and what to send it first."""

    host: str  # lower case, no trailing dot; an IP literal without brackets
    port: int
    tunnel: bool  # CONNECT: answer 200 and relay; else forward `first` to the server
    first: bytes = b""  # the rewritten request head (plain HTTP), plus any body bytes read
    # A plain request's Host header as (host, port), normalised like `host`; None for CONNECT
    # or when the request sent none.
    host_header: tuple[str, int] | None = None
    # A plain request's body: its Content-Length (0 without one), or CHUNKED. The proxy
    # relays that much of what the client sends and no more: one request per connection.
    body: int = 0


CHUNKED = -1  # Target.body of a request with Transfer-Encoding: its end is not known


class Refusal(NamedTuple):
    status: int  # 400, 403, 502
    reason: str  # one line, shown to the command in the response body and logged


class Entry(NamedTuple):
    """One host list entry: `host`, or `host:port`."""

    host: str
    port: int | None  # None: DEFAULT_PORTS


class EgressPolicy(NamedTuple):
    """What one shell call's proxy lets through."""

    hosts: tuple[Entry, ...] | None  # None: network = true, any internet host
    lan: bool = False  # network = true may reach LAN addresses ([sandbox].lan = true)


def parse_entry(text: str) -> Entry:
    """`host` or `host:port` as routines/spec/hosts.py checked it; ValueError if not."""
    host, colon, port_text = text.lower().rpartition(":")
    if not colon:
        host, port_text = text.lower(), ""
    host = host.rstrip(".")
    if not host or any(c in host for c in " \t/\\@%[]:"):
        raise ValueError(f"network list entry {text!r}: expected host or host:port")
    if not port_text:
        return Entry(host, None)
    if not (port_text.isascii() and port_text.isdigit()) or not 0 < int(port_text) < 65536:
        raise ValueError(f"network list entry {text!r}: the port must be 1-65535")
    return Entry(host, int(port_text))


def egress_policy(network: bool | tuple[str, ...], lan: bool = False) -> EgressPolicy:
    """A ShellPolicy's `network` (True, or the host list) and [sandbox].lan, as the proxy's."""
    if network is True:
        return EgressPolicy(None, lan)
    if not isinstance(network, tuple) or not network:
        raise ValueError("the egress proxy runs only for network = true or a host list")
    return EgressPolicy(tuple(dict.fromkeys(parse_entry(e) for e in network)), lan)


def policy_argv(policy: EgressPolicy) -> list[str]:
    """The policy as the proxy process's arguments (policy_from_argv reads them back)."""
    if policy.hosts is None:
        return ["any+lan" if policy.lan else "any"]
    entries = [e.host if e.port is None else f"{e.host}:{e.port}" for e in policy.hosts]
    return ["list", *entries]


def policy_from_argv(args: Sequence[str]) -> EgressPolicy:
    if list(args) == ["any"]:
        return EgressPolicy(None, False)
    if list(args) == ["any+lan"]:
        return EgressPolicy(None, True)
    if len(args) >= 2 and args[0] == "list":
        return EgressPolicy(tuple(parse_entry(a) for a in args[1:]))
    raise ValueError(f"expected any, any+lan or list HOST..., found {list(args)!r}")


def parse_head(head: bytes, rest: bytes = b"") -> Target | Refusal:
    """The target of one proxy request head (up to and without the blank line)."""
    text = head.decode("latin-1")  # decodes every byte
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        return Refusal(400, "expected an HTTP/1.x proxy request")
    method, uri, version = parts
    if method == "CONNECT":
        hostport = _host_port(uri, None)
        if hostport is None:
            return Refusal(400, "CONNECT needs host:port")
        return Target(*hostport, tunnel=True, first=rest)
    if not uri.lower().startswith("http://"):
        return Refusal(400, "expected CONNECT host:port or an absolute http:// URL")
    if (why := _unreadable_head(text, lines[1:])) is not None:
        return Refusal(400, why)
    after = uri[len("http://") :]
    authority, slash, path = after.partition("/")
    authority = authority.rpartition("@")[2]  # never forward userinfo as a host
    hostport = _host_port(authority, 80)
    if hostport is None:
        return Refusal(400, "bad host in the URL")
    hosts = [line for line in lines[1:] if line.lower().startswith("host:")]
    if len(hosts) > 1:
        return Refusal(400, "more than one Host header")
    host_header = None
    if hosts:
        host_header = _host_port(hosts[0][len("host:") :].strip(), 80)
        if host_header is None:
            return Refusal(400, "bad Host header")
    # One request per connection: the Host check above holds for the first request only, so
    # the server is told to close after it (a later request on the same connection could
    # name another virtual host). Proxy headers are for us and never forwarded.
    dropped = ("proxy-connection:", "proxy-authorization:", "connection:", "keep-alive:")
    kept = [line for line in lines[1:] if line and not line.lower().startswith(dropped)]
    body = _body_length(kept)
    if isinstance(body, Refusal):
        return body
    head_lines = [f"{method} /{path if slash else ''} {version}", *kept, "Connection: close"]
    request = "\r\n".join([*head_lines, "", ""])
    # Bytes past the body are a second request (pipelined): never sent on.
    first = request.encode("latin-1") + (rest if body == CHUNKED else rest[:body])
    return Target(*hostport, tunnel=False, first=first, host_header=host_header, body=body)


def _body_length(header_lines: Sequence[str]) -> int | Refusal:
    """A plain request's body length from its headers, CHUNKED, or why it is unreadable.

    The proxy relays one request per connection: the server is told `Connection: close`,
    and past the body nothing more is sent, so a server that would read on anyway gets no
    second request (whose Host nobody checked). tests/sandbox/test_redteam_http.py.
    """
    lengths = {
        line.partition(":")[2].strip()
        for line in header_lines
        if line.lower().startswith("content-length:")
    }
    chunked = any(line.lower().startswith("transfer-encoding:") for line in header_lines)
    if chunked and lengths:
        return Refusal(400, "both Content-Length and Transfer-Encoding")
    if chunked:
        return CHUNKED
    if not lengths:
        return 0
    value = lengths.pop()
    if lengths or not (value.isascii() and value.isdigit()):
        return Refusal(400, "a Content-Length that is not one number")
    return int(value)


# RFC 9110's token: a header name. Nothing else may stand before a header's colon.
_TOKEN = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _unreadable_head(text: str, header_lines: Sequence[str]) -> str | None:
    """Why a plain request's head could be read otherwise by the server, or None.

    The Host check holds only if the proxy sees the headers the server sees. Servers are
    lax where HTTP/1.1 lets them be: nginx, Node and Go end a line at a bare LF, a line
    starting with a space or tab continues the header above (obs-fold), and some take
    `Host :` for Host. Each hid a second Host header from the check; each is refused.
    tests/sandbox/test_redteam_http.py holds it.
    """
    if "\0" in text or "\r" in text.replace("\r\n", "") or "\n" in text.replace("\r\n", ""):
        return "a bare CR, LF or NUL in the request head"
    for line in header_lines:
        name, colon, _ = line.partition(":")
        if not colon or not name or not set(name) <= _TOKEN:
            return "a request header line that is not NAME: VALUE"
    return None


def _host_port(text: str, default: int | None) -> tuple[str, int] | None:
    if text.startswith("["):
        host, _, tail = text[1:].partition("]")
        port_text = tail[1:] if tail.startswith(":") else ""
        if tail and not tail.startswith(":"):
            return None
    else:
        host, colon, port_text = text.rpartition(":")
        if not colon:
            host, port_text = text, ""
    if not port_text:
        if default is None:
            return None
        port = default
    elif port_text.isascii() and port_text.isdigit() and 0 < int(port_text) < 65536:
        # isascii: str.isdigit() takes "²" (latin-1 0xB2), which int() then refuses.
        port = int(port_text)
    else:
        return None
    host = host.lower().rstrip(".")
    if not host or any(c in host for c in " \t/\\@%"):
        return None
    return host, port


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def port_refusal(target: Target, policy: EgressPolicy) -> Refusal | None:
    """None when policy lets `target`'s host and port through, else why not."""
    host, port = target.host, target.port
    if policy.hosts is None:
        if port in DEFAULT_PORTS:
            return None
        return Refusal(
            403,
            f"port {port}: network = true reaches ports 80 and 443 only "
            f'(a host list entry "host:{port}" allows another)',
        )
    if _is_ip(host):
        return Refusal(403, f"{host} is an address; this routine's network list names hosts")
    ports = {e.port for e in policy.hosts if e.host == host}
    if not ports:
        return Refusal(403, f"{host} is not in this routine's network list")
    if port in ports or (None in ports and port in DEFAULT_PORTS):
        return None
    return Refusal(
        403,
        f"{host}:{port} is not in this routine's network list (a host reaches ports 80 and "
        f'443; list "{host}:{port}" for another)',
    )


def host_header_refusal(target: Target, policy: EgressPolicy) -> Refusal | None:
    """With a host list, a plain request's Host header must name the host it is sent to:
    a server picks its virtual host by that header, not by the address connected to."""
    if policy.hosts is None or target.tunnel:
        return None
    if target.body == CHUNKED:
        return Refusal(
            400,
            f"a chunked request body to {target.host}: through a host list a plain request "
            "states its Content-Length (what follows a body is never relayed)",
        )
    if target.host_header is None:
        return Refusal(400, f"a request to {target.host} without a Host header")
    if target.host_header != (target.host, target.port):
        shown = "{}:{}".format(*target.host_header)
        return Refusal(403, f"Host header {shown} is not the request's target {target.host}")
    return None


class AddressKind(enum.Enum):
    """Where an address is, for the proxy; ordered by how far it is kept out."""

    PUBLIC = 0  # the internet: network = true reaches it
    LAN = 1  # private, CGNAT, ULA: only a named host, or [sandbox].lan = true
    LOCAL = 2  # loopback, link-local, unspecified, multicast, reserved: never


def _nets(*texts: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(t) for t in texts)


# 240.0.0.0/4 (reserved) holds the broadcast address; 0.0.0.0/8 is "this network".
_V4_LOCAL = _nets("0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "224.0.0.0/4", "240.0.0.0/4")
_V4_LAN = _nets("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10")
_V6_LAN = _nets("fc00::/7", "fec0::/10")  # ULA, and the deprecated site-local
# Forms that carry an IPv4 address in their last 32 bits: IPv4-compatible (::a.b.c.d),
# SIIT (::ffff:0:a.b.c.d) and the well-known NAT64 prefix. IPv4-mapped, 6to4 and Teredo
# have ipaddress properties of their own.
_V6_TAIL_V4 = _nets("::/96", "::ffff:0:0:0/96", "64:ff9b::/96")
# The local-use NAT64 prefix (RFC 8215): its translator is on the local network, so the
# whole prefix is LAN; the IPv4 address may sit at the end or, for a /48, at bits 48-87.
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")


def _v4_kind(ip: ipaddress.IPv4Address, on_link: Sequence[Network] = ()) -> AddressKind:
    if any(ip in net for net in _V4_LOCAL):
        return AddressKind.LOCAL
    if any(ip in net for net in _V4_LAN) or any(ip in net for net in on_link):
        return AddressKind.LAN
    return AddressKind.PUBLIC


def _embedded_v4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    found = [v for v in (ip.ipv4_mapped, ip.sixtofour) if v is not None]
    if ip.teredo is not None:
        found.append(ip.teredo[1])
    value = int(ip)
    if any(ip in net for net in _V6_TAIL_V4):
        found.append(ipaddress.IPv4Address(value & 0xFFFFFFFF))
    if ip in _NAT64_LOCAL:
        # The prefix length is the operator's: read both places an address may be (the
        # last 32 bits, or RFC 6052's /48 form: 16 bits, the zero u-octet, 16 bits), each
        # unless it is all zero there (the other form's padding).
        high, low = (value >> 64) & 0xFFFF, (value >> 40) & 0xFFFF
        for v4 in (value & 0xFFFFFFFF, high << 16 | low):
            if v4:
                found.append(ipaddress.IPv4Address(v4))
    return found


def address_kind(address: str, on_link: Sequence[Network] = ()) -> AddressKind:
    """Where `address` (an IP literal, maybe with a %zone) is; the most local reading wins.

    `on_link`: the host's on-link prefixes (sandbox/onlink.py). An address inside one is on
    the LAN whatever its range: an IPv6 LAN's devices have global addresses.
    """
    ip = ipaddress.ip_address(address.split("%", maxsplit=1)[0])
    if isinstance(ip, ipaddress.IPv4Address):
        return _v4_kind(ip, on_link)
    kinds = [_v4_kind(v, on_link) for v in _embedded_v4(ip)]
    if ip.is_loopback or ip.is_link_local or ip.is_multicast or ip.is_unspecified:
        kinds.append(AddressKind.LOCAL)
    elif (
        ip in _NAT64_LOCAL
        or any(ip in net for net in _V6_LAN)
        or any(ip in net for net in on_link if net.version == 6)
    ):
        kinds.append(AddressKind.LAN)
    return max(kinds, key=lambda k: k.value, default=AddressKind.PUBLIC)


def address_allowed(address: str, lan: bool = False, on_link: Sequence[Network] = ()) -> bool:
    """Whether the proxy may connect to `address`: an internet address, or with `lan` (a
    named host, or [sandbox].lan = true) a LAN one; never a local one."""
    kind = address_kind(address, on_link)
    return kind is AddressKind.PUBLIC or (lan and kind is AddressKind.LAN)


def decide(
    target: Target, policy: EgressPolicy, resolve: Resolver, on_link: Sequence[Network] = ()
) -> tuple[str, ...] | Refusal:
    """The addresses the proxy may try for `target`, in order, or why it refuses. `on_link`:
    the host's on-link prefixes (sandbox/onlink.py), LAN whatever their range.

    Invariant: the proxy connects only to addresses this returned (no second lookup).
    tests/sandbox/test_egress_internet.py holds it against a namespace with LAN hosts.
    """
    refused = port_refusal(target, policy) or host_header_refusal(target, policy)
    if refused is not None:
        return refused
    try:
        addresses = resolve(target.host, target.port)
    except (OSError, ValueError):  # getaddrinfo's IDNA step raises UnicodeError for `a..b`
        return Refusal(502, f"cannot resolve {target.host}")
    # A host the list names may be on the LAN: naming it is the opt-in.
    lan = policy.lan or policy.hosts is not None
    allowed = tuple(a for a in addresses if address_allowed(a, lan, on_link))
    if allowed:
        return allowed
    lan_seen = [a for a in addresses if address_kind(a, on_link) is AddressKind.LAN]
    if lan_seen:
        return Refusal(
            403,
            f"{target.host} resolves to a LAN address ({lan_seen[0]}); network = true "
            "reaches the internet only (name the host in a host list, or set "
            "[sandbox].lan = true in config.toml)",
        )
    return Refusal(403, f"{target.host} resolves only to loopback or link-local addresses")


class Dialer(Protocol):
    """Where the proxy's names are resolved and its connections made (HostDialer: the
    proxy process's own network namespace). What it allows is decided before either is
    called."""

    def resolve(self, host: str, port: int) -> Sequence[str]: ...

    def connect(self, address: str, port: int) -> socket.socket | None: ...


class HostDialer:
    """The proxy's network namespace: getaddrinfo and connect, with a timeout.

    Never to an address of this machine (its LAN or VPN address, a bridge's gateway): a
    service of the user's listening on 0.0.0.0 answers there just as on 127.0.0.1. An address
    is this machine's when a socket can be bound to it; where the kernel lets any address be
    bound (net.ipv4.ip_nonlocal_bind = 1) every connection is refused, which fails closed.
    """

    def resolve(self, host: str, port: int) -> Sequence[str]:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        return list(dict.fromkeys(str(info[4][0]) for info in infos))

    def connect(self, address: str, port: int) -> socket.socket | None:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        if is_local(address, family):
            return None
        s = socket.socket(family, socket.SOCK_STREAM)
        s.settimeout(_CONNECT_TIMEOUT_SEC)
        try:
            s.connect((address, port))
        except OSError:
            s.close()
            return None
        return s


def is_local(address: str, family: int) -> bool:
    """Whether `address` belongs to this machine (in this network namespace)."""
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((address, 0))
        except OSError:
            return False
        return True
