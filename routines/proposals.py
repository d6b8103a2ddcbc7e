"""Proposed actions in the ledger: what a run proposed, who decided, what became of it.

A proposal's `state` only moves forward, each move one conditional UPDATE, so exactly one
decision is ever taken, whatever processes race (tests/cli/test_cli_approvals.py starts two
`approve` processes at once, tests/routines/test_proposals.py four claims):

    waiting ──approve──▶ running ──▶ done          (exit status and output recorded)
       ├──deny────────▶ denied
       ├──(expires_at)─▶ expired
       └──(routine edited)▶ invalidated

`claim` is the one way out of `waiting` into running: it also requires the proposal unexpired
and its routine file unchanged (same fingerprint), in the same statement.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any

from routines.ledger import iso
from routines.ledger.api import Requests

__all__ = [
    "MAX_INPUT",
    "MAX_PER_RUN",
    "OUTPUT_CAP",
    "WRITE_ACTION",
    "Decider",
    "Proposal",
    "ProposalState",
    "ProposalStore",
    "add",
    "claim",
    "decided_since",
    "deny",
    "expire",
    "fingerprint",
    "finish",
    "for_routine",
    "get",
    "invalidate",
    "note",
    "of_run",
    "prune",
    "recorded_for_run",
    "store_for",
    "waiting",
    "waiting_count",
]

MAX_INPUT = 64 * 1024  # bytes of a proposal's input (UTF-8): more is refused like a bad call
MAX_PER_RUN = 20  # proposals one run may make; later calls are refused
OUTPUT_CAP = 32 * 1024  # characters of an action's output kept in the ledger
# A write_file call a run paused at (permissions "ask"): its `command` is the resolved path,
# its `input` the content. Never a declared action's name (those take no "_").
WRITE_ACTION = "write_file"


class ProposalState(StrEnum):
    WAITING = "waiting"  # for a person (or a valid signature) to decide
    RUNNING = "running"  # approved: its command is running now
    DONE = "done"  # approved and ran; exit_status and output say how it went
    DENIED = "denied"  # a person said no (why, maybe)
    EXPIRED = "expired"  # nobody decided within [routine].approvals_expire
    INVALIDATED = "invalidated"  # the routine file changed since: the action may differ


class Decider(StrEnum):
    CLI = "cli"  # vinos-routine approve / deny
    DASHBOARD = "dashboard"  # the dashboard's Approve / Deny, in its session
    AUTO = "auto"  # auto_approve, with the routine's signature valid for a trusted key
    RUNTIME = "runtime"  # expired or invalidated: nobody decided


@dataclass(frozen=True, slots=True)
class Proposal:
    id: int
    routine: str
    run_id: str
    action: str
    command: str  # the action's `run` when it was proposed
    input: str
    summary: str
    fingerprint: str  # sha256 of the routine file the run used
    created_at: str
    expires_at: str
    state: ProposalState
    decided_by: str | None = None
    decided_at: str | None = None
    why: str | None = None
    exit_status: int | None = None
    output: str | None = None
    finished_at: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__slots__}


def fingerprint(text: str) -> str:
    """What identifies a routine file's content: any edit changes it."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _row(row: dict[str, Any]) -> Proposal:
    return Proposal(**(row | {"state": ProposalState(row["state"])}))


# Where proposals are kept: the run ledger (routines/ledger/api.py `Requests`), on SQLite and
# on a fleet's PostgreSQL alike. Rows are plain dicts; the rules of a state are this module's.
ProposalStore = Requests


def add(
    ledger: ProposalStore,
    *,
    routine: str,
    run_id: str,
    action: str,
    command: str,
    input: str,
    summary: str,
    fingerprint: str,
    now: datetime,
    expires_after: int,
) -> int:
    """Record one waiting proposal; its id."""
    return ledger.add_proposal(
        {
            "routine": routine,
            "run_id": run_id,
            "action": action,
            "command": command,
            "input": input,
            "summary": summary,
            "fingerprint": fingerprint,
            "created_at": iso(now),
            "expires_at": iso(now + timedelta(seconds=expires_after)),
            "state": ProposalState.WAITING.value,
        }
    )


def recorded_for_run(ledger: ProposalStore, run_id: str) -> int:
    """How many proposals of `run_id` are recorded."""
    return len(ledger.proposals_of_run(run_id))


def of_run(ledger: ProposalStore, run_id: str) -> list[Proposal]:
    """`run_id`'s proposals, oldest first: a paused run's request is the last."""
    return [_row(r) for r in ledger.proposals_of_run(run_id)]


def get(ledger: ProposalStore, proposal_id: int) -> Proposal | None:
    row = ledger.proposal(proposal_id)
    return _row(row) if row else None


def waiting(ledger: ProposalStore, routine: str | None = None) -> list[Proposal]:
    """Waiting proposals, newest first (call `expire` and `invalidate` before, to be current)."""
    return [_row(r) for r in ledger.waiting_proposals(routine)]


