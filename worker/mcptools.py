"""A run's MCP servers: each started in the routine's sandbox at the run's first use of it,
offered to the model as exactly the whitelisted `mcp:SERVER/TOOL` entries (with the
server's own schemas), called, and all ended with the run (`close()`, from worker.main).

A server that cannot start, hangs on initialize or dies mid-call is a tool error the model
sees, never a crash, and a log line says why. Results are capped like shell output and
anything but text is described, not passed on. The SDK is imported here only when a
server starts (worker.mcpclient).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ipc.messages import EventKind
from routines.spec import McpServer, Routine
from routines.spec.mcpkeys import model_tool_name
from worker.context import RunContext
from worker.providers.base import ToolSpec

if TYPE_CHECKING:
    from routines.spec.config import SandboxSettings
    from routines.spec.paths import Paths
    from worker.mcpclient import Portal, Session

__all__ = [
    "RESULT_CAP",
    "McpTools",
    "Rendered",
    "open_server",
    "render_result",
    "server_timeout",
]

RESULT_CAP = 32 * 1024  # as a shell call's stdout (sandbox.STDOUT_CAP)


@dataclass(frozen=True, slots=True)
class Rendered:
    """What the model gets of one tools/call result."""

    text: str
    truncated: bool
    is_error: bool
    omitted: tuple[str, ...]  # descriptions of the non-text content left out

    def body(self) -> str:
        out: dict[str, Any] = {"content": self.text}
        if self.truncated:
            out["truncated"] = True
            out["note"] = f"the result was cut at {RESULT_CAP // 1024} KB"
        if self.omitted:
            out["not_passed_on"] = list(self.omitted)
        if self.is_error:
            out["error"] = "the tool reported an error"
        return json.dumps(out, ensure_ascii=False)


def render_result(content: Sequence[Any], structured: Any, is_error: bool) -> Rendered:
    """A CallToolResult's blocks as text (pure: blocks are read by their attributes)."""
    parts: list[str] = []
    omitted: list[str] = []
    for block in content:
        kind = getattr(block, "type", "?")
        if kind == "text":
            parts.append(str(getattr(block, "text", "")))
        elif kind in ("image", "audio"):
            size = len(str(getattr(block, "data", ""))) * 3 // 4
            omitted.append(f"{kind} ({getattr(block, 'mime_type', '?')}, about {size:,} bytes)")
        elif kind == "resource_link":
            omitted.append(f"a link to the resource {getattr(block, 'uri', '?')}")
        elif kind == "resource":
            res = getattr(block, "resource", None)
            text = getattr(res, "text", None)
            if isinstance(text, str):
                parts.append(text)
            else:
                omitted.append(f"a binary resource {getattr(res, 'uri', '?')}")
        else:
            omitted.append(f"content of type {kind!r}")
    if not parts and structured is not None:
        parts.append(json.dumps(structured, ensure_ascii=False, default=str))
    text = "\n".join(parts)
    data = text.encode("utf-8", "replace")
    truncated = len(data) > RESULT_CAP
    if truncated:
        text = data[:RESULT_CAP].decode("utf-8", "ignore")
    return Rendered(text, truncated, is_error, tuple(omitted))


def server_timeout(server: McpServer, default: float) -> float:
    """A request's wall clock: the server's timeout_sec, else the routine's shell timeout."""
    return float(server.timeout_sec) if server.timeout_sec is not None else default


