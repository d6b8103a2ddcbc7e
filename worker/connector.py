"""The one host-side connector: where the worker may open a connection that can carry a secret
or a prompt (a model provider, Anthropic at any base URL included, Ollama, a webhook).

Another local user can bind a port of this machine first (127.0.0.1:11434 while Ollama is
stopped, the port ANTHROPIC_BASE_URL or a [providers.NAME] base_url names, a webhook's) and
would receive the API key, every prompt, what the read tool returned, or a webhook's token,
and could play the model (its tool calls run in the sandbox). So every connection is decided
here, on the addresses the host name resolved to, never on how the URL spells it (`127.1`,
`0177.0.0.1`, an /etc/hosts alias, `[::ffff:127.0.0.1]` all land on loopback):

- each address is classed (`Where`): this machine (loopback, 0.0.0.0 and ::, which Linux
  connects as loopback, their IPv4-mapped forms, and the machine's own addresses, where a
  wildcard listener answers too), link-local, LAN (private ranges and the host's on-link
  prefixes, sandbox/onlink.py) or the internet;
- for an address of this machine, the kernel's socket tables (routines/listeners.py, read
  sending nothing to the listener) must show every socket the connection could reach owned
  by us, root, the system user `ollama` (Ollama's Linux install runs the server as it) or a
  user the setting in `Trust` names; anyone else: `Refused`, naming the URL, what it resolved
  to, the owner and the fix; never a fallback. Off this machine the network decides who
  answers, and TLS whom to trust.

Invariant: a connection goes only to an address `decide` returned, from the one resolution
it decided on (no second lookup, so a name cannot rebind between check and connect):
worker/webclient.py's network backend calls `Connector.addresses` inside httpcore's
connect_tcp and connects to those, for every client the worker builds (webclient's own, the
`openai` and `anthropic` SDKs'). tests/worker/test_outbound.py holds that nothing else in the code
opens a connection; tests/worker/test_worker_squatter.py runs each chain as a real second
local user; tests/worker/test_connector.py the decision on table text and an injected resolver.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum

from routines.listeners import (
    IPAddress,
    Listener,
    Owners,
    owners,
    read_listeners,
    untrusted,
    user_name,
)
from routines.safetext import redact_url
from routines.spec.providers import ProviderSettings
from sandbox.egress import AddressKind, address_kind, is_local
from sandbox.onlink import Network, read_on_link

__all__ = [
    "ANTHROPIC",
    "OLLAMA_SETTING",
    "OLLAMA_USER",
    "WEBHOOK",
    "Connector",
    "Refused",
    "Trust",
    "Where",
    "decide",
    "default",
    "landing",
    "ollama_trust",
    "provider_trust",
    "refusal",
    "resolve",
    "user_name",
]

OLLAMA_USER = "ollama"  # the system user of Ollama's official Linux install
CONFIG = "~/.vinos/routines/config.toml"


class Refused(Exception):
    """The connection would reach a listener we may not send to; `str()` says why and the fix
    (each provider raises it as its ProviderError, as it stands; a webhook as its error)."""


class Where(Enum):
    """Where a resolved address is, as the refusal and the tests name it."""

    MACHINE = "this machine"  # loopback, or one of this machine's addresses: owners checked
    LINK = "link-local"  # 169.254/16, fe80::/10 (and multicast, reserved)
    LAN = "LAN"  # private ranges, or inside one of the host's on-link prefixes
    INTERNET = "internet"


@dataclass(frozen=True, slots=True)
class Trust:
    """Who besides us, root and `ollama` may own a listener a connection lands on, and how a
    refusal names the sender and the setting that would trust another user."""

    what: str  # 'Ollama', 'provider "lmstudio"', 'Anthropic', 'webhook'
    users: tuple[str, ...] = ()
    setting: str | None = None  # e.g. "ollama_listener_users"; None: no setting widens it


OLLAMA_SETTING = "ollama_listener_users"  # config.toml's key naming the users trusted to serve it
# No setting widens these: a gateway or a webhook relay on this machine runs as the person.
ANTHROPIC = Trust("Anthropic")
WEBHOOK = Trust("webhook")


def ollama_trust(users: Sequence[str] = ()) -> Trust:
    return Trust("Ollama", tuple(users), OLLAMA_SETTING)


def provider_trust(settings: ProviderSettings) -> Trust:
    """A [providers.NAME] table's: its listener_users, named by their key."""
    name = settings.name
    return Trust(
        f'provider "{name}"', settings.listener_users, f"[providers.{name}].listener_users"
    )


