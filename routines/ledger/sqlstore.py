"""The SQL ledger: every query and every rule of the ledger contract (`api.Store`), written once
over the two databases. routines/ledger/sqlite.py's `Ledger` (SQLite, one machine) and
routines/ledger/postgres.py's `PgLedger` (PostgreSQL, a fleet) are this class on a connection;
the memory store (routines/ledger/memory.py) is the reference it is tested against
(tests/fleet/test_ledger_contract.py runs one suite on the three).

What a backend supplies, and nothing else:
- `Q`, its `sql.Dialect`: the placeholder, the row locks and the SKIP LOCKED a fold takes;
- `transaction()`, one transaction on a cursor-like object (`Tx`), and `_read`, one query's
  rows; both translate the database's errors once (routines/ledger/faults.py, through
  sqlite_open.py and postgres_open.py);
- the fleet's own part, as hooks that are no-ops on one machine: the columns a run and a
  claim carry (`_own`: the machine), the lease a queued run takes (`_run_opened`,
  `_run_ended`, `_leased`), which active runs are this machine's (`_mine`), and the row lock
  a claim takes first (`_lock_routine`).

Invariant: a claim, its run row and the routine's cursor move in one transaction (`claim`;
tests/routines/ledger/test_ledger_fence.py, and on PostgreSQL the fleet's
tests/fleet/test_ledger_contract.py::test_two_machines_claiming_one_routine_at_once_one_wins_each_round).
Invariant: a compacted run is deleted in the transaction that adds it to its day's row
(`compact`; tests/routines/ledger/test_ledger_compaction.py kills a compacting process to check).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, date, datetime
from typing import Any, ClassVar, Protocol
from zoneinfo import ZoneInfo

from routines.ledger import rundays, shared
from routines.ledger.model import (
    ANY,
    CLAIM_RETENTION,
    ActiveRun,
    LastRun,
    RoutineState,
    RunRow,
    _Any,
    day_bounds,
    last_run_row,
    run_row,
    state_row,
    today_bounds,
    walk_thread,
)
from routines.ledger.rundays import DaySummary
from routines.ledger.shared import from_iso, iso
from routines.ledger.sql import CLAIM_ROUTINES, RUN_ROUTINES, Dialect
from routines.ledger.sqlrequests import SqlRequests
from routines.runs import ACTIVE, Ended, RunEnd, RunStatus, Strike, Trigger, is_event_slot

__all__ = ["COUNT_LINE_TTL_SEC", "Result", "SqlLedger", "Tx"]

COUNT_LINE_TTL_SEC = 60.0


class Result(Protocol):
    """What an executed statement answers: sqlite3's Cursor or psycopg's."""

    @property
    def rowcount(self) -> int: ...
    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...


class Tx(Protocol):
    """A transaction's handle: sqlite3's Connection or psycopg's Cursor (both `execute`)."""

    def execute(self, sql: str, params: Sequence[Any] = ..., /) -> Any: ...


class _Stale(Exception):
    pass


