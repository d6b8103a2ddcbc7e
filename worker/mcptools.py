"""A run's MCP servers: each started in the routine's sandbox at the run's first use of it,
offered to the model as exactly the whitelisted `mcp:SERVER/TOOL` entries (with the
server's own schemas), called, and all ended with the run (`close()`, from worker.main).

A server that cannot start, hangs on initialize or dies mid-call is a tool error the model
sees, never a crash, and a log line says why. One that died or hung is started again at
its next call, up to MAX_RESTARTS times a run (may_restart, held by
tests/worker/test_worker_mcp_restart.py); one over the workspace quota is ended for the
run (worker.mcpquota). Results are capped like shell output and anything but text is
described, not passed on. The SDK is imported here only when a server starts
(worker.mcpclient).
"""

from __future__ import annotations

import enum
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ipc.messages import EventKind
from routines.spec import McpServer, Routine
from routines.spec.mcpkeys import model_tool_name
from worker.providers.base import Image, ToolSpec

if TYPE_CHECKING:
    from ipc.messages import Job
    from routines.spec.config import SandboxSettings
    from routines.spec.paths import Paths
    from sandbox import ShellPolicy
    from worker.channel import Channel
    from worker.mcpclient import Portal, Session
    from worker.mcpquota import ServerQuota

__all__ = [
    "IMAGE_CAP",
    "IMAGE_TYPES",
    "MAX_RESTARTS",
    "RESULT_CAP",
    "Called",
    "Lost",
    "McpRun",
    "McpTools",
    "Rendered",
    "may_restart",
    "open_server",
    "render_result",
    "server_policy",
    "server_timeout",
    "start_server",
]

RESULT_CAP = 32 * 1024  # as a shell call's stdout (sandbox.STDOUT_CAP)


