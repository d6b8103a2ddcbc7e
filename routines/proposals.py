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
import sqlite3
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from routines.ledger import iso

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


def _row(row: sqlite3.Row) -> Proposal:
    d = dict(row)
    d["state"] = ProposalState(d["state"])
    return Proposal(**d)


@runtime_checkable
class ProposalStore(Protocol):
    """Where a machine keeps its proposals: its own SQLite ledger (routines/ledger/sqlite.py
    `Ledger`; a fleet shares none, so PostgreSQL's `PgLedger` is not one). Reads go through
    `reader`, every write through `transaction` (BEGIN IMMEDIATE ... COMMIT)."""

    def reader(self) -> sqlite3.Connection: ...
    def transaction(self) -> AbstractContextManager[sqlite3.Connection]: ...


def _db(ledger: ProposalStore) -> sqlite3.Connection:
    return ledger.reader()


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
    with ledger.transaction() as db:
        cur = db.execute(
            "INSERT INTO proposals (routine, run_id, action, command, input, summary, "
            "fingerprint, created_at, expires_at, state) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (
                routine,
                run_id,
                action,
                command,
                input,
                summary,
                fingerprint,
                iso(now),
                iso(now + timedelta(seconds=expires_after)),
                ProposalState.WAITING.value,
            ),
        )
        assert cur.lastrowid is not None
        return cur.lastrowid


def recorded_for_run(ledger: ProposalStore, run_id: str) -> int:
    """How many proposals of `run_id` are recorded."""
    n: int = (
        _db(ledger)
        .execute("SELECT COUNT(*) FROM proposals WHERE run_id = ?", (run_id,))
        .fetchone()[0]
    )
    return n


def of_run(ledger: ProposalStore, run_id: str) -> list[Proposal]:
    """`run_id`'s proposals, oldest first: a paused run's request is the last."""
    rows = (
        _db(ledger).execute("SELECT * FROM proposals WHERE run_id = ? ORDER BY id", (run_id,))
    ).fetchall()
    return [_row(r) for r in rows]


def get(ledger: ProposalStore, proposal_id: int) -> Proposal | None:
    row = _db(ledger).execute("SELECT * FROM proposals WHERE id = ?", (proposal_id,)).fetchone()
    return _row(row) if row else None


def waiting(ledger: ProposalStore, routine: str | None = None) -> list[Proposal]:
    """Waiting proposals, newest first (call `expire` and `invalidate` before, to be current)."""
    sql = "SELECT * FROM proposals WHERE state = 'waiting'"
    args: tuple[Any, ...] = ()
    if routine is not None:
        sql, args = sql + " AND routine = ?", (routine,)
    rows = _db(ledger).execute(sql + " ORDER BY created_at DESC, id DESC", args).fetchall()
    return [_row(r) for r in rows]


def for_routine(ledger: ProposalStore, routine: str, limit: int = 20) -> list[Proposal]:
    """`routine`'s proposals in any state, newest first (for `history`)."""
    rows = (
        _db(ledger)
        .execute(
            "SELECT * FROM proposals WHERE routine = ? ORDER BY created_at DESC, id DESC LIMIT ?",
            (routine, limit),
        )
        .fetchall()
    )
    return [_row(r) for r in rows]


def waiting_count(ledger: ProposalStore, now: datetime) -> int:
    """Waiting and not yet expired (a read: for waybar and status, which never write)."""
    row = (
        _db(ledger)
        .execute(
            "SELECT COUNT(*) FROM proposals WHERE state = 'waiting' AND expires_at > ?", (iso(now),)
        )
        .fetchone()
    )
    return int(row[0])


def prune(ledger: ProposalStore, before: datetime, limit: int = 200) -> int:
    """Delete up to `limit` decided proposals (done, denied, expired, invalidated) whose last
    change is older than `before`; how many. Waiting and running ones are never deleted: a
    waiting one expires first, and is deleted only once that is old too."""
    with ledger.transaction() as db:
        cur = db.execute(
            "DELETE FROM proposals WHERE id IN (SELECT id FROM proposals "
            "WHERE state IN ('done', 'denied', 'expired', 'invalidated') "
            "AND COALESCE(finished_at, decided_at, created_at) < ? LIMIT ?)",
            (iso(before), limit),
        )
        return cur.rowcount


def expire(ledger: ProposalStore, now: datetime) -> int:
    """Mark waiting proposals past their expiry `expired`; how many."""
    with ledger.transaction() as db:
        cur = db.execute(
            "UPDATE proposals SET state = 'expired', decided_by = 'runtime', decided_at = ? "
            "WHERE state = 'waiting' AND expires_at <= ?",
            (iso(now), iso(now)),
        )
        return cur.rowcount


