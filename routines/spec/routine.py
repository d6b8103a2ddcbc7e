"""The routine, as typed immutable objects: what a TOML file in the registry means.

`routines.spec.loader` turns TOML text into these (strictly validated); everything else in the
project reads them and never the raw TOML.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

# The [schedule] table as written and the kinds it depends on live with the schedule code, which
# reads them (routines.schedule.written): this module re-exports them, so routines.schedule
# imports nothing of routines.spec (pyproject.toml: no import cycle between them).
from routines.schedule.written import Kind, Missed, ScheduleSpec

if TYPE_CHECKING:
    from routines.runs import Outcome

__all__ = [
    "ACTION_NAME_RE",
    "DEFAULT_APPROVALS_EXPIRE",
    "DEFAULT_GATE_TIMEOUT",
    "DEFAULT_LOCAL_MODEL",
    "DEFAULT_NEEDS_YOU_TIMEOUT",
    "DEFAULT_PREMIUM_MODEL",
    "NAME_RE",
    "RESERVED_NAMES",
    "Action",
    "AgentSpec",
    "BudgetSpec",
    "CommandSpec",
    "Credential",
    "Escalation",
    "GateSpec",
    "Kind",
    "McpCall",
    "McpServer",
    "Memory",
    "Missed",
    "OnExceed",
    "Origin",
    "OutputSpec",
    "OutputType",
    "Permissions",
    "Route",
    "Routine",
    "ScheduleSpec",
    "Tool",
    "ToolKind",
    "TriggerSpec",
]

NAME_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
# state/shared/ holds shared memory; routines/config.toml is the daemon's settings file.
RESERVED_NAMES = frozenset({"shared", "config"})
DEFAULT_LOCAL_MODEL = "llama3.2:3b"
DEFAULT_PREMIUM_MODEL = "claude-sonnet-4-6"
ACTION_NAME_RE = re.compile(r"[a-z0-9-]+")
DEFAULT_APPROVALS_EXPIRE = 7 * 86400  # [routine].approvals_expire, in seconds
DEFAULT_GATE_TIMEOUT = 60  # [gate].timeout_sec, in seconds
DEFAULT_NEEDS_YOU_TIMEOUT = 24 * 3600  # how long a paused run waits for its person, in seconds


class Permissions(StrEnum):
    """`[routine].permissions`: what an agent routine may do while nobody watches ("Ask me
    first", "Allow file changes", "Allow everything"). A whitelisted command accepted
    on the card is already allowed under each; `words` is what the card and `list` say."""

    ASK = "ask"  # every action pauses the run as "needs you" (and a write outside its state)
    FILES = "files"  # writes in the routine's own folders go ahead; every action pauses
    EVERYTHING = "everything"  # nothing pauses: only while the file's signature verifies

    @property
    def words(self) -> str:
        return _PERMISSION_WORDS[self]


_PERMISSION_WORDS = {
    Permissions.ASK: "Ask me first",
    Permissions.FILES: "Allow file changes",
    Permissions.EVERYTHING: "Allow everything",
}


class Route(StrEnum):
    ANTHROPIC = "anthropic"  # premium only
    OLLAMA = "ollama"  # local only
    AUTO = "auto"  # local first, escalate to premium on a trigger
    # One provider declared in config.toml ([providers.NAME]); AgentSpec.provider names it.
    # Written in a routine file as route = "NAME", never as "provider".
    PROVIDER = "provider"


class Memory(StrEnum):
    SESSION = "session"  # every run starts blank
    PERSISTENT = "persistent"  # state/<name>/memory.md
    SHARED = "shared"  # state/shared/memory.md, one journal for all routines


class OutputType(StrEnum):
    BRIEF = "brief"  # a markdown file in the state store, shown by `brief`
    NOTIFICATION = "notification"  # a desktop notification (and the file)
    FILE = "file"  # the markdown copied to [output].path
    WEBHOOK = "webhook"  # POSTed to [output].url by the worker


class OnExceed(StrEnum):
    SKIP = "skip"  # stop the run, status budget
    DEGRADE = "degrade-to-local"  # carry on with the local model at $0
    NOTIFY = "notify"  # stop the run and tell the user


class ToolKind(StrEnum):
    READ = "read"
    SHELL = "shell"
    MCP = "mcp"  # `mcp:SERVER/TOOL`: one tool of one declared MCP server


class Origin(StrEnum):
    USER = "user"  # $VINOS_HOME/routines
    SYSTEM = "system"  # $VINOS_SYSTEM_DIR


@dataclass(frozen=True, slots=True)
class Tool:
    """One whitelist entry: `read:<glob>`, `shell:<command>` or `mcp:<server>/<tool>`, kept
    verbatim."""

    kind: ToolKind
    value: str

    def __str__(self) -> str:
        return f"{self.kind.value}:{self.value}"


@dataclass(frozen=True, slots=True)
class Escalation:
    on_low_confidence: bool = True
    on_reasoning_task: bool = True
    on_context_overflow: bool = True
    on_malformed_tool_json: bool = True
    max_escalations_per_run: int = 3

    @property
    def possible(self) -> bool:
        """Whether `auto` can ever reach its premium leg: a trigger on and escalations left."""
        toggles = (
            self.on_low_confidence,
            self.on_reasoning_task,
            self.on_context_overflow,
            self.on_malformed_tool_json,
        )
        return self.max_escalations_per_run > 0 and any(toggles)


@dataclass(frozen=True, slots=True)
class Credential:
    """One `[[agent.credentials]]` / `[[command.credentials]]`: a credential file or folder
    bound read-only into the routine's sandbox, whose calls may then reach only `hosts` (and
    the routine's own host list). The path is never read by vinos-routine itself, so its
    contents reach no ledger row and no log line."""

    path: str  # `~/...`, checked by routines.spec.never.credential_problem
    hosts: tuple[str, ...]  # host names, as in a `network` list (routines/spec/hosts.py)


@dataclass(frozen=True, slots=True)
class McpServer:
    """One `[[agent.mcp]]` (or `[[command.mcp_servers]]`): an MCP server started over stdio in
    the routine's sandbox, with its own `home` and network, at the run's first use of it."""

    name: str  # routines.spec.mcpkeys.SERVER_NAME_RE
    command: tuple[str, ...]  # an argv, never a shell string; a leading `~/` is the home
    home: tuple[str, ...] = ()  # `~/...` paths the server sees, read-only
    network: bool | tuple[str, ...] = False  # False or host names (never true)
    credentials: tuple[Credential, ...] = ()
    timeout_sec: int | None = None  # per request; None: the routine's shell timeout

    @property
    def egress(self) -> bool | tuple[str, ...]:
        """What it may reach: its own host list and its credentials' hosts (as Routine.egress)."""
        if not self.credentials:
            return self.network
        own = self.network if isinstance(self.network, tuple) else ()
        return tuple(dict.fromkeys((*own, *(h for c in self.credentials for h in c.hosts))))


@dataclass(frozen=True, slots=True)
class McpCall:
    """`[command].mcp`: the one MCP tool a command routine calls, with fixed arguments."""

    server: str
    tool: str
    arguments: str = "{}"  # a JSON object, as text (the spec stays immutable)


@dataclass(frozen=True, slots=True)
class Action:
    """One `[[agent.actions]]`: a command the model may only propose; a person (or a valid
    signature with auto_approve) runs it, in the routine's sandbox, the proposal on stdin."""

    name: str
    run: str
    description: str = ""
    network: bool | tuple[str, ...] = False  # as for shell tools (routines/spec/hosts.py)
    home: tuple[str, ...] = ()  # `~/...` paths the command sees, read-only


@dataclass(frozen=True, slots=True)
class AgentSpec:
    system: str
    route: Route = Route.AUTO
    local_model: str = DEFAULT_LOCAL_MODEL
    premium_model: str = DEFAULT_PREMIUM_MODEL
    tools: tuple[Tool, ...] = ()
    memory: Memory = Memory.SESSION
    tags: tuple[str, ...] = ()
    local_context_tokens: int = 4096
    # Output tokens per model call; None: the provider's max_output_tokens, else the leg's
    # default (routines.spec.providers.output_limit).
    max_output_tokens: int | None = None
    network: bool | tuple[str, ...] = False  # a tuple: only those hosts (routines/spec/hosts.py)
    home: tuple[str, ...] = ()  # `~/...` paths its shell tools see, read-only
    # `~/...` folders it may write: read-write in its sandbox and for write_file under
    # permissions "files" (and "everything"); under "ask" read-only, and each write_file call
    # pauses the run for the person (routines/policy.py Scope.write).
    write: tuple[str, ...] = ()
    shell_timeout_sec: int = 30
    run_timeout_sec: int = 600
    escalation: Escalation = field(default_factory=Escalation)
    actions: tuple[Action, ...] = ()
    credentials: tuple[Credential, ...] = ()
    provider: str = ""  # route = PROVIDER: the declared provider's name
    model: str = ""  # route = PROVIDER: the model on it
    local_provider: str = "ollama"  # route = "auto": the local leg's provider
    premium_provider: str = "anthropic"  # route = "auto": the premium leg's provider
    mcp: tuple[McpServer, ...] = ()

    def action(self, name: str) -> Action | None:
        return next((a for a in self.actions if a.name == name), None)

    @property
    def read_patterns(self) -> tuple[str, ...]:
        return tuple(t.value for t in self.tools if t.kind is ToolKind.READ)

    @property
    def shell_commands(self) -> tuple[str, ...]:
        return tuple(t.value for t in self.tools if t.kind is ToolKind.SHELL)

    @property
    def mcp_tools(self) -> tuple[tuple[str, str], ...]:
        """The whitelisted (server, tool) pairs of the `mcp:` entries."""
        return tuple(
            (s, t)
            for s, _, t in (e.value.partition("/") for e in self.tools if e.kind is ToolKind.MCP)
        )


@dataclass(frozen=True, slots=True)
class CommandSpec:
    run: str  # "" when `mcp` is the command
    timeout_sec: int = 600
    network: bool | tuple[str, ...] = False  # a tuple: only those hosts (routines/spec/hosts.py)
    home: tuple[str, ...] = ()  # `~/...` paths the command sees, read-only
    credentials: tuple[Credential, ...] = ()
    mcp: McpCall | None = None  # instead of `run`: one MCP tool call
    mcp_servers: tuple[McpServer, ...] = ()


@dataclass(frozen=True, slots=True)
class OutputSpec:
    type: OutputType = OutputType.BRIEF
    title: str = "{{name}} · {{date}}"
    open_on_login: bool = False
    notify: bool = False
    path: str | None = None  # type = "file": where the markdown is copied (~ expanded)
    url: str | None = None  # type = "webhook": where the worker POSTs


@dataclass(frozen=True, slots=True)
class BudgetSpec:
    max_tokens_per_run: int | None = None
    max_dollars_per_day: float | None = None
    on_exceed: OnExceed = OnExceed.SKIP


def _done() -> tuple[Outcome, ...]:
    # Imported here: `from routines.spec import Routine` loads routine.py alone
    # (tests/test_package_exports.py).
    from routines.runs import Outcome

    return (Outcome.DONE,)


@dataclass(frozen=True, slots=True)
class TriggerSpec:
    """[trigger] as written (routines/spec/trigger.py reads it). `on` applies to `after`: a
    command routine's success is `done`."""

    after: tuple[str, ...] = ()
    on: tuple[Outcome, ...] = field(default_factory=_done)
    watch: tuple[str, ...] = ()
    fire: bool = False


@dataclass(frozen=True, slots=True)
class GateSpec:
    """[gate]: a shell string run in the routine's sandbox before any model call."""

    run: str
    timeout_sec: int = DEFAULT_GATE_TIMEOUT


@dataclass(frozen=True, slots=True)
class Routine:
    """One valid routine file."""

    name: str
    kind: Kind
    schedule: ScheduleSpec
    description: str = ""  # [routine].description: one sentence saying what the person gets
    title: str = ""  # [routine].title: a short title (routines/spec/shape.py)
    enabled: bool = False
    machines: tuple[str, ...] = ()  # [routine].machines: where a fleet may run it; () = any
    agent: AgentSpec | None = None
    command: CommandSpec | None = None
    output: OutputSpec = field(default_factory=OutputSpec)
    budget: BudgetSpec = field(default_factory=BudgetSpec)
    source: Path = Path()
    origin: Origin = Origin.USER
    text: str = ""  # the TOML this was parsed from: what the supervisor sends a worker
    warnings: tuple[str, ...] = ()
    approvals_expire: int = DEFAULT_APPROVALS_EXPIRE  # seconds a proposal waits for a decision
    trigger: TriggerSpec | None = None  # [trigger]: after, watch, fire (routines/spec/trigger.py)
    gate: GateSpec | None = None  # [gate]: the pre-check run before any model call
    permissions: Permissions = Permissions.ASK  # EVERYTHING counts only while signed (signing.py)
    needs_you_timeout: int | None = None  # seconds a paused run waits; None: config.toml's

    @property
    def scheduled(self) -> bool:
        """Whether it has a [schedule] (a routine with only [trigger] has none: its
        ScheduleSpec holds just the zone its days and budget are counted in)."""
        return bool(self.schedule.expression)

    @property
    def auto_approve(self) -> bool:
        """`auto_approve = true` of older files: the same as permissions = "everything"."""
        return self.permissions is Permissions.EVERYTHING

    @property
    def actions(self) -> tuple[Action, ...]:
        return self.agent.actions if self.agent is not None else ()

    @property
    def identity(self) -> str:
        """Which file this is: where it lives (user or system dir, its name) and its bytes.
        An enable/disable override is bound to it (RoutineState.enabled), so an override never
        outlives its file; the path is named by origin and name, not by where $HOME is, so a
        fleet's machines agree on it."""
        import hashlib

        digest = hashlib.sha256(f"{self.origin.value}\0{self.name}\0".encode())
        digest.update(self.text.encode())
        return digest.hexdigest()

    @property
    def network(self) -> bool | tuple[str, ...]:
        """False, True (any host), or the only hosts its commands may reach."""
        if self.agent is not None:
            return self.agent.network
        return self.command is not None and self.command.network

    @property
    def home(self) -> tuple[str, ...]:
        """The declared `home = [...]` of [agent] or [command]."""
        if self.agent is not None:
            return self.agent.home
        return self.command.home if self.command is not None else ()

    @property
    def write(self) -> tuple[str, ...]:
        """The declared `write = [...]` folders of [agent] (a command routine has none)."""
        return self.agent.write if self.agent is not None else ()

    @property
    def credentials(self) -> tuple[Credential, ...]:
        """The credential grants of [agent] or [command]."""
        if self.agent is not None:
            return self.agent.credentials
        return self.command.credentials if self.command is not None else ()

    @property
    def egress(self) -> bool | tuple[str, ...]:
        """What its shell calls may reach: `network`, narrowed by its credentials to the union
        of their hosts and its own host list (the loader refuses `network = true` beside a
        credential, so True here means no credential)."""
        if not self.credentials:
            return self.network
        own = self.network if isinstance(self.network, tuple) else ()
        hosts = [h for c in self.credentials for h in c.hosts]
        return tuple(dict.fromkeys((*own, *hosts)))

    @property
    def run_timeout_sec(self) -> int:
        if self.agent is not None:
            return self.agent.run_timeout_sec
        assert self.command is not None
        return self.command.timeout_sec
