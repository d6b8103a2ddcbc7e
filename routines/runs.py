"""The vocabulary of a run's life: its status, outcome and trigger, the sets the rules use,
slot ids, the schedule fingerprint, and `RunEnd`, the columns a run ends with.

A leaf: it imports nothing of the project, so the ledger, the supervisor, the CLI, the worker
and `ipc` (which re-exports the enums) all speak it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol

__all__ = [
    "ACTIVE",
    "NOT_A_RUN",
    "NO_LAST_RUN",
    "STRIKES",
    "Outcome",
    "RunEnd",
    "RunStatus",
    "Trigger",
    "counts_as_strike",
    "fingerprint",
    "parse_slot_id",
    "slot_id",
    "sql_in",
    "status_of",
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


# Rows still owned by a process: a worker runs them or they wait for one.
ACTIVE: frozenset[RunStatus] = frozenset({RunStatus.QUEUED, RunStatus.RUNNING})
# Endings that count toward the consecutive failures that disable a routine.
STRIKES: frozenset[RunStatus] = frozenset({RunStatus.FAILED, RunStatus.TIMEOUT})
# Rows recorded for a slot nothing ran: no cost, not counted as runs.
NOT_A_RUN: frozenset[RunStatus] = frozenset({RunStatus.SKIPPED, RunStatus.MISSED})
# Rows that never become a routine's "last run" (list, status): unfinished, or a skip.
NO_LAST_RUN: frozenset[RunStatus] = ACTIVE | {RunStatus.SKIPPED}


def counts_as_strike(status: str | None) -> bool:
    """Whether a run that ended `status` is one more failure in a row (failed, timeout)."""
    return status in STRIKES


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