def invalidate(
    ledger: ProposalStore, routine: str, current: str | None, now: datetime, only: int | None = None
) -> int:
    """Mark `routine`'s waiting proposals (or just proposal `only`) made from another version
    of its file (or from a routine that is gone or invalid: `current` None) `invalidated`;
    how many."""
    with ledger.transaction() as db:
        cur = db.execute(
            "UPDATE proposals SET state = 'invalidated', decided_by = 'runtime', "
            "decided_at = ?, why = 'the routine file was edited since it was proposed' "
            "WHERE state = 'waiting' AND routine = ? AND (? IS NULL OR fingerprint != ?) "
            "AND (? IS NULL OR id = ?)",
            (iso(now), routine, current, current, only, only),
        )
        return cur.rowcount


def note(ledger: ProposalStore, proposal_id: int, why: str) -> None:
    """Say on a waiting proposal why it still waits (auto_approve declined)."""
    with ledger.transaction() as db:
        db.execute(
            "UPDATE proposals SET why = ? WHERE id = ? AND state = 'waiting'",
            (why[:500], proposal_id),
        )


def claim(
    ledger: ProposalStore, proposal_id: int, *, by: Decider, now: datetime, current: str
) -> tuple[Proposal | None, str | None]:
    """Approve a waiting proposal: (the proposal, None) when this process won it and must run
    it now, else (the proposal or None, why not). One conditional UPDATE decides: of two
    processes racing, exactly one sees a changed row."""
    with ledger.transaction() as db:
        cur = db.execute(
            "UPDATE proposals SET state = 'running', decided_by = ?, decided_at = ? "
            "WHERE id = ? AND state = 'waiting' AND expires_at > ? AND fingerprint = ?",
            (by.value, iso(now), proposal_id, iso(now), current),
        )
        won = cur.rowcount == 1
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
            return "the routine file was edited since it was proposed (invalidated)"
        return "it could not be claimed"
    by = f" by {p.decided_by}" if p.decided_by else ""
    when = f" at {p.decided_at}" if p.decided_at else ""
    words = {
        ProposalState.RUNNING: f"it was already approved{by}{when} and is running",
        ProposalState.DONE: f"it was already approved{by}{when} and ran",
        ProposalState.DENIED: f"it was denied{when}",
        ProposalState.EXPIRED: f"it expired ({p.expires_at})",
        ProposalState.INVALIDATED: "the routine file was edited since it was proposed",
    }
    return words[p.state]


def finish(
    ledger: ProposalStore, proposal_id: int, *, exit_status: int | None, output: str, now: datetime
) -> None:
    """Record how an approved proposal's command went (running → done)."""
    if len(output) > OUTPUT_CAP:
        output = output[:OUTPUT_CAP] + f"\n… ({len(output) - OUTPUT_CAP:,} more characters)"
    with ledger.transaction() as db:
        db.execute(
            "UPDATE proposals SET state = 'done', exit_status = ?, output = ?, finished_at = ? "
            "WHERE id = ? AND state = 'running'",
            (exit_status, output, iso(now), proposal_id),
        )


def deny(
    ledger: ProposalStore, proposal_id: int, *, why: str, now: datetime
) -> tuple[Proposal | None, str | None]:
    """waiting → denied; (the proposal, None) or (it, why not)."""
    with ledger.transaction() as db:
        cur = db.execute(
            "UPDATE proposals SET state = 'denied', decided_by = 'cli', decided_at = ?, why = ? "
            "WHERE id = ? AND state = 'waiting'",
            (iso(now), why or None, proposal_id),
        )
        won = cur.rowcount == 1
    p = get(ledger, proposal_id)
    if won:
        return p, None
    if p is not None and p.state is ProposalState.WAITING:  # pragma: no cover - raced away
        return p, "it could not be claimed"
    return p, _why_not(p, now, p.fingerprint if p else "")


def decided_since(ledger: ProposalStore, routine: str, since: str | None) -> list[Proposal]:
    """`routine`'s proposals decided after `since` (ISO; None: all), oldest first: what its
    next run is told."""
    rows = (
        _db(ledger)
        .execute(
            "SELECT * FROM proposals WHERE routine = ? AND state != 'waiting' "
            "AND state != 'running' AND decided_at IS NOT NULL AND (? IS NULL OR decided_at > ?) "
            "ORDER BY decided_at, id LIMIT 50",
            (routine, since, since),
        )
        .fetchall()
    )
    return [_row(r) for r in rows]


@contextmanager
def store_for(ledger: object, path: Path, *, read_only: bool = False) -> Iterator[ProposalStore]:
    """Where this machine keeps its proposals: the run ledger itself when it is this
    machine's SQLite file; on a fleet (which shares none) the file at `path`, opened for the
    moment (`read_only`: as the dashboard reads). LedgerError when it cannot be opened."""
    if isinstance(ledger, ProposalStore):
        yield ledger
        return
    from routines.ledger import Ledger

    with Ledger.read_only(path) if read_only else Ledger(path) as local:
        yield local