# What a provider that takes images is sent (the Messages API's image types); an image of
# another type, or past IMAGE_CAP of base64 in one result, is only described.
IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
IMAGE_CAP = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Rendered:
    """What the model gets of one tools/call result."""

    text: str
    truncated: bool
    is_error: bool
    omitted: tuple[str, ...]  # descriptions of the non-text content left out
    images: tuple[Image, ...] = ()  # sent where the route takes images, described elsewhere
    described: tuple[str, ...] = ()  # the descriptions of `images`

    def body(self) -> str:
        out: dict[str, Any] = {"content": self.text}
        if self.truncated:
            out["truncated"] = True
            out["note"] = f"the result was cut at {RESULT_CAP // 1024} KB"
        if self.described:
            out["images"] = list(self.described)
        if self.omitted:
            out["not_passed_on"] = list(self.omitted)
        if self.is_error:
            out["error"] = "the tool reported an error"
        return json.dumps(out, ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class Called:
    """One call's result: its JSON body, whether it is an error, and its images."""

    body: str
    is_error: bool
    images: tuple[Image, ...] = ()


def render_result(content: Sequence[Any], structured: Any, is_error: bool) -> Rendered:
    """A CallToolResult's blocks as text (pure: blocks are read by their attributes).
    Images the Anthropic route can take are kept (within IMAGE_CAP), and described in the
    body for the routes that cannot; all other non-text content is described only."""
    parts: list[str] = []
    omitted: list[str] = []
    images: list[Image] = []
    described: list[str] = []
    room = IMAGE_CAP
    for block in content:
        kind = getattr(block, "type", "?")
        if kind == "text":
            parts.append(str(getattr(block, "text", "")))
        elif kind in ("image", "audio"):
            b64, mime = str(getattr(block, "data", "")), str(getattr(block, "mime_type", "?"))
            about = f"{kind} ({mime}, about {len(b64) * 3 // 4:,} bytes)"
            if kind == "image" and mime in IMAGE_TYPES and len(b64) <= room:
                room -= len(b64)
                images.append(Image(mime, b64))
                described.append(f"{about}, attached where the model takes images")
            else:
                omitted.append(about)
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
    return Rendered(text, truncated, is_error, tuple(omitted), tuple(images), tuple(described))


def server_timeout(server: McpServer, default: float) -> float:
    """A request's wall clock: the server's timeout_sec, else the routine's shell timeout."""
    return float(server.timeout_sec) if server.timeout_sec is not None else default


class Lost(enum.StrEnum):
    """How a server's session was lost: whether it may be started again in this run."""

    START = "start"  # it could not start, or listing its tools failed: started again, no use
    DIED = "died"  # it exited, closed its output, or answered what the SDK cannot read
    HUNG = "hung"  # a request got no answer within its timeout (the server is ended)
    QUOTA = "quota"  # the writable dirs went over max_workspace_mb: a restart writes on


MAX_RESTARTS = 2  # per server and run: a server that died is started again this many times


def may_restart(lost: Lost, restarts: int) -> bool:
    """Whether a lost server starts again at its next call (pure; the bound's one place).
    A crash or a hang may be a passing fault (a request that tripped a bug, an input that
    hung it), so it gets MAX_RESTARTS more starts; a start failure and a quota stop would
    only happen again. tests/worker/test_worker_mcp_restart.py holds the table."""
    return lost in (Lost.DIED, Lost.HUNG) and restarts < MAX_RESTARTS


@dataclass(slots=True)
class _Live:
    """A running server: its session, and the quota's poll where the kernel cannot keep it
    (None: its writable dirs are overlays on a tmpfs of the quota, sandbox/stdio.py)."""

    session: Session
    quota: ServerQuota | None

    @property
    def killed(self) -> str | None:
        """Why the poll stopped it, once it has (never where the kernel keeps the quota)."""
        return None if self.quota is None else self.quota.killed

    def problem(self) -> str | None:
        """After a call: why its writable dirs are over the quota, or None."""
        if self.quota is None:
            return self.session.child.quota_problem()
        return self.quota.problem()

    def close(self) -> str | None:
        """End it; why what it wrote was not copied back, if it was not."""
        self.session.close()
        if self.quota is not None:
            self.quota.close()
        return self.session.child.not_kept


class _Remaining(Protocol):
    def remaining(self) -> float: ...


class McpRun(Protocol):
    """What McpTools reads of its run (worker/context.py's RunContext is one): a protocol, so
    that the run's context, which holds its McpTools, and this module import each other
    nowhere (the acyclic_siblings contract in pyproject.toml)."""

    @property
    def job(self) -> Job: ...
    @property
    def routine(self) -> Routine: ...
    @property
    def channel(self) -> Channel: ...
    @property
    def deadline(self) -> _Remaining: ...
    @property
    def paths(self) -> Paths: ...
    @property
    def sandbox_scratch(self) -> Path: ...
    def debug_argv(self) -> Callable[[list[str]], None] | None: ...


class McpTools:
    """The MCP servers of one run; `close()` ends every one (and their process trees)."""

    def __init__(self, run: McpRun, servers: Sequence[McpServer], default_timeout: float):
        self.run = run
        self.servers = {s.name: s for s in servers}
        self.default_timeout = default_timeout
        self._portal: Portal | None = None
        self._live: dict[str, _Live] = {}
        self._failed: dict[str, str] = {}  # server → why it is unusable for the rest of the run
        self._lost: dict[str, tuple[Lost, str]] = {}  # server → how and why, to restart it
        self._restarts: dict[str, int] = {}
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
        live = self._session(server)
        if live is None:
            return None
        from worker.mcpclient import McpFailure

        try:
            tools = live.session.list_tools(self._timeout(server))
        except McpFailure as exc:
            self._lose(server, Lost.START, f"listing its tools failed: {exc}")
            return None
        return {t.name: (t.description, t.schema) for t in tools}

    # --- calling ---

    def call(self, name: str, arguments: dict[str, Any]) -> Called:
        """The result of an offered tool."""
        server, tool = self.offered[name]
        timeout = self._timeout(server)
        if timeout <= 1:  # before a (re)start: a server started now could not answer
            return _error("the run is out of time; no more tools will run")
        live = self._session(server)
        if live is None:
            return _error(f"the MCP server {server!r} is unavailable: {self._failed[server]}")
        from worker.mcpclient import McpFailure

        timeout = self._timeout(server)  # what the start left
        try:
            result = live.session.call_tool(tool, arguments, timeout)
        except McpFailure as exc:
            if exc.answered and live.killed is None:
                return _error(f"the MCP server {server!r} answered with an error: {exc}")
            if stopped := self._over_quota(server, live):
                return _error(f"the MCP server {server!r} was stopped: {stopped}")
            self._lose(server, Lost.HUNG if exc.hung else Lost.DIED, str(exc))
            return _error(f"the MCP server {server!r} failed: {exc}")
        if stopped := self._over_quota(server, live):
            return _error(f"the MCP server {server!r} was stopped: {stopped}")
        rendered = render_result(result.content, result.structured_content, result.is_error)
        return Called(rendered.body(), rendered.is_error, rendered.images)

    def _over_quota(self, server: str, live: _Live) -> str | None:
        """After a call: the quota's problem, which ends the server for the run."""
        if (problem := live.problem()) is None:
            return None
        self._lose(server, Lost.QUOTA, _over(problem))
        return self._failed[server]

    # --- lifecycle ---

    def _session(self, server: str) -> _Live | None:
        if server in self._failed:
            return None
        live = self._live.get(server)
        if live is not None and not live.session.child.running():
            # It died between calls (killed, crashed, stopped by the quota's poll): lost now,
            # so this call may start it again rather than fail on its closed pipes.
            why = live.session.child.exit_note() or "it exited"
            if live.killed is not None:
                self._lose(server, Lost.QUOTA, _over(live.killed))
                return None
            self._lose(server, Lost.DIED, f"it exited between calls: {why}")
            if server in self._failed:
                return None  # it kept dying: no more starts this run
            live = None
        if live is None:
            restart = server in self._lost
            if restart:
                self._restarts[server] = self._restarts.get(server, 0) + 1
            try:
                live = self._live[server] = self._start(self.servers[server])
            except Exception as exc:  # any failure to start is the model's tool error
                self._lose(server, Lost.START, f"it could not start: {exc}")
                return None
            if restart:
                lost, why = self._lost.pop(server)
                self.run.channel.warn(
                    f"MCP server {server}: restarted ({self._restarts[server]} of "
                    f"{MAX_RESTARTS}) after it {lost.value}: {why}",
                    server=server,
                )
        return live

    def _start(self, server: McpServer) -> _Live:
        from routines.spec.config import SandboxSettings
        from worker.mcpclient import Portal
        from worker.mcpquota import ServerQuota

        if self._portal is None:
            self._portal = Portal()
        policy, argv = server_policy(
            self.run.routine,
            server,
            paths=self.run.paths,
            scratch_dir=self.run.sandbox_scratch,
            settings=SandboxSettings(**self.run.job.sandbox),
        )
        # Measured before it starts (the poll's limit is what the dirs held then), kept only
        # where the kernel does not keep the quota (sandbox/stdio.py decides).
        quota = ServerQuota(policy)
        try:
            session = start_server(
                argv,
                policy,
                portal=self._portal,
                timeout=self._timeout(server.name),
                on_argv=self.run.debug_argv(),
            )
        except BaseException:
            quota.close()
            raise
        polled: ServerQuota | None = quota
        if session.child.overlaid:
            quota.close()
            polled = None
        else:
            quota.watch(session.child)
        self.run.channel.event(
            EventKind.LOG, f"MCP server {server.name}: started", server=server.name
        )
        return _Live(session, polled)

    def _closed(self, server: str, live: _Live, lost: Lost | None = None) -> None:
        """End `live`; a log line when what it wrote was not copied back (over the quota:
        the call that found it said so already)."""
        not_kept = live.close()
        if not_kept is not None and lost is not Lost.QUOTA:
            self.run.channel.warn(f"MCP server {server}: {not_kept}", server=server)

    def _timeout(self, server: str) -> float:
        own = server_timeout(self.servers[server], self.default_timeout)
        return min(own, self.run.deadline.remaining())

    def _lose(self, server: str, lost: Lost, why: str) -> None:
        """End the server's session; it starts again at the next call if may_restart says
        so, else it stays a tool error for the rest of the run. A log line says which."""
        live = self._live.pop(server, None)
        if live is not None:
            self._closed(server, live, lost)
        restarts = self._restarts.get(server, 0)
        if may_restart(lost, restarts):
            self._lost[server] = (lost, why)
            self.run.channel.warn(
                f"MCP server {server}: {why}; it starts again at its next call", server=server
            )
            return
        self._lost.pop(server, None)
        if lost in (Lost.DIED, Lost.HUNG) and restarts:
            why = f"{why} (it was restarted {restarts} time(s) already; no more this run)"
        self._failed[server] = why
        self.run.channel.warn(f"MCP server {server}: {why}", server=server)

    def close(self) -> None:
        """End every server of the run and the SDK's event loop thread."""
        for server, live in self._live.items():
            self._closed(server, live)
        self._live.clear()
        if self._portal is not None:
            self._portal.close()
            self._portal = None


def server_policy(
    routine: Routine,
    server: McpServer,
    *,
    paths: Paths,
    scratch_dir: Path,
    settings: SandboxSettings,
) -> tuple[ShellPolicy, tuple[str, ...]]:
    """`server`'s sandbox policy in `routine` (its own home, network and credentials, its
    installation shown read-only) and the argv it runs. Raises (sandbox.UnsafeValue,
    InstallProblem)."""
    from routines.mcpinstall import resolve_install
    from routines.spec.never import NAME_PATTERNS
    from sandbox.policy import with_installs
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
    policy = with_installs(
        policy,
        install.binds,
        never=never_for(paths, settings),
        never_names=tuple(e.path for e in NAME_PATTERNS),
    )
    return policy, install.argv


def start_server(
    argv: Sequence[str],
    policy: ShellPolicy,
    *,
    portal: Portal,
    timeout: float,
    on_argv: Callable[[list[str]], None] | None = None,
) -> Session:
    """Start `argv` under `policy` and initialise an SDK session with it. Raises on failure
    (McpFailure, sandbox.stdio.StdioRefused)."""
    import sandbox.stdio
    from worker.mcpclient import Session

    child = sandbox.stdio.start_stdio(list(argv), policy, on_argv=on_argv)
    return Session(portal, child, timeout)


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
    """Start `server` in `routine`'s sandbox and initialise an SDK session with it (as a run
    does, without the quota watch: `validate --connect` lists tools and ends it). Raises on
    failure (McpFailure, sandbox.stdio.StdioRefused, InstallProblem, UnsafeValue)."""
    policy, argv = server_policy(
        routine, server, paths=paths, scratch_dir=scratch_dir, settings=settings
    )
    return start_server(argv, policy, portal=portal, timeout=timeout, on_argv=on_argv)


def _object_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A tool's input schema as both providers take it: a JSON object schema."""
    if schema.get("type") != "object":
        return {"type": "object", "properties": {}}
    return schema


def _over(problem: str) -> str:
    return f"its writable dirs went over the quota: {problem}"


def _error(message: str) -> Called:
    return Called(json.dumps({"error": message}), True)
