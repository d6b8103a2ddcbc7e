"""MCP servers in a routine file: `[[agent.mcp]]` (and `[[command.mcp_servers]]`), the
`mcp:SERVER/TOOL` whitelist entries, and a command routine's one fixed call.

    [[agent.mcp]]
    name = "git"
    command = ["mcp-server-git", "--repository", "~/src/site"]   # an argv, never a shell string
    home = ["~/src/site"]
    network = false                                                 # or a host list
    [agent]
    tools = ["mcp:git/git_log"]

    [command]
    mcp = { server = "time", tool = "get_current_time", arguments = { timezone = "UTC" } }

routines.spec.loader calls these with its Reader, so every problem names the file and the key.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from routines.spec.checks import Bad, Check, Reader, found, nearest, nonempty_string, positive_int
from routines.spec.checks import string_list as _strings
from routines.spec.grants import CREDENTIAL_KEYS, read_credentials
from routines.spec.hosts import network_value
from routines.spec.routine import AgentSpec, CommandSpec, McpCall, McpServer, Tool, ToolKind

__all__ = [
    "MCP_CALL_KEYS",
    "MCP_SERVER_KEYS",
    "MODEL_NAME_MAX",
    "SERVER_NAME_RE",
    "TOOL_NAME_RE",
    "check_tool_servers",
    "mcp_tool",
    "model_tool_name",
    "read_command_mcp",
    "read_servers",
    "server_homes",
]

# A server's name: no "_" (the model-side name `mcp__SERVER__TOOL` splits on "__").
SERVER_NAME_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,31}")
# What both providers accept as a tool name (Anthropic: ^[a-zA-Z0-9_-]{1,64}$).
TOOL_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
MODEL_NAME_MAX = 64


def model_tool_name(server: str, tool: str) -> str:
    """The name the model sees for `mcp:SERVER/TOOL` (Claude Code's `mcp__server__tool`)."""
    return f"mcp__{server}__{tool}"


def _argv(value: object) -> tuple[str, ...]:
    expected = 'an argv array such as ["mcp-server-git", "--repository", "~/src"]'
    if isinstance(value, str):
        raise Bad(f"{expected} (an argv, never a shell string)")
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise Bad(expected)
    if not value[0].strip():
        raise Bad(f"{expected}; its first word is empty")
    if any(c in v for v in value for c in "\0\n\r"):
        raise Bad(f"{expected}; found a NUL, newline or carriage return in it")
    return tuple(value)


def _server_network(value: object) -> bool | tuple[str, ...]:
    """false or a host list: a server's traffic is the model's, so it names its hosts."""
    if value is True:
        raise Bad('false or an array of host names such as ["api.github.com"] (never true)')
    return network_value(value)


def _tables(value: object) -> object:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise Bad("an array of tables ([[agent.mcp.credentials]])")
    return value


MCP_SERVER_KEYS: dict[str, Check] = {
    "name": nonempty_string,
    "command": _argv,
    "home": _strings,
    "network": _server_network,
    "timeout_sec": positive_int,
    "credentials": _tables,
}


def _object(value: object) -> object:
    if not isinstance(value, dict):
        raise Bad('a table of the tool\'s arguments, e.g. { timezone = "UTC" }')
    return value


MCP_CALL_KEYS: dict[str, Check] = {
    "server": nonempty_string,
    "tool": nonempty_string,
    "arguments": _object,
}


def read_servers(r: Reader, key: str, entries: object) -> tuple[McpServer, ...]:
    """Each `[[KEY]]` entry (`[agent].mcp` or `[command].mcp_servers`): a unique `name`, a
    `command` argv, optional `home`, `network`, `credentials`, `timeout_sec`."""
    if not isinstance(entries, list):
        return ()  # reported by the table's own check
    out: list[McpServer] = []
    for i, raw in enumerate(entries):
        where = f"{key}[{i}]"
        fields: dict[str, Any] = {}
        for k, value in raw.items():
            if k not in MCP_SERVER_KEYS:
                r.error(f"{where}.{k}", f"unknown key ({nearest(k, list(MCP_SERVER_KEYS))})")
                continue
            try:
                fields[k] = MCP_SERVER_KEYS[k](value)
            except Bad as bad:
                r.error(f"{where}.{k}", f"expected {bad.expected}, found {found(value)}")
        for k, example in (("name", '"git"'), ("command", '["mcp-server-git"]')):
            if k not in raw:
                r.error(f"{where}.{k}", f"required, e.g. {k} = {example}")
        name = fields.get("name")
        if name is not None and not SERVER_NAME_RE.fullmatch(name):
            r.error(
                f"{where}.name",
                "expected lowercase letters, digits and '-' (at most 32, no '_'), "
                f"found {found(name)}",
            )
            continue
        if name is not None and any(s.name == name for s in out):
            r.error(f"{where}.name", f'expected a name unique in the routine, found "{name}" again')
            continue
        creds = read_credentials(r, "agent.mcp", fields, CREDENTIAL_KEYS, name=where)
        if name is None or "command" not in fields or len(fields) != len(raw):
            continue
        out.append(McpServer(**{**fields, "credentials": creds}))
    return tuple(out)


def mcp_tool(r: Reader, where: str, value: str) -> Tool | None:
    """One `mcp:SERVER/TOOL` entry's shape (whether SERVER is declared: check_tool_servers)."""
    server, sep, tool = value.partition("/")
    if not sep or not SERVER_NAME_RE.fullmatch(server) or not TOOL_NAME_RE.fullmatch(tool):
        r.error(
            where,
            'expected "mcp:SERVER/TOOL" (a declared [[agent.mcp]] name, then one tool name '
            f'of letters, digits, "_" and "-"), found "mcp:{value[:80]}"',
        )
        return None
    if len(model_tool_name(server, tool)) > MODEL_NAME_MAX:
        r.error(
            where,
            f"expected a server and tool name of at most {MODEL_NAME_MAX - 7} characters "
            f'together (the model sees "mcp__SERVER__TOOL"), found "mcp:{value}"',
        )
        return None
    return Tool(ToolKind.MCP, value)


def check_tool_servers(r: Reader, raw: object, servers: Sequence[McpServer]) -> None:
    """Every `mcp:` entry of `[agent].tools` names a declared server."""
    names = [s.name for s in servers]
    declared = ", ".join(f'"{n}"' for n in names) if names else "none ([[agent.mcp]] declares one)"
    for i, entry in enumerate(raw if isinstance(raw, list | tuple) else ()):
        if not isinstance(entry, str) or not entry.startswith("mcp:"):
            continue
        server, sep, _ = entry[4:].partition("/")
        if sep and SERVER_NAME_RE.fullmatch(server) and server not in names:
            r.error(
                f"[agent].tools[{i}]",
                f'"{entry[:80]}" names the MCP server "{server}", which is not declared; '
                f"servers declared: {declared}",
            )


def server_homes(agent: AgentSpec | None, command: CommandSpec | None) -> list[tuple[str, str]]:
    """(key, entry) of every server's `home`, for the loader's never-list checks."""
    if agent is not None:
        servers, key = agent.mcp, "[agent].mcp"
    elif command is not None:
        servers, key = command.mcp_servers, "[command].mcp_servers"
    else:
        return []
    return [
        (f"{key}[{j}].home[{i}]", e) for j, s in enumerate(servers) for i, e in enumerate(s.home)
    ]


def read_command_mcp(r: Reader, t: Mapping[str, Any], raw: Mapping[str, Any]) -> CommandSpec | None:
    """A command routine whose command is one MCP call: `[command].mcp` (server, tool,
    arguments) instead of `run`, its server declared in `[[command.mcp_servers]]`."""
    servers = read_servers(r, "[command].mcp_servers", raw.get("mcp_servers", []))
    if "run" in raw:
        r.error("[command].run", "set either run or mcp, not both")
        return None
    for k in ("network", "home", "credentials"):
        if k in raw:
            r.error(f"[command].{k}", "with mcp, set it on the server ([[command.mcp_servers]])")
    call = t.get("mcp")
    if call is None:
        if "mcp" not in raw:
            r.error("[command].mcp", 'required with [[command.mcp_servers]] (or set run = "...")')
        return None
    fields: dict[str, Any] = {}
    for k, value in call.items():
        if k not in MCP_CALL_KEYS:
            r.error(f"[command].mcp.{k}", f"unknown key ({nearest(k, list(MCP_CALL_KEYS))})")
            continue
        try:
            fields[k] = MCP_CALL_KEYS[k](value)
        except Bad as bad:
            r.error(f"[command].mcp.{k}", f"expected {bad.expected}, found {found(value)}")
    for k in ("server", "tool"):
        if k not in call:
            r.error(
                f"[command].mcp.{k}",
                f'required, e.g. {k} = "{"time" if k == "server" else "get_current_time"}"',
            )
    server, tool = fields.get("server"), fields.get("tool")
    if server is not None and server not in {s.name for s in servers}:
        names = ", ".join(f'"{s.name}"' for s in servers) or "none"
        r.error(
            "[command].mcp.server",
            f'"{server}" is not declared in [[command.mcp_servers]]; servers declared: {names}',
        )
        return None
    if tool is not None and not TOOL_NAME_RE.fullmatch(tool):
        r.error(
            "[command].mcp.tool",
            f'expected a tool name of letters, digits, "_" and "-", found {found(tool)}',
        )
        return None
    if server is None or tool is None or len(fields) != len(call):
        return None
    arguments = json.dumps(fields.get("arguments", {}), default=str, sort_keys=True)
    rest = {k: v for k, v in t.items() if k in ("timeout_sec",)}
    return CommandSpec(run="", mcp=McpCall(server, tool, arguments), mcp_servers=servers, **rest)
