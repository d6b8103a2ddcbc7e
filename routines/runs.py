"""The vocabulary of a run's life: its status, outcome and trigger, the sets the rules use,
slot ids, the schedule fingerprint, and `RunEnd`, the columns a run ends with.

A leaf: it imports nothing of the project, so the ledger, the supervisor, the CLI, the worker
and `ipc` (which re-exports the enums) all speak it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum, StrEnum
from typing import Any, Protocol

__all__ = [
    "ACTIVE",
    "EVENT_TRIGGERS",
    "NOT_A_RUN",
    "NO_LAST_RUN",
    "PAUSED",
    "STRIKES",
    "STRIKE_LIMIT",
    "Ended",
    "Outcome",
    "RunEnd",
    "RunStatus",
    "Strike",
    "Trigger",
    "counts_as_strike",
    "event_slot",
    "fingerprint",
    "is_event_slot",
    "parse_slot_id",
    "slot_id",
    "sql_in",
    "status_of",
    "strike",
]


class RunStatus(StrEnum):
    QUEUED = "queued"  # admitted, waiting for a free worker slot
    RUNNING = "running"  # a worker process is on it
    OK = "ok"  # finished and did what it was asked
    FAILED = "failed"  # finished badly: provider error, non-zero command, worker crash
    TIMEOUT = "timeout"  # killed at run_timeout_sec
    INTERRUPTED = "interrupted"  # its supervisor went away mid-run; never replayed
    SKIPPED = "skipped"  # the slot came due while the routine was still running or queued
    MISSED = "missed"  # slots that passed while nothing ran them (missed = "skip")
    BUDGET = "budget"  # stopped or not started: the allowance was spent
    NEEDS_YOU = "needs_you"  # paused for a person's answer (an action, a write); no process
    EXPIRED = "expired"  # paused, and nobody answered within needs_you_timeout
    RESUMED = "resumed"  # paused, then answered: the run went on as a new run (its child)


class Outcome(StrEnum):
    """What a finished (`ok`) agent run says it did, through the report_outcome tool."""

    DONE = "done"  # did the task
    NOTHING_TO_DO = "nothing-to-do"  # there was nothing to act on
    NEEDS_ATTENTION = "needs-attention"  # the user should look


class Trigger(StrEnum):
    SCHEDULE = "schedule"  # an on-time slot
    CATCH_UP = "catch_up"  # one run standing in for missed slots (missed = "catch_up")
    MANUAL = "manual"  # `vinos-routine run`, the dashboard's button
    REPLY = "reply"  # `vinos-routine reply RUN TEXT`: continues RUN's conversation
    AFTER = "after"  # another routine's run ended ([trigger].after); slot "after:<its run id>"
    WATCH = "watch"  # a watched file was written ([trigger].watch); slot "watch:<hash>"
    FIRE = "fire"  # `vinos-routine fire NAME` ([trigger].fire); slot "fire:<random id>"
    RESUME = "resume"  # a paused run's person answered: continues its conversation


# Rows still owned by a process: a worker runs them or they wait for one.
ACTIVE: frozenset[RunStatus] = frozenset({RunStatus.QUEUED, RunStatus.RUNNING})
# A run that waits for a person: no process, no concurrency slot, but its routine's slots are
# skipped ("waiting for you on RUN") until it is answered or expires (supervisor/engine/pauses.py).
PAUSED: frozenset[RunStatus] = frozenset({RunStatus.NEEDS_YOU})
# Endings that count toward the consecutive failures that disable a routine.
STRIKES: frozenset[RunStatus] = frozenset({RunStatus.FAILED, RunStatus.TIMEOUT})
# Rows recorded for a slot nothing ran: no cost, not counted as runs.
NOT_A_RUN: frozenset[RunStatus] = frozenset({RunStatus.SKIPPED, RunStatus.MISSED})
# Rows that never become a routine's "last run" (list, status): unfinished, or a skip.
NO_LAST_RUN: frozenset[RunStatus] = ACTIVE | {RunStatus.SKIPPED}


# Triggers whose slot is an event's id rather than an instant (routines/spec/trigger.py).
EVENT_TRIGGERS: frozenset[Trigger] = frozenset({Trigger.AFTER, Trigger.WATCH, Trigger.FIRE})


def counts_as_strike(status: str | None) -> bool:
    """Whether a run that ended `status` is one more failure in a row (failed, timeout)."""
    return status in STRIKES


STRIKE_LIMIT = 3  # consecutive failures (STRIKES) that disable a routine


def strike(status: RunStatus, streak: int) -> tuple[int, bool]:
    """The failure streak after a run ended with `status`, and whether to disable now.

    failed and timeout count (`counts_as_strike`); ok resets; everything else (skipped,
    missed, budget, interrupted) leaves the streak as it was.
    """
    if counts_as_strike(status):
        streak += 1
        return streak, streak >= STRIKE_LIMIT
    if status == RunStatus.OK:
        return 0, False
    return streak, False


class Ended(Enum):
    """What `finish_run` did. False only for NOT_ACTIVE, so `if ledger.finish_run(...)` reads
    "if this call ended the run"."""

    NOT_ACTIVE = "not_active"  # the row had ended already: nothing written, no strike
    ENDED = "ended"  # its end written (with its streak, when a Strike was given)
    DISABLED = "disabled"  # its end written, and that end was the routine's third strike

    def __bool__(self) -> bool:
        return self is not Ended.NOT_ACTIVE


@dataclass(frozen=True, slots=True)
class Strike:
    """Count a run's end toward three strikes in `finish_run`'s own transaction, so an end and
    its streak are written together or not at all (tests/fleet/test_ledger_contract.py::
    test_a_strike_is_written_with_the_end_it_counts)."""

    file_enabled: bool  # the routine file's `enabled` now: a disable's override is bound to it
    file_identity: str  # which file that is (Routine.identity): the override dies with it
    reason: str  # the routine's disabled_reason when this end is its third strike


def status_of(text: str) -> RunStatus | str:
    """A status read back from the ledger: the enum, or the text as written by v2.0.x
    (whose `exit_status` also held e.g. "error")."""
    try:
        return RunStatus(text)
    except ValueError:
        return text


def sql_in(statuses: Iterable[RunStatus]) -> str:
    """`('a', 'b')` for an SQL `IN` list: the sets above, written once."""
    return "(" + ", ".join(f"'{s.value}'" for s in sorted(statuses)) + ")"


_SLOT_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def slot_id(instant: datetime) -> str:
    """A slot's id: its UTC instant to the second. Stable across restarts and DST; it is the
    run fence's key, the cursor's value ("everything up to here is handled"), and sorts as
    text in time order (the ledger compares cursors as text)."""
    return instant.astimezone(UTC).strftime(_SLOT_FORMAT)


def parse_slot_id(text: str) -> datetime:
    """The instant a slot id (or cursor) stands for; ValueError when it is not one."""
    return datetime.strptime(text, _SLOT_FORMAT).replace(tzinfo=UTC)


def event_slot(trigger: Trigger, key: str) -> str:
    """An event's slot id, `<trigger>:<key>`: the upstream run id, the hash of a path and its
    mtime, or a fire id. Claimed like a time slot (the run fence), so each event runs at
    most once, ever; it never moves the routine's cursor (`is_event_slot`)."""
    assert trigger in EVENT_TRIGGERS
    return f"{trigger.value}:{key}"