def for_routine(ledger: ProposalStore, routine: str, limit: int = 20) -> list[Proposal]:
    """`routine`'s proposals in any state, newest first (for `history`)."""
    return [_row(r) for r in ledger.proposals_for_routine(routine, limit)]


def waiting_count(ledger: ProposalStore, now: datetime) -> int:
    """Waiting and not yet expired (a read: for waybar and status, which never write)."""
    return ledger.waiting_proposal_count(iso(now))


def prune(ledger: ProposalStore, before: datetime, limit: int = 200) -> int:
    """Delete up to `limit` decided proposals (done, denied, expired, invalidated) whose last
    change is older than `before`; how many. Waiting and running ones are never deleted: a
    waiting one expires first, and is deleted only once that is old too."""
    return ledger.prune_proposals(iso(before), limit)


def expire(ledger: ProposalStore, now: datetime) -> int:
    """Mark waiting proposals past their expiry `expired`; how many."""
    return ledger.expire_proposals(iso(now))


EDITED = "the routine file was edited since it was proposed"


def invalidate(
    ledger: ProposalStore, routine: str, current: str | None, now: datetime, only: int | None = None
) -> int:
    """Mark `routine`'s waiting proposals (or just proposal `only`) made from another version
    of its file (or from a routine that is gone or invalid: `current` None) `invalidated`;
    how many."""
    return ledger.invalidate_proposals(routine, current, iso(now), EDITED, only)


def note(ledger: ProposalStore, proposal_id: int, why: str) -> None:
    """Say on a waiting proposal why it still waits (auto_approve declined)."""
    ledger.note_proposal(proposal_id, why[:500])


def claim(
    ledger: ProposalStore, proposal_id: int, *, by: Decider, now: datetime, current: str
) -> tuple[Proposal | None, str | None]:
    """Approve a waiting proposal: (the proposal, None) when this process won it and must run
    it now, else (the proposal or None, why not). One conditional UPDATE decides: of two
    processes racing, exactly one sees a changed row."""
    won = ledger.claim_proposal(proposal_id, by=by.value, now=iso(now), current=current)
    p = get(ledger, proposal_id)
    if won:
        return p, None
    return p, _why_not(p, now, current)


def _why_not(p: Proposal | None, now: datetime, current: str) -> str:
    if p is None:
        return "no such proposal"
    if p.state is ProposalState.WAITING:
        if p.expires_at <= iso(now):
            return f"it expired at {p.expires_at}"
        if p.fingerprint != current:
            return f"{EDITED} (invalidated)"
        return "it could not be claimed"
    by = f" by {p.decided_by}" if p.decided_by else ""
    when = f" at {p.decided_at}" if p.decided_at else ""
    words = {
        ProposalState.RUNNING: f"it was already approved{by}{when} and is running",
        ProposalState.DONE: f"it was already approved{by}{when} and ran",
        ProposalState.DENIED: f"it was denied{when}",
        ProposalState.EXPIRED: f"it expired ({p.expires_at})",
        ProposalState.INVALIDATED: EDITED,
    }
    return words[p.state]


def finish(
    ledger: ProposalStore, proposal_id: int, *, exit_status: int | None, output: str, now: datetime
) -> None:
    """Record how an approved proposal's command went (running → done)."""
    if len(output) > OUTPUT_CAP:
        output = output[:OUTPUT_CAP] + f"\n… ({len(output) - OUTPUT_CAP:,} more characters)"
    ledger.finish_proposal(proposal_id, exit_status=exit_status, output=output, now=iso(now))


def deny(
    ledger: ProposalStore,
    proposal_id: int,
    *,
    why: str,
    now: datetime,
    by: Decider = Decider.CLI,
) -> tuple[Proposal | None, str | None]:
    """waiting → denied; (the proposal, None) or (it, why not)."""
    won = ledger.deny_proposal(proposal_id, by=by.value, why=why or None, now=iso(now))
    p = get(ledger, proposal_id)
    if won:
        return p, None
    if p is not None and p.state is ProposalState.WAITING:  # pragma: no cover - raced away
        return p, "it could not be claimed"
    return p, _why_not(p, now, p.fingerprint if p else "")


def decided_since(ledger: ProposalStore, routine: str, since: str | None) -> list[Proposal]:
    """`routine`'s proposals decided after `since` (ISO; None: all), oldest first: what its
    next run is told."""
    return [_row(r) for r in ledger.proposals_decided_since(routine, since)]


@contextmanager
def store_for(ledger: object, path: Path, *, read_only: bool = False) -> Iterator[ProposalStore]:
    """Where the proposals are: the run ledger itself, this machine's SQLite file or the
    fleet's PostgreSQL database (any machine answers a request). Only an object that keeps
    none falls back to the SQLite file at `path`, opened for the moment (`read_only`: as the
    dashboard reads); LedgerError when it cannot be opened."""
    if isinstance(ledger, ProposalStore):
        yield ledger
        return
    from routines.ledger import Ledger

    with Ledger.read_only(path) if read_only else Ledger(path) as local:
        yield local
