"""The `network` key: false, true, or a list of host names the routine's commands may reach.

    network = ["api.github.com", "github.com", "git.example.org:8443"]

Host names, compared exactly by the egress proxy (sandbox/egress.py): no scheme, path,
wildcard or IP address, so a list says plainly which machines a routine talks to. A name
reaches ports 80 and 443; `host:port` (1-65535) reaches that one port instead. A listed
name may be a LAN host: naming it is what lets the proxy connect to its LAN address.
"""

from __future__ import annotations

import ipaddress
import re

from routines.spec.checks import Bad

__all__ = ["host_problem", "network_value"]

_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
# A name whose last label is a number is an address to the resolver: inet_aton reads `10.1`,
# `167772161` and `0xa000001` as 10.0.0.1 (and URL parsers agree: WHATWG's "ends in a
# number"). No top-level domain is numeric. tests/routines/spec/test_redteam_hosts.py holds it.
_NUMERIC_LABEL = re.compile(r"0x[0-9a-f]*|[0-9]+")
_EXPECTED = (
    'true, false or an array of host names such as ["api.github.com"] '
    '(or "host:port" for a port besides 80 and 443)'
)


def host_problem(host: str) -> str | None:
    """Why `host` is not a plain host name or host:port, or None."""
    shown = host.encode("unicode_escape").decode("ascii")[:80]
    if _is_ip(host.strip("[]")) or _is_ip(host.rpartition("]")[0].strip("[")):
        return f'"{shown}" is an IP address; name the host'
    if "://" in host or "/" in host or host.count(":") > 1:
        return f'"{shown}" is not a host name or host:port (no scheme or path)'
    host, colon, port = host.partition(":")
    if colon and not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        return f'"{shown}" has a port that is not a number from 1 to 65535'
    if _is_ip(host):
        return f'"{shown}" is an IP address; name the host'
    name = host.lower().removesuffix(".")
    if _NUMERIC_LABEL.fullmatch(name.rpartition(".")[2]):
        return f'"{shown}" is an IP address; name the host'
    if not name or len(name) > 253 or not all(_LABEL.fullmatch(p) for p in name.split(".")):
        return f'"{shown}" is not a host name'
    return None


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def network_value(value: object) -> bool | tuple[str, ...]:
    """A routine's `network` key, checked: a bool, or the listed hosts in lower case."""
    if isinstance(value, bool):
        return value
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise Bad(_EXPECTED)
    if not value:
        raise Bad(_EXPECTED + " (an empty array: write false)")
    for host in value:
        problem = host_problem(host)
        if problem is not None:
            raise Bad(f"{_EXPECTED}; {problem}")
    return tuple(dict.fromkeys(_normal(h) for h in value))


def _normal(entry: str) -> str:
    host, colon, port = entry.lower().partition(":")
    host = host.removesuffix(".")
    return f"{host}:{int(port)}" if colon else host