def is_event_slot(slot: str) -> bool:
    """Whether a claimed slot id is an event's, not an instant's. The claim advances the
    cursor only for instants: an event id would sort after every instant as text, and the
    cursor is compared as text (tests/supervisor/test_triggers.py::
    test_an_event_claim_leaves_the_cursor)."""
    return not slot[:1].isdigit()


class _ScheduleText(Protocol):
    @property
    def form(self) -> object: ...
    @property
    def expression(self) -> str: ...
    @property
    def timezone(self) -> str: ...


def fingerprint(schedule: _ScheduleText) -> str:
    """Changes when a schedule's meaning changes (a new schedule owes nothing from before)."""
    import hashlib  # only the daemon and `enable` need it; the CLI's start-up does not

    text = f"{schedule.form}\0{schedule.expression}\0{schedule.timezone}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class RunEnd:
    """The columns a run ends with: its ledger row's final values, and last-run.json's.

    The defaults are what a run that never started has (a refusal, a skip, an interruption):
    no cost, no route. `duration_sec` None means "from its start to its end".
    """

    status: RunStatus
    detail: str = ""
    outcome: Outcome | None = None
    route: str | None = None
    model: str | None = None
    escalated: bool | None = None
    escalated_reason: str | None = None
    tried_model: str | None = None  # an escalation's model that was never reached
    input_tokens: int = 0
    output_tokens: int = 0
    local_input_tokens: int = 0
    local_output_tokens: int = 0
    tool_calls: int = 0
    tools_used: tuple[str, ...] | None = None
    dollars: float = 0.0
    output_file: str | None = None
    duration_sec: float | None = None

    def as_json(self) -> dict[str, Any]:
        """The fields as last-run.json holds them (without duration_sec, which it computes)."""
        return {
            "status": self.status,
            "outcome": self.outcome,
            "detail": self.detail,
            "route": self.route,
            "model": self.model,
            "escalated": self.escalated,
            "escalated_reason": self.escalated_reason,
            "tried_model": self.tried_model,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "local_input_tokens": self.local_input_tokens,
            "local_output_tokens": self.local_output_tokens,
            "tool_calls": self.tool_calls,
            "tools_used": list(self.tools_used) if self.tools_used is not None else None,
            "dollars": self.dollars,
            "output_file": self.output_file,
        }
