"""The `network` key: false, true, or a list of host names the routine's commands may reach.

    network = ["api.github.com", "github.com"]

Host names only, compared exactly by the egress proxy (sandbox/egress.py): no scheme, port,
path, wildcard or IP address, so a list says plainly which machines a routine talks to.
"""

from __future__ import annotations

import ipaddress
import re

from routines.checks import Bad

__all__ = ["host_problem", "network_value"]

_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
_EXPECTED = 'true, false or an array of host names such as ["api.github.com"]'


def host_problem(host: str) -> str | None:
    """Why `host` is not a plain host name, or None."""
    shown = host.encode("unicode_escape").decode("ascii")[:80]
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        pass
    else:
        return f'"{shown}" is an IP address; name the host'
    if "://" in host or "/" in host or ":" in host:
        return f'"{shown}" is not a bare host name (no scheme, port or path)'
    name = host.lower().removesuffix(".")
    if not name or len(name) > 253 or not all(_LABEL.fullmatch(p) for p in name.split(".")):
        return f'"{shown}" is not a host name'
    return None


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
    return tuple(dict.fromkeys(h.lower().removesuffix(".") for h in value))
