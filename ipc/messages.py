"""The messages on the pipes and the socket, as frozen msgspec Structs in one tagged union.

Each travels as one JSON object on one line with a `"type"` field (see `ipc.framing`): the
union's tag, each class's `TYPE`. Decoding checks every field's type as msgspec does (an int
where a float goes is taken; a bool where an int goes, a list where a dict goes, an unknown
field or an enum's unknown text are refused); an invalid line is decoded again the slow way
(`from_dict`) only to say what is wrong in the words of its fields.

Supervisor → worker: `Hello`, then one `Job`, then (a fleet's leased run only) any number of
`Lease` renewals. Worker → supervisor: `Hello`, any number of
`Event`, `Usage` and `Proposal`, then exactly one `Result`. CLI ↔ daemon: `Hello`, then
`Request` → (`Event`…) `Response`, whose `result` is one of the typed replies at the end of
this module (dataclasses: they travel inside `Response.result` as plain JSON).
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

import msgspec

# The run vocabulary lives in routines.runs (a leaf); ipc re-exports it for the wire. This is ipc's
# one project import, a leaf (pyproject.toml's import contracts, checked by make lint).
from routines.runs import Outcome, RunStatus, Trigger

__all__ = [
    "PROTOCOL",
    "ActiveEntry",
    "Answer",
    "Decision",
    "DetachedReply",
    "EnableReply",
    "Event",
    "EventKind",
    "FleetStatus",
    "Health",
    "Hello",
    "Job",
    "Lease",
    "Message",
    "NextFire",
    "Outcome",
    "PingReply",
    "Proposal",
    "ReloadReply",
    "Reply",
    "Request",
    "Response",
    "Result",
    "RunReply",
    "RunStatus",
    "SandboxProbe",
    "StatusReply",
    "Trigger",
    "Usage",
    "from_dict",
    "from_line",
    "lease_clock",
    "reply_json",
]

PROTOCOL = 1


class EventKind(StrEnum):
    MODEL_CALL = "model_call"
    MODEL_REPLY = "model_reply"
    MODEL_TEXT = "model_text"  # a piece of a local reply as it streams (whole lines mostly)
    TOOL_CALL = "tool_call"
    TOOL_REFUSED = "tool_refused"
    TOOL_RESULT = "tool_result"
    ESCALATED = "escalated"
    WARN = "warn"
    LOG = "log"  # a line of the run's own narration (e.g. "output written")
    # worker → supervisor: a call has ended and what it wrote is being copied back; the
    # backstop then waits once more, a bounded while (supervisor/engine/limits.py COPY_BACK_SEC)
    COPY_BACK = "copy_back"
    STATUS = "status"  # supervisor → CLI: the run changed status (queued, running, …)
    ROWS = "rows"  # supervisor → CLI: a batch of the rows of `list` as columns, data["rows"]


class _Message(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="type"):
    """A wire message: its tag is its `TYPE` (tests/ipc/test_ipc_framing.py round-trips each)."""

    TYPE: ClassVar[str]


class Hello(_Message, frozen=True, tag="hello"):
    TYPE: ClassVar[str] = "hello"
    protocol: int = PROTOCOL


class Decision(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What became of one of the routine's proposals since its last run (the prompt says it)."""

    id: int
    action: str
    summary: str
    state: str  # routines.proposals.ProposalState's value
    decided_by: str | None = None
    why: str | None = None
    exit_status: int | None = None


