"""`[[agent.credentials]]` / `[[command.credentials]]`: a credential file or folder granted
to a routine's sandbox, bound to the hosts it may be sent to (routines.spec.loader reads them
with these checks; routines.spec.never.credential_problem decides which paths may be granted).

    [[command.credentials]]
    path = "~/.config/gh"
    hosts = ["api.github.com", "github.com"]
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from routines.spec.checks import Bad, Check, Reader, found, nearest, nonempty_string
from routines.spec.hosts import network_value
from routines.spec.routine import Credential

__all__ = ["CREDENTIAL_KEYS", "read_credentials"]


def _host_list(value: object) -> tuple[str, ...]:
    """A credential's `hosts`: a non-empty array of host names (never true or false)."""
    expected = 'an array of host names such as ["api.github.com"]'
    if not isinstance(value, list):
        raise Bad(expected)
    try:
        hosts = network_value(value)
    except Bad as bad:
        why = bad.expected.partition("; ")[2]
        raise Bad(f"{expected}; {why}" if why else expected) from None
    assert isinstance(hosts, tuple)
    return hosts


CREDENTIAL_KEYS: dict[str, Check] = {"path": nonempty_string, "hosts": _host_list}


def read_credentials(
    r: Reader,
    table: str,
    t: Mapping[str, Any],
    schema: Mapping[str, Check],
    name: str | None = None,
) -> tuple[Credential, ...]:
    """`[[agent.credentials]]` / `[[command.credentials]]`: each a `path` (one app's
    credential file or folder below ~, never a broad container or vinos-routine's own state)
    and the `hosts` it may be sent to. `network = true` beside one is refused: a credential
    bound to hosts means nothing if every call may reach any host. `name` names the table in
    errors when it is not `[table]` (an MCP server's: `[agent].mcp[0]`)."""
    entries = t.get("credentials", [])
    if not entries:
        return ()
    from routines.spec.never import credential_problem
    from routines.spec.paths import paths

    home = os.path.realpath(Path.home())
    vinos_home = os.path.realpath(paths().home)
    out: list[Credential] = []
    for i, raw in enumerate(entries):
        where = f"{name or f'[{table}]'}.credentials[{i}]"
        fields: dict[str, Any] = {}
        for key, value in raw.items():
            if key not in schema:
                r.error(f"{where}.{key}", f"unknown key ({nearest(key, list(schema))})")
                continue
            try:
                fields[key] = schema[key](value)
            except Bad as bad:
                r.error(f"{where}.{key}", f"expected {bad.expected}, found {found(value)}")
        for key, example in (("path", '"~/.config/gh"'), ("hosts", '["api.github.com"]')):
            if key not in raw:
                r.error(f"{where}.{key}", f"required, e.g. {key} = {example}")
        path = fields.get("path")
        if path is not None and (problem := credential_problem(path, home, vinos_home)):
            r.error(f"{where}.path", problem)
            continue
        if path is not None and any(c.path == path for c in out):
            r.error(f"{where}.path", f'expected a path granted once, found "{path}" again')
            continue
        if len(fields) == 2 and len(raw) == 2:
            out.append(Credential(**fields))
    if t.get("network") is True:
        r.error(
            f"{name or f'[{table}]'}.network",
            f"network = true cannot go with [[{table}.credentials]]: true lets every call "
            "reach any host, so a credential could be sent anywhere; list the hosts the "
            'routine needs instead, e.g. network = ["api.example.com"] (its credentials\' '
            "hosts are added)",
        )
    return tuple(out)