class McpTools:
    """The MCP servers of one run; `close()` ends every one (and their process trees)."""

    def __init__(self, run: RunContext, servers: Sequence[McpServer], default_timeout: float):
        self.run = run
        self.servers = {s.name: s for s in servers}
        self.default_timeout = default_timeout
        self._portal: Portal | None = None
        self._sessions: dict[str, Session] = {}
        self._failed: dict[str, str] = {}  # server → why it is unusable for the rest of the run
        self.offered: dict[str, tuple[str, str]] = {}  # model-side name → (server, tool)

    # --- offering ---

    def specs(self, whitelist: Sequence[tuple[str, str]]) -> list[ToolSpec]:
        """The whitelisted tools, with each server's own schema: this starts the servers
        (listing their tools is their first use). A server that fails still has its tools
        offered, described as unavailable, so a call of one gets the error that says why."""
        specs: list[ToolSpec] = []
        for server in dict.fromkeys(s for s, _ in whitelist):
            wanted = [t for s, t in whitelist if s == server]
            remote = self._listing(server)
            for tool in wanted:
                name = model_tool_name(server, tool)
                if remote is None:
                    why = self._failed.get(server, "it did not start")
                    desc = f"(unavailable in this run: the MCP server {server!r} failed: {why})"
                    schema: dict[str, Any] = {"type": "object", "properties": {}}
                elif tool in remote:
                    desc, schema = remote[tool]
                    desc = f"{desc} (MCP server {server})".strip()
                else:
                    self.run.channel.warn(
                        f"mcp:{server}/{tool}: the server offers no tool of that name, so it "
                        f"is not offered (it offers: {', '.join(sorted(remote)) or 'none'})"
                    )
                    continue
                self.offered[name] = (server, tool)
                specs.append(ToolSpec(name, desc, _object_schema(schema)))
        return specs

    def _listing(self, server: str) -> dict[str, tuple[str, dict[str, Any]]] | None:
        session = self._session(server)
        if session is None:
            return None
        from worker.mcpclient import McpFailure

        try:
            tools = session.list_tools(self._timeout(server))
        except McpFailure as exc:
            self._fail(server, f"listing its tools failed: {exc}")
            return None
        return {t.name: (t.description, t.schema) for t in tools}

    # --- calling ---

    def call(self, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        """(the result's JSON body, is_error) of an offered tool."""
        server, tool = self.offered[name]
        session = self._session(server)
        if session is None:
            return _error(f"the MCP server {server!r} is unavailable: {self._failed[server]}")
        from worker.mcpclient import McpFailure

        timeout = self._timeout(server)
        if timeout <= 1:
            return _error("the run is out of time; no more tools will run")
        try:
            result = session.call_tool(tool, arguments, timeout)
        except McpFailure as exc:
            self._fail(server, str(exc))
            return _error(f"the MCP server {server!r} failed: {exc}")
        rendered = render_result(result.content, result.structured_content, result.is_error)
        return rendered.body(), rendered.is_error

    # --- lifecycle ---

    def _session(self, server: str) -> Session | None:
        if server in self._failed:
            return None
        if server not in self._sessions:
            try:
                self._sessions[server] = self._start(self.servers[server])
            except Exception as exc:  # any failure to start is the model's tool error
                self._fail(server, f"it could not start: {exc}")
                return None
        return self._sessions[server]

    def _start(self, server: McpServer) -> Session:
        from routines.spec.config import SandboxSettings
        from worker.mcpclient import Portal

        if self._portal is None:
            self._portal = Portal()
        session = open_server(
            self.run.routine,
            server,
            paths=self.run.paths,
            scratch_dir=self.run.sandbox_scratch,
            settings=SandboxSettings(**self.run.job.sandbox),
            portal=self._portal,
            timeout=self._timeout(server.name),
            on_argv=self.run.debug_argv(),
        )
        self.run.channel.event(
            EventKind.LOG, f"MCP server {server.name}: started", server=server.name
        )
        return session

    def _timeout(self, server: str) -> float:
        own = server_timeout(self.servers[server], self.default_timeout)
        return min(own, self.run.deadline.remaining())

    def _fail(self, server: str, why: str) -> None:
        session = self._sessions.pop(server, None)
        if session is not None:
            session.close()
        self._failed[server] = why
        self.run.channel.warn(f"MCP server {server}: {why}", server=server)

    def close(self) -> None:
        """End every server of the run and the SDK's event loop thread."""
        for session in self._sessions.values():
            session.close()
        self._sessions.clear()
        if self._portal is not None:
            self._portal.close()
            self._portal = None


def open_server(
    routine: Routine,
    server: McpServer,
    *,
    paths: Paths,
    scratch_dir: Path,
    settings: SandboxSettings,
    portal: Portal,
    timeout: float,
    on_argv: Callable[[list[str]], None] | None = None,
) -> Session:
    """Start `server` in `routine`'s sandbox (its own home, network and credentials, its
    installation shown read-only) and initialise an SDK session with it. Raises on failure
    (McpFailure, sandbox.stdio.StdioRefused, InstallProblem, UnsafeValue)."""
    import sandbox.stdio
    from worker.mcpclient import Session
    from worker.mcpinstall import resolve_install
    from worker.shellpolicy import never_for, shell_policy_for

    policy = shell_policy_for(
        routine, paths=paths, scratch_dir=scratch_dir, settings=settings, mcp=server
    )
    install = resolve_install(
        server.command,
        home=os.path.realpath(Path.home()),
        path_env=dict(policy.env).get("PATH", ""),
        never=never_for(paths, settings),
    )
    policy = dataclasses.replace(policy, ro_binds=(*policy.ro_binds, *install.binds))
    child = sandbox.stdio.start_stdio(list(install.argv), policy, on_argv=on_argv)
    return Session(portal, child, timeout)


def _object_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A tool's input schema as both providers take it: a JSON object schema."""
    if schema.get("type") != "object":
        return {"type": "object", "properties": {}}
    return schema


def _error(message: str) -> tuple[str, bool]:
    return json.dumps({"error": message}), True