class SqlLedger(SqlRequests):
    """The ledger's queries over one connection, for one thread. Rows are read by column name
    (sqlite3.Row and psycopg's dict rows alike). A run's requests for a person and a paused
    run's conversation are `SqlRequests`'s (routines/ledger/sqlrequests.py)."""

    Q: ClassVar[Dialect]

    # compaction's count lines (`_lines`), cached per connection: a line computed earlier is
    # only ever older, so a stale one folds less, never too much
    _count_lines: dict[str, str]
    _count_lines_at = float("-inf")
    _count_max: int | None = None

    # -- what a backend supplies --------------------------------------------------------

    def transaction(self) -> AbstractContextManager[Any]:
        raise NotImplementedError

    def _read(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        raise NotImplementedError

    def _own(self) -> dict[str, object]:
        """Columns a claim and a run row carry besides the contract's (a fleet's machine)."""
        return {}

    def _mine(self) -> tuple[str, tuple[object, ...]]:
        """The WHERE clause (and its values) that keeps `active_runs` to this machine's."""
        return "", ()

    def _lock_routine(self, tx: Tx, routine: str) -> None:
        """Before a claim: make sure the routine's state row exists, so the locking read
        that follows serialises every claim of it (SQLite's BEGIN IMMEDIATE holds the file)."""

    def _run_opened(self, tx: Tx, routine: str, run_id: str) -> None:
        """A queued or running row was written (a fleet leases it)."""

    def _run_ended(self, tx: Tx, run_id: str) -> None:
        """A run ended (a fleet drops its lease)."""

    def _leased(self, run_id: str, status: RunStatus, before: float) -> None:
        """After the commit of a row written active: a fleet tells its lease's start."""

    def _lease_clock(self) -> float:
        return 0.0

    # -- the run fence --------------------------------------------------------------------

    def claim(
        self,
        routine: str,
        slot: str,
        *,
        run_id: str,
        trigger: Trigger,
        status: RunStatus,
        now: datetime,
        detail: str = "",
        owner: tuple[int, float] | None = None,
        expect_cursor: str | _Any | None = ANY,
    ) -> bool:
        """Claim (routine, slot) and record its run row and cursor, all or nothing.

        Returns False, changing nothing, when the slot was claimed before (by anyone, ever),
        or when `expect_cursor` is given and the routine's cursor is no longer that value
        (another process acted since the caller planned: plan again).
        `status` is the row's first status: queued/running for a run that will start,
        skipped/missed for a slot recorded without running.
        """
        before = self._lease_clock()
        values: dict[str, object] = {
            "routine": routine,
            "slot": slot,
            "claimed_at": iso(now),
            "run_id": run_id,
        }
        values |= self._own()
        try:
            with self.transaction() as tx:
                self._lock_routine(tx, routine)
                if expect_cursor is not ANY:
                    row = tx.execute(self.Q.cursor(), (routine,)).fetchone()
                    if (row["cursor"] if row else None) != expect_cursor:
                        raise _Stale
                cur = tx.execute(self.Q.insert_claim(tuple(values)), tuple(values.values()))
                if cur.rowcount == 0:
                    raise _Stale  # claimed before, by any machine
                if not is_event_slot(slot):  # an event's id is no instant: the cursor stays
                    tx.execute(self.Q.advance_cursor(), (routine, slot))
                # Any other constraint (a reused run_id) is the caller's bug, not a lost race:
                # it raises rather than reading as "claimed before".
                self._insert_run(tx, routine, run_id, slot, trigger, status, now, detail, owner)
        except _Stale:
            return False
        self._leased(run_id, status, before)
        return True

    def advance_cursor(self, routine: str, slot: str) -> None:
        with self.transaction() as tx:
            tx.execute(self.Q.advance_cursor(), (routine, slot))

    def _insert_run(
        self,
        tx: Tx,
        routine: str,
        run_id: str,
        slot: str | None,
        trigger: Trigger,
        status: RunStatus,
        now: datetime,
        detail: str,
        owner: tuple[int, float] | None,
        parent_run_id: str | None = None,
    ) -> None:
        values = shared.new_run(
            run_id=run_id,
            routine=routine,
            slot=slot,
            trigger=trigger,
            status=status,
            started=iso(now),
            detail=detail,
            owner=owner,
            parent_run_id=parent_run_id,
        )
        self.insert_run_row(tx, values | self._own())
        if status in ACTIVE:
            self._run_opened(tx, routine, run_id)
        else:
            self.note_last(tx, routine, run_id, status, None, iso(now), iso(now))

    def insert_run_row(self, tx: Tx, values: Mapping[str, object], *, once: bool = False) -> int:
        """Insert one run row of `values` (column: value; the `shared.ZERO_COLUMNS` are zero
        unless given) in the transaction `tx`; `once`: nothing when its run id is there
        already (`fleet join` copies a history so). How many rows it wrote."""
        sql = self.Q.insert_run(tuple(values), once=once)
        cur = tx.execute(sql, shared.state_params(dict(values)))
        return int(cur.rowcount)

    def note_last(
        self,
        tx: Tx,
        routine: str,
        run_id: str,
        status: RunStatus | str,
        outcome: object,
        started: str,
        finished: str,
    ) -> None:
        """Make this run the routine's last run unless a newer one is there already."""
        args = shared.note_last_args(routine, run_id, status, outcome, started, finished)
        if args is not None:
            tx.execute(self.Q.note_last(), args)

    def record_run(
        self,
        routine: str,
        *,
        run_id: str,
        trigger: Trigger,
        status: RunStatus,
        now: datetime,
        slot: str | None = None,
        detail: str = "",
        owner: tuple[int, float] | None = None,
        parent_run_id: str | None = None,
    ) -> None:
        """A run row without a claim: manual runs and replies (`parent_run_id`: the run a
        reply continues), and refusals recorded for the history."""
        before = self._lease_clock()
        with self.transaction() as tx:
            self._insert_run(
                tx, routine, run_id, slot, trigger, status, now, detail, owner, parent_run_id
            )
        self._leased(run_id, status, before)

    def prune_claims(self, now: datetime, keep_max: int | None = None) -> int:
        """Forget claims older than 45 days, and each routine's beyond its newest `keep_max`
        (the cursor keeps old slots from coming back: README "Files")."""
        with self.transaction() as tx:
            pruned = int(
                tx.execute(self.Q.prune_old_claims(), (iso(now - CLAIM_RETENTION),)).rowcount
            )
            if keep_max is not None:
                for name in [r["r"] for r in tx.execute(CLAIM_ROUTINES, ()).fetchall()]:
                    cur = tx.execute(self.Q.prune_claims_beyond(), (name, name, keep_max - 1))
                    pruned += cur.rowcount
            return pruned

    def is_claimed(self, routine: str, slot: str) -> bool:
        return bool(self._read(self.Q.is_claimed(), (routine, slot)))

    # -- run rows -----------------------------------------------------------------------

    def start_run(self, run_id: str, *, now: datetime, worker_pid: int | None) -> None:
        with self.transaction() as tx:
            tx.execute(self.Q.start_run(), (RunStatus.RUNNING.value, iso(now), worker_pid, run_id))

    def finish_run(
        self, run_id: str, end: RunEnd, *, now: datetime, strike: Strike | None = None
    ) -> Ended:
        """Write a run's final columns and finished_at, and with `strike` its routine's
        failure streak (or its disabling), in one transaction.

        Invariant: only an active (queued/running) row changes (`shared.may_finish`), so a
        run ends with exactly one final status: a second ending (an error path after `ok` was
        written, a daemon marking a run interrupted that just finished) changes nothing and
        returns NOT_ACTIVE
        (tests/fleet/test_ledger_contract.py::test_a_run_starts_and_finishes_with_its_fields).
        KeyError when there is no such run.
        """
        with self.transaction() as tx:
            row = tx.execute(self.Q.run_to_finish(), (run_id,)).fetchone()
            if row is None:
                raise KeyError(run_id)
            if not shared.may_finish(
                row["status"], row["detail"], row["finished_at"], end.status, now
            ):
                return Ended.NOT_ACTIVE
            duration = end.duration_sec
            if duration is None and row["started_at"]:
                duration = max(0.0, (now - from_iso(row["started_at"])).total_seconds())
            finish = (*shared.finish_values(end, iso(now), duration), run_id)
            tx.execute(self.Q.finish_run(), finish)
            if end.status not in ACTIVE:
                self._run_ended(tx, run_id)
                if row["started_at"]:
                    self.note_last(
                        tx,
                        row["routine"],
                        run_id,
                        end.status,
                        end.outcome,
                        row["started_at"],
                        iso(now),
                    )
            if strike is None:
                return Ended.ENDED
            streak = tx.execute(self.Q.failure_streak(), (row["routine"],)).fetchone()
            values, ended = shared.strike_values(
                end.status, streak["failure_streak"] if streak else 0, strike
            )
            if values is not None:
                self._set_state(tx, row["routine"], values)
        return ended

    def active_runs(self) -> list[ActiveRun]:
        """Queued and running runs (on a fleet, this machine's: another machine's pids mean
        nothing here, those end through their leases)."""
        where, args = self._mine()
        return _active(self._read(self.Q.active_runs(where), args))

    def paused_runs(self) -> list[ActiveRun]:
        """Runs that wait for a person (needs_you): no process holds them, and on a fleet any
        machine may resume one."""
        return _active(self._read(self.Q.paused_runs()))

    def end_pause(self, run_id: str, status: RunStatus, note: str, *, now: datetime) -> bool:
        """A paused run goes on (`resumed`) or ends (`expired`), `note` added to its detail;
        True for the one caller that moved it (tests/fleet/test_ledger_contract.py)."""
        with self.transaction() as tx:
            if tx.execute(self.Q.end_pause(), (status.value, note, run_id)).rowcount != 1:
                return False
            row = tx.execute(self.Q.run_to_finish(), (run_id,)).fetchone()
            if row is not None and row["started_at"]:  # how its pause ended is its last run
                self.note_last(
                    tx, row["routine"], run_id, status, None, row["started_at"], iso(now)
                )
            return True

    def run(self, run_id: str) -> RunRow | None:
        rows = self._read(self.Q.run(), (run_id,))
        return _row(rows[0]) if rows else None

    def history(self, routine: str | None = None, limit: int = 20) -> list[RunRow]:
        """Runs newest first (all routines when `routine` is None)."""
        args = (routine,) if routine else ()
        return [_row(r) for r in self._read(self.Q.history(bool(routine)), (*args, limit))]

    def replies_to(self, run_ids: Sequence[str]) -> list[RunRow]:
        """The reply runs whose parent is one of `run_ids`, oldest first."""
        if not run_ids:
            return []
        return [_row(r) for r in self._read(self.Q.replies_to(len(run_ids)), tuple(run_ids))]

    def thread(self, run_id: str) -> list[RunRow]:
        """The conversation `run_id` belongs to (model.py `walk_thread`)."""
        return walk_thread(run_id, self.run, self.replies_to)

    def runs_between(self, start: datetime, end: datetime) -> list[RunRow]:
        """Runs of every routine that started in [start, end), newest first."""
        return [_row(r) for r in self._read(self.Q.runs_between(), (iso(start), iso(end)))]

    def last_started_here(self, routine: str) -> str | None:
        """When `routine`'s newest finished run started (every run of one machine's ledger
        is its own; a fleet's `PgLedger` asks for this machine's)."""
        rows = self._read(self.Q.last_started(), (routine,))
        return rows[0]["last_started"] if rows else None

    def last_runs(self) -> dict[str, LastRun]:
        """Each routine's newest finished run (not queued/running/skipped), from
        routine_state: one row per routine, however long the history."""
        return {r["routine"]: last_run_row(r) for r in self._read(self.Q.last_runs())}

    # -- compaction (routines/ledger/rundays.py) ---------------------------------------------

    def compact(
        self, before: datetime, zone: ZoneInfo, limit: int = 500, keep_max: int | None = None
    ) -> int:
        """Fold up to `limit` finished runs into their day rows (days in `zone`) and delete
        them, in one transaction; the number folded (0: done). A run is folded when it started
        before `before`, or before the day of its routine's `keep_max`-th newest run
        (`rundays.count_line`). On PostgreSQL, SKIP LOCKED lets two machines compact at once,
        each run folded once."""
        with self.transaction() as tx:
            rows: list[Any] = []
            for name, line in self._lines(tx, before, zone, keep_max):
                if len(rows) >= limit:
                    break
                rows += tx.execute(self.Q.to_fold(), (name, line, limit - len(rows))).fetchall()
            for f in rundays.fold([shared.fold_row(r) for r in rows], zone):
                tx.execute(self.Q.add_day(), shared.add_day_args(f, zone.key))
            if rows:
                tx.execute(self.Q.delete_runs(len(rows)), [r["id"] for r in rows])
        return len(rows)

    def _lines(
        self, tx: Tx, before: datetime, zone: ZoneInfo, keep_max: int | None
    ) -> list[tuple[str, str]]:
        """(routine, the started_at its runs are folded before) for each routine."""
        line = iso(before)
        now = time.monotonic()
        names = [r["r"] for r in tx.execute(RUN_ROUTINES, ()).fetchall()]
        if keep_max is None:
            return [(name, line) for name in names]
        if now - self._count_lines_at > COUNT_LINE_TTL_SEC or keep_max != self._count_max:
            # Walking keep_max index entries per routine: cached for a while, as a line
            # computed earlier is only ever older (it folds less, never too much).
            self._count_lines, self._count_lines_at, self._count_max = {}, now, keep_max
            for name in names:
                nth = tx.execute(self.Q.nth_newest_start(), (name, keep_max - 1)).fetchone()
                if nth is not None:
                    start = from_iso(nth["started_at"])
                    self._count_lines[name] = iso(rundays.count_line(start, zone))
        return [(name, max(line, self._count_lines.get(name, line))) for name in names]

    def days(self, routine: str | None = None, limit: int = 20) -> list[DaySummary]:
        """Compacted days, newest first (all routines when `routine` is None)."""
        args = (routine,) if routine else ()
        return [rundays.summary(r) for r in self._read(self.Q.days(bool(routine)), (*args, limit))]

    def oldest_run_start(self) -> str | None:
        """started_at of the oldest run row still whole (an index lookup)."""
        rows = self._read(self.Q.oldest_run_start())
        return rows[0]["m"] if rows else None

    # -- money ------------------------------------------------------------------------------

    def spent_on_day(self, routine: str, day: date, zone: ZoneInfo) -> float:
        """Dollars a routine spent on `day`, a calendar day in `zone` (its own zone); on a
        fleet, every machine's (the fleet-wide budget)."""
        start, end = day_bounds(day, zone)
        return float(self._read(self.Q.spent(), (routine, iso(start), iso(end)))[0]["s"])

    def spent_today(self, routine: str, zone: ZoneInfo, now: datetime) -> float:
        return self.spent_on_day(routine, now.astimezone(zone).date(), zone)

    def spent_today_many(self, zones: Mapping[str, ZoneInfo], now: datetime) -> dict[str, float]:
        """`spent_today` of each routine in `zones` (its name, its own zone), in one query
        per distinct zone: what `list`, `status` and the dashboard show for many routines."""
        out = dict.fromkeys(zones, 0.0)
        for (start, end), names in today_bounds(zones, now).items():
            rows = self._read(self.Q.spent_by_routine(), (iso(start), iso(end)))
            spent = {r["routine"]: r["s"] for r in rows}
            out.update((n, float(spent[n])) for n in names if n in spent)
        return out

    def totals(self, start: datetime, end: datetime) -> list[dict[str, Any]]:
        """Per routine between two instants: runs, tokens and dollars, biggest spender first.

        Compacted days count when they start in [start, end): exact for days in the zone
        they were compacted in (the machine's), whatever the compaction line.
        """
        bounds = (iso(start), iso(end))
        runs = self._read(self.Q.run_totals(), bounds)
        return shared.merge_totals([*runs, *self._read(self.Q.day_totals(), bounds)])

    def dollars_by_day(self, days: Sequence[date], zone: ZoneInfo) -> dict[date, float]:
        """Total dollars per calendar day in `zone`, for each day asked (compacted or not)."""
        out: dict[date, float] = {}
        for day in days:
            start, end = day_bounds(day, zone)
            bounds = (iso(start), iso(end))
            out[day] = int(self._read(self.Q.dollars_on(), (*bounds, *bounds))[0]["nano"]) / 1e9
        return out

    # -- per-routine state ------------------------------------------------------------------

    def state(self, routine: str) -> RoutineState:
        rows = self._read(self.Q.state(), (routine,))
        return state_row(rows[0]) if rows else RoutineState(routine)

    def states(self) -> dict[str, RoutineState]:
        """Every routine's state, in one query (the daemon re-reads them after each run)."""
        return {r["routine"]: state_row(r) for r in self._read(self.Q.states())}

    def _set_state(self, tx: Tx, routine: str, values: dict[str, object]) -> None:
        """Set columns of routine_state (creating the row); booleans stored as 0/1."""
        tx.execute(
            shared.set_state_sql(tuple(values), self.Q.mark, self.Q.mark),
            (routine, *shared.state_params(values), iso(datetime.now(UTC))),
        )

    def enable(
        self,
        routine: str,
        *,
        file_enabled: bool,
        file_identity: str,
        cursor: str,
        fingerprint: str,
    ) -> None:
        """The one rule for turning a routine on (`enable`, the dashboard, the daemon's control
        command): the override is stored with the file's `enabled` at this moment and the
        file it is for (see RoutineState.enabled), the failure streak is cleared, and it owes
        nothing from before: the cursor moves to `cursor` (now), never backwards, for the
        schedule `fingerprint`. Under the routine's row lock on a fleet (a claim may race)."""
        with self.transaction() as tx:
            row = tx.execute(self.Q.cursor(), (routine,)).fetchone()
            values = shared.enable_values(
                row["cursor"] if row else None,
                file_enabled=file_enabled,
                file_identity=file_identity,
                cursor=cursor,
                fingerprint=fingerprint,
            )
            self._set_state(tx, routine, values)

    def disable(
        self,
        routine: str,
        *,
        file_enabled: bool,
        file_identity: str,
        reason: str | None = None,
        failure_streak: int | None = None,
    ) -> None:
        """Turn a routine off: by `disable` (no reason), a new draft (streak 0) or three
        strikes (`reason`, the streak that reached it). The override is stored with the
        file's `enabled` at this moment, so editing the file's `enabled` later wins."""
        values = shared.disable_values(
            file_enabled=file_enabled,
            file_identity=file_identity,
            reason=reason,
            failure_streak=failure_streak,
        )
        with self.transaction() as tx:
            self._set_state(tx, routine, values)

    def rebind_override(self, routine: str, was: str | None, now: str) -> bool:
        """The person edited the file an override is bound to (`was`): bind it to the edited
        file (`now`). `was` None: an override from before the binding, bound now to the file
        in force. False when the override is bound to another file, or there is none."""
        with self.transaction() as tx:
            return int(tx.execute(self.Q.rebind_override(), (now, routine, was or "")).rowcount) > 0

    def clear_override(self, routine: str) -> None:
        """The file is gone (`remove`): whatever file appears under the name next starts
        from what it says."""
        with self.transaction() as tx:
            self._set_state(tx, routine, shared.CLEARED)

    def set_failure_streak(self, routine: str, streak: int) -> None:
        with self.transaction() as tx:
            self._set_state(tx, routine, {"failure_streak": streak})

    def set_cursor(self, routine: str, cursor: str | None, fingerprint: str | None = None) -> None:
        """Reset the cursor, anywhere, even back: for a new or edited schedule (it owes nothing
        from before; `fingerprint` is the new schedule's), or a clock that was wrong."""
        values = shared.cursor_values(cursor, fingerprint)
        with self.transaction() as tx:
            self._set_state(tx, routine, values)


def _row(r: Any) -> RunRow:
    """A row of `sql.ROW_FIELDS` (and any extra column a query adds before them) as a RunRow."""
    return run_row({k: r[k] for k in RunRow.__dataclass_fields__})


def _active(rows: list[Any]) -> list[ActiveRun]:
    return [ActiveRun(**{**dict(r), "status": RunStatus(r["status"])}) for r in rows]