class Answer(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The person's answer to a paused run's call (supervisor/engine/pauses.py `answer_of`):
    the resumed worker puts it where the paused call's result was."""

    proposal: int
    action: str
    state: str  # routines.proposals.ProposalState's value: "done" ran it, any other did not
    decided_by: str | None = None
    decided_at: str | None = None
    why: str | None = None
    exit_status: int | None = None
    output: str | None = None


class SandboxProbe(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The daemon's sandbox probe of one bwrap (supervisor/engine/probecache.py)."""

    bwrap: str
    ok: bool
    reason: str = ""
    fix: str = ""


class Job(_Message, frozen=True, tag="job"):
    """Everything one run needs; the worker reads nothing else from the supervisor."""

    TYPE: ClassVar[str] = "job"
    run_id: str
    routine_name: str
    routine_path: str
    routine_toml: str  # the text the supervisor validated (the last good version)
    routine_origin: str  # "user" | "system"
    trigger: Trigger
    slot: str | None  # slot id, None for a manual run
    started_at: str  # ISO 8601 with offset, in the routine's zone: renders {{date}}
    # Allowance: None means no cap. dollars is what is left of today's max_dollars_per_day.
    max_tokens: int | None
    dollars_left: float | None
    memory: str  # the memory text to prepend ("" for session memory or none yet)
    vinos_home: str
    state_dir: str  # state/<name>/ (never visible in a sandbox)
    scratch_dir: str  # state/<name>/.scratch/<run-id>/: the output, staged; no sandbox sees it
    memory_path: str | None  # the memory file this run appends to, None for session
    ollama_url: str
    # config.toml's ollama_listener_users: who besides us, root and `ollama` may own a
    # loopback ollama_url's socket (worker/connector.py).
    ollama_listener_users: list[str] = []
    pricing: dict[str, list[float]] = {}  # model → [$in, $out] per MTok
    sandbox: dict[str, Any] = {}  # config.toml [sandbox]: masks, limits
    # config.toml [providers.NAME] (routines.spec.providers.to_job): URLs, key_file paths, prices;
    # never a key (the worker reads key_file itself).
    providers: dict[str, Any] = {}
    # What became of this routine's proposals since its last run, for the prompt.
    decisions: list[Decision] = []
    # trigger "reply": the run whose conversation (state_dir/runs/…) this one continues,
    # and the person's new user turn.
    parent_run_id: str | None = None
    reply_text: str = ""
    # [routine].permissions in effect for this run (routines/signing.py
    # `effective_permissions`): "ask" and "files" pause the run at an action.
    permissions: str = "ask"
    # trigger "resume": the person's answer to the parent's paused call.
    answer: Answer | None = None
    # `run` with VINOS_ROUTINE_DEBUG=1 through the daemon: the worker shows each bwrap argv, as
    # it does with the variable in its own environment (tests/supervisor/test_daemon_debug.py).
    debug: bool = False
    # A fleet's leased run: the worker's until it is past this instant on `lease_clock()`
    # unless a `Lease` moves it on; None (one machine, or offline) never lapses.
    lease_until: float | None = None
    # The daemon's sandbox probe for sandbox["bwrap"] (supervisor/engine/probecache.py), run
    # once per daemon start; None: the worker probes for itself.
    sandbox_probe: SandboxProbe | None = None
    # trigger after/watch/fire: what the event hands the run (supervisor/engine/triggers.py), shown
    # to the model marked as untrusted data; "" when none.
    event_label: str = ""
    event_text: str = ""


class Lease(_Message, frozen=True, tag="lease"):
    """ "Yours until `until`" (seconds on `lease_clock()`): the fleet renewed the run's lease.
    A worker past it without a newer one kills its process tree (worker/lease.py)."""

    TYPE: ClassVar[str] = "lease"
    until: float


def lease_clock() -> float:
    """The clock a lease's deadline is on: CLOCK_BOOTTIME, which one kernel shares between the
    daemon and its workers and which counts a suspend (a laptop that wakes past a deadline
    stops the run at once); wall time where there is none."""
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    return time.clock_gettime(boottime) if boottime is not None else time.time()


class Event(_Message, frozen=True, tag="event"):
    TYPE: ClassVar[str] = "event"
    kind: EventKind
    text: str  # one human line, what `run` and `logs` print
    data: dict[str, Any] = {}
    run_id: str = ""  # set by the supervisor when it forwards an event to a CLI client


class Usage(_Message, frozen=True, tag="usage"):
    """One model call's cost, a delta: the supervisor sums them (and kills on overspend)."""

    TYPE: ClassVar[str] = "usage"
    input: int = 0  # premium (paid) tokens
    output: int = 0
    local_input: int = 0  # local (Ollama) tokens, $0
    local_output: int = 0
    dollars: float = 0.0
    model: str = ""


class Proposal(_Message, frozen=True, tag="proposal"):
    """The model proposed one of the routine's declared actions (checked by the worker, and
    again by the supervisor, which records it for a person to approve or deny)."""

    TYPE: ClassVar[str] = "proposal"
    action: str
    input: str
    summary: str
    # action "write_file" (routines/proposals.py WRITE_ACTION): the resolved path to write.
    path: str = ""


class Result(_Message, frozen=True, tag="result"):
    TYPE: ClassVar[str] = "result"
    status: RunStatus  # ok | failed | timeout | budget | needs_you (paused for a person)
    outcome: Outcome | None = None  # from report_outcome
    summary: str = ""  # one line: the outcome summary or the failure reason
    output_file: str | None = None  # a file name inside scratch_dir
    route: str = ""  # anthropic | ollama | local | local->premium | command
    model: str = ""
    escalated: bool = False
    escalated_reason: str = ""
    # The premium model an escalation wanted and could not reach (no key, the leg down):
    # the run kept the local answer, and `model` is the local model that gave it.
    tried_model: str = ""
    tool_calls: int = 0
    tools_used: list[str] = []
    error: str | None = None  # a user-readable failure message
    notify: str | None = None  # a notification the worker asks for (budget notify)
    # Tool calls refused by the whitelist or the sandbox's checks, or by a person (a paused
    # call denied): `history` and `show` say how many, beside the run's detail.
    refused_calls: int = 0


class Request(_Message, frozen=True, tag="request"):
    TYPE: ClassVar[str] = "request"
    id: int
    cmd: str
    args: dict[str, Any] = {}


class Response(_Message, frozen=True, tag="response"):
    TYPE: ClassVar[str] = "response"
    id: int
    ok: bool
    result: Any = None
    error: dict[str, str] | None = None  # {"code": ..., "message": ...}


Message = Hello | Job | Lease | Event | Usage | Proposal | Result | Request | Response
_BY_TYPE: dict[str, type[Message]] = {
    cls.TYPE: cls for cls in (Hello, Job, Lease, Event, Usage, Proposal, Result, Request, Response)
}
# One decoder for the union: the tag picks the class, then every field is checked against its
# annotation (msgspec's rules, which are those the old hand-written checks held).
_DECODER = msgspec.json.Decoder(Message)

# Fields typed by an enum, for the error message only: it lists the members.
_ENUM_FIELDS: dict[type[Message], dict[str, type[StrEnum]]] = {
    Job: {"trigger": Trigger},
    Event: {"kind": EventKind},
    Result: {"status": RunStatus, "outcome": Outcome},
}


def to_dict(msg: Message) -> dict[str, Any]:
    """The wire form: the fields plus `"type"`, last (the bytes `ipc.encode` wrote before the
    messages were Structs: tests/ipc/test_ipc_framing.py pins them)."""
    out = msgspec.structs.asdict(msg)
    for key, value in out.items():  # a Job's parts (Decision, Answer, SandboxProbe) as objects
        if isinstance(value, msgspec.Struct) or (
            isinstance(value, list) and value and isinstance(value[0], msgspec.Struct)
        ):
            out[key] = msgspec.to_builtins(value)
    out["type"] = msg.TYPE
    return out


class MessageError(ValueError):
    """A JSON object that is not a valid message."""


def from_line(line: bytes) -> Message:
    """The message on one line (no newline), decoded and checked in one pass; msgspec's own
    DecodeError (ValidationError is one) when it is not JSON or not a valid message: the caller
    then asks `from_dict` what is wrong, in the words of the message's fields."""
    msg: Message = _DECODER.decode(line)
    return msg


# msgspec's "Expected `int`, got `bool` - at `$.input`" and "... - at `$.tools_used[1]`".
_AT = re.compile(r"^(?P<what>.*) - at `\$\.?(?P<path>.*)`$")
_EXPECTED = re.compile(r"^Expected `(?P<want>.+?)`, got `(?P<got>.+?)`$")


def from_dict(obj: object) -> Message:
    """Build a message from a decoded line; raises MessageError naming what is wrong."""
    if not isinstance(obj, dict):
        raise MessageError(f"expected a JSON object, found {type(obj).__name__}")
    kind = obj.get("type")
    cls = _BY_TYPE.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise MessageError(f"unknown message type {kind!r}")
    unknown = set(obj) - set(cls.__struct_fields__) - {"type"}
    if unknown:
        raise MessageError(f"{kind}: unknown fields {sorted(unknown)}")
    for name, enum in _ENUM_FIELDS.get(cls, {}).items():
        value = obj.get(name)
        if isinstance(value, str) and value not in enum._value2member_map_:
            raise MessageError(
                f"{kind}.{name}: expected one of {[m.value for m in enum]}, found {value!r}"
            )
    try:
        msg: Message = msgspec.convert(obj, cls)
    except msgspec.ValidationError as exc:
        raise MessageError(_field_error(cls.TYPE, str(exc))) from None
    return msg


def _field_error(kind: str, text: str) -> str:
    """msgspec's message, in the words the protocol's other errors use: `usage.input: expected
    int, found bool`, `result: Object missing required field `status``."""
    at = _AT.match(text)
    if at is None:
        return f"{kind}: {text}"
    what, path = at["what"], at["path"]
    expected = _EXPECTED.match(what)
    if expected is not None:
        what = f"expected {expected['want']}, found {expected['got']}"
    return f"{kind}.{path}: {what}"


# -- control-socket replies (CLI ↔ daemon): what `Response.result` holds for each command ------


@dataclass(frozen=True, slots=True)
class PingReply:
    pid: int
    version: str
    protocol: int
    home: str
    started_at: str
    loaded_modules: list[str]  # of anthropic, httpx, httpx2, worker: must stay empty


@dataclass(frozen=True, slots=True)
class ActiveEntry:
    """A run in a status reply: running (with started_at and pid) or waiting in the queue.
    Without a daemon only `routine` is known (the ledger's row says it is active)."""

    routine: str
    run_id: str | None = None
    trigger: Trigger | None = None
    slot: str | None = None
    started_at: str | None = None
    pid: int | None = None


@dataclass(frozen=True, slots=True)
class NextFire:
    routine: str
    at: str  # ISO 8601


class Health(StrEnum):
    """The daemon's state (supervisor/engine/health.py `Ground.health`; `status` carries it). OK
    schedules; LOST has stopped scheduling until the file is back or the daemon restarts;
    every other member is a pause (the ledger's `Unavailable` reasons, `health_of`), retried
    each tick and ended by itself when the cause passes."""

    OK = "ok"  # scheduling
    LOST = "lost"  # the ledger or a lock file was deleted or replaced under it
    DISK_FULL = "disk full"  # no space for the ledger
    READ_ONLY = "read-only"  # the ledger (or its -wal, -shm, directory) cannot be written
    IO_ERROR = "I/O error"  # the filesystem failed a read or write of the ledger
    LOCKED = "locked"  # another process held the ledger past the busy timeout
    CORRUPT = "corrupt"  # PRAGMA quick_check fails: move it aside, restore a backup
    UNREACHABLE = "unreachable"  # a fleet's PostgreSQL is out of reach
    DRAINING = "draining"  # the fleet's database is back; runs made offline still going
    UNEXPECTED = "database error"  # SQLite failed in a way none of the above names
    FORBIDDEN = "permission denied"  # the fleet database's role lacks a right it needs


@dataclass(frozen=True, slots=True)
class StatusReply:
    """`status`: the daemon's answer, or the CLI's from the files and the ledger when no
    daemon is up (`daemon` false, the daemon-only fields None or empty): one shape either way."""

    daemon: bool
    running: list[ActiveEntry]
    queued: list[ActiveEntry]
    next: list[NextFire]
    routines: int
    enabled: int
    invalid: list[str]
    stale: list[str] = field(default_factory=list)  # invalid files whose last good version runs
    pid: int | None = None
    started_at: str | None = None
    now: str | None = None
    max_concurrent: int | None = None
    status: str | None = None  # the daemon's one-line state (also its process title)
    lost: str | None = None  # why it stopped scheduling (its ledger or lock was replaced)
    disk_full: str | None = None  # why it is paused (any ledger fault, not only a full disk)
    health: Health = Health.OK
    unwritten: list[str] = field(default_factory=list)  # runs kept in memory, disk full
    fleet: FleetStatus | None = None  # with config.toml's [fleet]
    # Asked for (`status`'s request carries the shell's PATH and key presence): what keeps
    # the enabled routines from working here, with the fix; None when not asked.
    problems: list[str] | None = None


@dataclass(frozen=True, slots=True)
class FleetStatus:
    """`status` on a fleet: this machine, the routines it does not run here and why (pinned
    elsewhere, divergent), and those running on another machine now."""

    machine: str
    held: dict[str, str]
    elsewhere: dict[str, str]


@dataclass(frozen=True, slots=True)
class RunReply:
    """`run` and `follow`: how the run ended."""

    run_id: str
    routine: str
    status: RunStatus
    outcome: Outcome | None
    detail: str
    output: str | None  # the stored output file
    dollars: float
    disabled: bool  # this run was the third strike


@dataclass(frozen=True, slots=True)
class DetachedReply:
    """`run --detach`: the run was queued; follow it by id."""

    run_id: str


@dataclass(frozen=True, slots=True)
class ReloadReply:
    routines: int
    enabled: int
    invalid: list[str]


@dataclass(frozen=True, slots=True)
class EnableReply:
    name: str
    enabled: bool


Reply = PingReply | StatusReply | RunReply | DetachedReply | ReloadReply | EnableReply


def reply_json(reply: Reply) -> dict[str, Any]:
    """A reply as `Response.result` carries it."""
    return asdict(reply)