_ANY4 = ipaddress.IPv4Address("0.0.0.0")
_ANY6 = ipaddress.IPv6Address("::")
_V4_LOOPBACK = ipaddress.IPv4Address("127.0.0.1")
_V6_LOOPBACK = ipaddress.IPv6Address("::1")


def landing(address: IPAddress) -> IPAddress:
    """The address a connection to `address` lands on (pure): an IPv4-mapped address is its
    IPv4 one, and 0.0.0.0 and :: are 127.0.0.1 and ::1 (Linux connects them so;
    OLLAMA_HOST=0.0.0.0 is a common setting)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address == _ANY4:
        return _V4_LOOPBACK
    if address == _ANY6:
        return _V6_LOOPBACK
    return address


def _where(address: IPAddress, on_link: Sequence[Network], mine: Callable[[str], bool]) -> Where:
    if address.is_loopback or mine(str(address)):
        return Where.MACHINE
    kind = address_kind(str(address), on_link)
    if kind is AddressKind.LOCAL:
        return Where.LINK
    return Where.LAN if kind is AddressKind.LAN else Where.INTERNET


def refusal(
    url: str,
    host: str,
    port: int,
    resolved: Sequence[str],
    trust: Trust,
    uid: int,
    name: str | None,
) -> str:
    """Why nothing is sent, and the way out when the listener is the person's own (pure)."""
    who = f"uid {uid}, user {name}" if name else f"uid {uid}, no user name"
    shown = ", ".join(resolved)
    lands = f"{host} is this machine" if shown == host else f"{host} resolves to {shown}"
    if trust.setting is None:
        fix = "run it as your own user"
    elif name is None:
        fix = f"give uid {uid} a user name and add it to {trust.setting} in {CONFIG}"
    else:
        fix = f'add "{name}" to {trust.setting} in {CONFIG}'
    return (
        f"{trust.what} at {redact_url(url)}: {lands}, and port {port} of this machine is held "
        f"by another user's program ({who}), not yours, root's or a user you trust; nothing "
        f"was sent to it. If that server is yours, {fix}; otherwise stop it or use another "
        "port (ss -ltnp shows who listens)"
    )


def decide(
    url: str,
    host: str,
    port: int,
    resolved: Sequence[str],
    trust: Trust,
    *,
    listeners: Callable[[], list[Listener]],
    name_of: Callable[[int], str | None],
    me: int,
    on_link: Callable[[], Sequence[Network]],
    mine: Callable[[str], bool],
    sends: bool = True,
) -> tuple[tuple[str, Where], ...]:
    """The addresses `host` resolved to (`resolved`, in order) that a connection may try, each
    with where it is; Refused when any address of this machine among them lands on a socket
    of a user `trust` does not name (a name that resolves to ours and theirs: theirs is
    tried too, by the next connect). The listener table and the routes are read only when
    asked (`listeners`, `on_link`: most connections are off this machine).

    `sends` False: the connection carries nothing of ours in the clear (a proxy that relays
    a TLS tunnel sees the host name, never the key or the prompt), so its owner is not
    asked; a system proxy (squid as `proxy`, cntlm) on loopback keeps working."""
    landed = [landing(ipaddress.ip_address(a.split("%", 1)[0])) for a in resolved]
    kinds = [_where(a, on_link() if not a.is_loopback else (), mine) for a in landed]
    local = tuple(a for a, k in zip(landed, kinds, strict=True) if k is Where.MACHINE)
    if local and sends:
        found = owners(listeners(), Owners(local, port))
        bad = untrusted(found, me, {OLLAMA_USER, *trust.users}, name_of)
        if bad:
            raise Refused(refusal(url, host, port, resolved, trust, bad[0], name_of(bad[0])))
    return tuple(zip(resolved, kinds, strict=True))


