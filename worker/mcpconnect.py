"""`vinos-routine validate --connect`: start each MCP server a routine declares, in its
sandbox, and list the tools it really offers, with the whitelist entries that match none.
Run as `python -m worker.mcpconnect [--with-credentials] -- PATH...` (the CLI's side imports no
worker code); prints one JSON object per server on stdout. `--providers` asks only the local
servers (`provider_rows`) and starts no MCP server: `vinos-routine doctor` asks that of every
enabled routine.

A file being validated is not yet trusted (a gallery file, a draft): its servers start with
no credential and no network (`connect_policy`), so a hostile server can read nothing it
could not read in a run of a routine that grants nothing, and send nothing anywhere
(tests/cli/test_cli_validate_connect.py::test_connect_gives_a_server_no_credential_and_no_network).
Its own `home` entries and its installation (masked) are shown as in a run. Only
`--with-credentials`, which the CLI passes after the person saw the card, starts them as a run
would.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
import uuid
from pathlib import Path
from typing import Any

from routines.spec import McpServer, Routine

__all__ = ["connect_routine", "connect_server", "main", "provider_rows"]


def connect_server(server: McpServer, with_credentials: bool) -> McpServer:
    """The server as `validate --connect` starts it: without its credentials and network
    unless the person asked for them after seeing the card."""
    if with_credentials:
        return server
    return dataclasses.replace(server, credentials=(), network=False)


def connect_routine(routine: Routine, with_credentials: bool = False) -> list[dict[str, Any]]:
    """One row per declared server: its tools, or the error that kept it from starting."""
    from routines.spec.config import load_config
    from routines.spec.paths import paths
    from routines.store import remove_tree
    from worker.mcpclient import McpFailure, Portal
    from worker.mcptools import open_server, server_timeout
    from worker.shellpolicy import shell_timeout_for

    servers: tuple[McpServer, ...] = ()
    wanted: list[tuple[str, str]] = []
    if routine.agent is not None:
        servers, wanted = routine.agent.mcp, list(routine.agent.mcp_tools)
    elif routine.command is not None and routine.command.mcp is not None:
        servers = routine.command.mcp_servers
        wanted = [(routine.command.mcp.server, routine.command.mcp.tool)]
    if not servers:
        return []
    p = paths()
    settings = load_config(p.config_file).sandbox
    scratch = p.run_scratch(routine.name, f"connect-{uuid.uuid4().hex[:12]}")
    portal = Portal()
    rows: list[dict[str, Any]] = []
    try:
        for server in servers:
            row: dict[str, Any] = {
                "routine": routine.name,
                "server": server.name,
                "credentials": with_credentials,
            }
            timeout = server_timeout(server, shell_timeout_for(routine))
            try:
                session = open_server(
                    routine,
                    connect_server(server, with_credentials),
                    paths=p,
                    scratch_dir=scratch,
                    settings=settings,
                    portal=portal,
                    timeout=timeout,
                )
            except Exception as exc:  # any reason it cannot start is this row's error
                rows.append({**row, "ok": False, "error": str(exc), "tools": [], "unmatched": []})
                continue
            try:
                tools = sorted(t.name for t in session.list_tools(timeout))
            except McpFailure as exc:
                rows.append({**row, "ok": False, "error": str(exc), "tools": [], "unmatched": []})
                continue
            finally:
                session.close()
            unmatched = [f"mcp:{s}/{t}" for s, t in wanted if s == server.name and t not in tools]
            rows.append({**row, "ok": not unmatched, "tools": tools, "unmatched": unmatched})
    finally:
        portal.close()
        with contextlib.suppress(OSError):
            remove_tree(scratch)
    return rows


def provider_rows(routine: Routine) -> list[dict[str, Any]]:
    """The local leg, when it is a provider from config.toml and the routine has its own
    tools: whether the server would show the model those tools (the question a run asks
    before its first call, worker/providers/openai.py's tools_refusal)."""
    agent = routine.agent
    if agent is None or not (agent.shell_commands or agent.read_patterns or agent.mcp_tools):
        return []
    from routines.spec.config import load_config
    from routines.spec.paths import paths
    from routines.spec.providers import RouteInvalid, plan_route
    from worker.providers.base import ProviderError
    from worker.providers.openai import OpenAIProvider

    try:
        target = plan_route(agent, load_config(paths().config_file).providers).local
    except RouteInvalid:
        return []  # validate reports it already
    settings = target.settings
    if settings is None:
        return []
    row: dict[str, Any] = {"routine": routine.name, "provider": settings.name}
    try:
        refusal = OpenAIProvider(settings, api_key=None).tools_refusal(target.model)
    except ProviderError as exc:
        return [{**row, "ok": False, "error": str(exc)}]
    if refusal is not None:
        return [{**row, "ok": False, "error": refusal}]
    return [{**row, "ok": True}]


def main(argv: list[str]) -> int:
    from routines.spec.checks import RoutineInvalid
    from routines.spec.loader import load_file

    # [--with-credentials | --providers] -- PATH...: the files after "--", whatever they are
    # named.
    head, files = (
        (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else ([], argv)
    )
    with_credentials = "--with-credentials" in head
    only_providers = "--providers" in head
    for arg in files:
        try:
            routine = load_file(Path(arg))
        except RoutineInvalid:
            continue  # validate reports it already
        servers = [] if only_providers else connect_routine(routine, with_credentials)
        for row in [*servers, *provider_rows(routine)]:
            print(json.dumps({"file": arg, **row}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