def resolve(host: str, port: int) -> list[str]:
    """The addresses `host` resolves to, in the resolver's order (IP literals, short forms
    such as 127.1, /etc/hosts, DNS). OSError when it does not resolve."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _mine(address: str) -> bool:
    """Whether `address` is one of this machine's (it binds here: the egress proxy's test).
    Where the kernel lets any address be bound (ip_nonlocal_bind), every address counts as
    this machine's, and its listeners are checked for each: stricter, never looser."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    return is_local(address, family)


class Connector:
    """`decide` over the real resolver, socket tables, routes and user database (each a
    seam: tests/worker/test_connector.py injects a resolver standing for an /etc/hosts alias,
    which a test cannot write)."""

    def __init__(
        self,
        *,
        resolver: Callable[[str, int], Sequence[str]] = resolve,
        listeners: Callable[[], list[Listener]] = read_listeners,
        name_of: Callable[[int], str | None] = user_name,
        me: int | None = None,
        routes: Callable[[], Sequence[Network]] = read_on_link,
        mine: Callable[[str], bool] = _mine,
    ) -> None:
        self._resolver = resolver
        self._listeners = listeners
        self._name_of = name_of
        self._me = os.getuid() if me is None else me
        self._read_routes = routes
        self._routes: Sequence[Network] | None = None
        self._mine = mine

    def _on_link(self) -> Sequence[Network]:
        if self._routes is None:  # read once per process: a run is short
            self._routes = self._read_routes()
        return self._routes

    def addresses(
        self, url: str, host: str, port: int, trust: Trust, *, sends: bool = True
    ) -> tuple[str, ...]:
        """Where a connection to `host`:`port` (on behalf of `url`) may go, in order: one
        resolution, decided (`sends`: as `decide`). Refused, or OSError when the name does
        not resolve."""
        resolved = self._resolver(host.strip("[]"), port)
        decided = decide(
            url,
            host,
            port,
            resolved,
            trust,
            listeners=self._listeners,
            name_of=self._name_of,
            me=self._me,
            on_link=self._on_link,
            mine=self._mine,
            sends=sends,
        )
        return tuple(a for a, _ in decided)

    def not_proxied(
        self,
        url: str,
        host: str,
        port: int | None,
        proxy_host: str,
        proxy_port: int,
        trust: Trust,
    ) -> None:
        """Refused when the URL's `host` resolves to this machine but the request goes
        through the proxy at `proxy_host` (HTTP(S)_PROXY): the proxy would connect on to it
        with no owner check. Literal loopback URLs are never proxied (webclient's mounts);
        this is an alias or a short form the proxy settings did not exempt. A host that
        does not resolve here passes: the proxy resolves it, off this machine."""
        if port is None:
            return
        try:
            resolved = self._resolver(host.strip("[]"), port)
        except (OSError, UnicodeError):
            return
        for text in resolved:
            address = landing(ipaddress.ip_address(text.split("%", 1)[0]))
            if _where(address, (), self._mine) is Where.MACHINE:
                raise Refused(
                    f"{trust.what} at {redact_url(url)}: {host} resolves to {text}, this "
                    f"machine, but the request would go through the proxy at {proxy_host}:"
                    f"{proxy_port}, which connects on to it unchecked; nothing was sent. Add "
                    f"{host} to NO_PROXY, or write the address (127.0.0.1) in the URL"
                )

    def check(self, url: str, trust: Trust) -> None:
        """Refused now, before a client is built or a key read, when a connection to `url`
        would be; the connection itself is decided again as it is made (`addresses`). A URL
        that does not parse or resolve passes: the request fails on its own."""
        try:
            parts = urllib.parse.urlsplit(url)
            host = parts.hostname or ""
            port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
        except ValueError:
            return
        if not host or port is None:
            return
        try:
            self.addresses(url, host, port, trust)
        except (OSError, UnicodeError, ValueError):
            return


_DEFAULT: Connector | None = None


def default() -> Connector:
    """The process's connector (a worker process is one run)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Connector()
    return _DEFAULT
