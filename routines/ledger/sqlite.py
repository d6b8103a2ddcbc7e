"""The ledger: one SQLite file (WAL) that is the single source of truth for every run.

Tables:
- runs: one row per run, including skipped, missed, budget and interrupted ones (zero cost).
  Columns grow by migration; rows written by older versions keep NULL in newer columns.
- claims: the run fence. (routine, slot) is UNIQUE: a slot is claimed once, ever.
- routine_state: per routine, the enabled override, the failure streak, the schedule cursor.
- run_days: the compacted history (routines/ledger/rundays.py); proposals (routines/proposals.py).
The schema and its versions are routines/ledger/migrate_sqlite.py's; the connection, its
errors and reopening are routines/ledger/sqlite_open.py's.

The tables are plain, the same as PostgreSQL's (routines/ledger/migrate_postgres.py): times
are the ISO text `iso` writes (UTC, microseconds, so they sort as text), `sqlite3 ledger.db
'SELECT * FROM runs'` reads them as they are.

Invariant: routine_state's last_* columns are written in the transaction that finishes a run,
so `list` and `status` read one row per routine and never scan runs.
Invariant: a compacted run is deleted in the transaction that adds it to its day's row
(`Ledger.compact`; tests/routines/ledger/test_ledger_compaction.py kills a compacting process to
check).

Invariant: a claim, its run row and the routine's cursor move in one transaction
(see `Ledger.claim` and tests/routines/ledger/test_ledger_fence.py).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime
from typing import Any
from zoneinfo import ZoneInfo

from routines.ledger import rundays, shared
from routines.ledger.migrate_sqlite import LEDGER_VERSION
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
from routines.ledger.sql import CLAIM_ROUTINES, RUN_ROUTINES
from routines.ledger.sql import SQLITE as Q
from routines.ledger.sqlite_open import SqliteConnection
from routines.runs import (
    ACTIVE,
    NO_LAST_RUN,
    Ended,
    Outcome,
    RunEnd,
    RunStatus,
    Strike,
    Trigger,
    is_event_slot,
)

__all__ = ["LEDGER_VERSION", "Ledger"]

COUNT_LINE_TTL_SEC = 60.0


class _Stale(Exception):
    pass


class Ledger(SqliteConnection):
    """One connection to ledger.db (sqlite_open.py: opening, errors, reopening), with the
    fence, the runs, the money, the state and the retention. Not shared across threads; open
    one per process/thread."""

    # compaction's count lines (`_lines`), cached per connection: a line computed earlier is
    # only ever older, so a stale one folds less, never too much
    _count_lines: dict[str, str]
    _count_lines_at = float("-inf")
    _count_max: int | None = None

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
        try:
            with self.transaction() as db:
                if expect_cursor is not ANY:
                    row = db.execute(Q.cursor(), (routine,)).fetchone()
                    if (row["cursor"] if row else None) != expect_cursor:
                        raise _Stale
                cur = db.execute(_INSERT_CLAIM_SQL, (routine, slot, iso(now), run_id))
                if cur.rowcount == 0:
                    raise _Stale  # claimed before
                if not is_event_slot(slot):  # an event's id is no instant: the cursor stays
                    self._advance_cursor(db, routine, slot)
                # Any other constraint (a reused run_id) is the caller's bug, not a lost race:
                # it raises rather than reading as "claimed before".
                self._insert_run(db, routine, run_id, slot, trigger, status, now, detail, owner)
        except _Stale:
            return False
        return True

    def _advance_cursor(self, db: sqlite3.Connection, routine: str, slot: str) -> None:
        db.execute(_ADVANCE_CURSOR_SQL, (routine, slot))

    def advance_cursor(self, routine: str, slot: str) -> None:
        with self.transaction() as db:
            self._advance_cursor(db, routine, slot)

    def _insert_run(
        self,
        db: sqlite3.Connection,
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
        db.execute(shared.insert_run_sql(tuple(values), "?"), tuple(values.values()))
        if status not in ACTIVE:
            _note_last(db, routine, run_id, status, None, iso(now), iso(now))

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
        with self.transaction() as db:
            self._insert_run(
                db, routine, run_id, slot, trigger, status, now, detail, owner, parent_run_id
            )

    def prune_claims(self, now: datetime, keep_max: int | None = None) -> int:
        """Forget claims older than 45 days, and each routine's beyond its newest `keep_max`
        (the cursor keeps old slots from coming back: README "Files")."""
        with self.transaction() as db:
            cur = db.execute(Q.prune_old_claims(), (iso(now - CLAIM_RETENTION),))
            pruned = cur.rowcount
            if keep_max is not None:
                for name in [r[0] for r in db.execute(CLAIM_ROUTINES)]:
                    cur = db.execute(Q.prune_claims_beyond(), (name, name, keep_max - 1))
                    pruned += cur.rowcount
            return pruned

    def is_claimed(self, routine: str, slot: str) -> bool:
        row = self._db.execute(Q.is_claimed(), (routine, slot)).fetchone()
        return row is not None

    # -- run rows -----------------------------------------------------------------------

    def start_run(self, run_id: str, *, now: datetime, worker_pid: int | None) -> None:
        with self.transaction() as db:
            db.execute(Q.start_run(), (RunStatus.RUNNING, iso(now), worker_pid, run_id))

    def finish_run(
        self, run_id: str, end: RunEnd, *, now: datetime, strike: Strike | None = None
    ) -> Ended:
        """Write a run's final columns and finished_at, and with `strike` its routine's
        failure streak (or its disabling), in one transaction; truthy if it did.

        Invariant: only an active (queued/running) row changes, so a run ends with exactly
        one final status: a second ending (an error path after `ok` was written, a daemon
        marking a run interrupted that just finished) changes nothing and returns NOT_ACTIVE
        (tests/fleet/test_ledger_contract.py::test_a_run_starts_and_finishes_with_its_fields).
        KeyError when there is no such run.
        """
        with self.transaction() as db:
            row = db.execute(Q.run_to_finish(), (run_id,)).fetchone()
            if row is None:
                raise KeyError(run_id)
            if row["status"] not in ACTIVE:
                return Ended.NOT_ACTIVE
            duration = end.duration_sec
            if duration is None and row["started_at"]:
                duration = max(0.0, (now - from_iso(row["started_at"])).total_seconds())
            db.execute(Q.finish_run(), (*shared.finish_values(end, iso(now), duration), run_id))
            if end.status not in ACTIVE and row["started_at"]:
                _note_last(
                    db, row["routine"], run_id, end.status, end.outcome, row["started_at"], iso(now)
                )
            if strike is None:
                return Ended.ENDED
            streak = db.execute(Q.failure_streak(), (row["routine"],)).fetchone()
            values, ended = shared.strike_values(end.status, streak[0] if streak else 0, strike)
            if values is not None:
                self._set_state(db, row["routine"], values)
        return ended

    def active_runs(self) -> list[ActiveRun]:
        with self._errors():
            rows = self._db.execute(Q.active_runs()).fetchall()
        return [ActiveRun(**{**dict(r), "status": RunStatus(r["status"])}) for r in rows]

    def paused_runs(self) -> list[ActiveRun]:
        """Runs that wait for a person (needs_you): no process holds them."""
        with self._errors():
            rows = self._db.execute(Q.paused_runs()).fetchall()
        return [ActiveRun(**{**dict(r), "status": RunStatus(r["status"])}) for r in rows]

    def end_pause(self, run_id: str, status: RunStatus, note: str, *, now: datetime) -> bool:
        """A paused run goes on (`resumed`) or ends (`expired`), `note` added to its detail;
        True for the one caller that moved it (tests/fleet/test_ledger_contract.py)."""
        with self.transaction() as db:
            cur = db.execute(Q.end_pause(), (status.value, note, run_id))
            if cur.rowcount != 1:
                return False
            row = db.execute(Q.run_to_finish(), (run_id,)).fetchone()
            if row["started_at"]:  # the routine's last run says how its pause ended
                _note_last(db, row["routine"], run_id, status, None, row["started_at"], iso(now))
            return True

    def run(self, run_id: str) -> RunRow | None:
        row = self._db.execute(Q.run(), (run_id,)).fetchone()
        return _row(row) if row else None

    def history(self, routine: str | None = None, limit: int = 20) -> list[RunRow]:
        """Runs newest first (all routines when `routine` is None)."""
        args = (routine,) if routine else ()
        rows = self._db.execute(Q.history(bool(routine)), (*args, limit)).fetchall()
        return [_row(r) for r in rows]

    def replies_to(self, run_ids: Sequence[str]) -> list[RunRow]:
        """The reply runs whose parent is one of `run_ids`, oldest first."""
        if not run_ids:
            return []
        rows = self._db.execute(Q.replies_to(len(run_ids)), tuple(run_ids)).fetchall()
        return [_row(r) for r in rows]

    def thread(self, run_id: str) -> list[RunRow]:
        """The conversation `run_id` belongs to (model.py `walk_thread`)."""
        return walk_thread(run_id, self.run, self.replies_to)

    def runs_between(self, start: datetime, end: datetime) -> list[RunRow]:
        """Runs of every routine that started in [start, end), newest first."""
        rows = self._db.execute(Q.runs_between(), (iso(start), iso(end))).fetchall()
        return [_row(r) for r in rows]

    def last_started_here(self, routine: str) -> str | None:
        """When `routine`'s newest finished run started (every run of this file's is here)."""
        row = self._db.execute(
            "SELECT last_started FROM routine_state WHERE routine = ?", (routine,)
        ).fetchone()
        return row[0] if row else None

    def last_runs(self) -> dict[str, LastRun]:
        """Each routine's newest finished run (not queued/running/skipped), from
        routine_state: one row per routine, however long the history."""
        rows = self._db.execute(Q.last_runs()).fetchall()
        return {r["routine"]: last_run_row(r) for r in rows}

    # -- compaction (routines/ledger/rundays.py) ---------------------------------------------

    def compact(
        self, before: datetime, zone: ZoneInfo, limit: int = 500, keep_max: int | None = None
    ) -> int:
        """Fold up to `limit` finished runs into their day rows (days in `zone`) and delete
        them, in one transaction; the number folded (0: done). A run is folded when it started
        before `before`, or before the day of its routine's `keep_max`-th newest run
        (`rundays.count_line`)."""
        with self.transaction() as db:
            rows: list[sqlite3.Row] = []
            for name, line in self._lines(db, before, zone, keep_max):
                if len(rows) >= limit:
                    break
                rows += db.execute(Q.to_fold(), (name, line, limit - len(rows))).fetchall()
            for f in rundays.fold([shared.fold_row(r) for r in rows], zone):
                db.execute(_ADD_DAY_SQL, shared.add_day_args(f, zone.key))
            db.executemany(Q.delete_runs(1), [(r["id"],) for r in rows])
        return len(rows)

    def _lines(
        self, db: sqlite3.Connection, before: datetime, zone: ZoneInfo, keep_max: int | None
    ) -> list[tuple[str, str]]:
        """(routine, the started_at its runs are folded before) for each routine."""
        line = iso(before)
        now = time.monotonic()
        names = [r[0] for r in db.execute(RUN_ROUTINES)]
        if keep_max is None:
            return [(name, line) for name in names]
        if now - self._count_lines_at > COUNT_LINE_TTL_SEC or keep_max != self._count_max:
            # Walking keep_max index entries per routine: cached for a while, as a line
            # computed earlier is only ever older (it folds less, never too much).
            self._count_lines, self._count_lines_at, self._count_max = {}, now, keep_max
            for name in names:
                nth = db.execute(Q.nth_newest_start(), (name, keep_max - 1)).fetchone()
                if nth is not None:
                    self._count_lines[name] = iso(rundays.count_line(from_iso(nth[0]), zone))
        return [(name, max(line, self._count_lines.get(name, line))) for name in names]

    def incremental_vacuum(self, pages: int) -> int:
        """Give up to `pages` free pages back to the file system; how many are still free."""
        # executescript steps the pragma to the end; execute() would free a single page.
        self._db.executescript(f"PRAGMA incremental_vacuum({int(pages)});")
        free: int = self._db.execute("PRAGMA freelist_count").fetchone()[0]
        return free

    def days(self, routine: str | None = None, limit: int = 20) -> list[DaySummary]:
        """Compacted days, newest first (all routines when `routine` is None)."""
        args = (routine,) if routine else ()
        rows = self._db.execute(Q.days(bool(routine)), (*args, limit)).fetchall()
        return [rundays.summary(r) for r in rows]

    def oldest_run_start(self) -> str | None:
        """started_at of the oldest run row still whole (an index lookup)."""
        row = self._db.execute(Q.oldest_run_start()).fetchone()
        return row[0] if row else None

    # -- money ------------------------------------------------------------------------------

    def spent_on_day(self, routine: str, day: date, zone: ZoneInfo) -> float:
        """Dollars a routine spent on `day`, a calendar day in `zone` (its own zone)."""
        start, end = day_bounds(day, zone)
        with self._errors():
            row = self._db.execute(Q.spent(), (routine, iso(start), iso(end))).fetchone()
        return float(row[0])

    def spent_today(self, routine: str, zone: ZoneInfo, now: datetime) -> float:
        return self.spent_on_day(routine, now.astimezone(zone).date(), zone)

    def spent_today_many(self, zones: Mapping[str, ZoneInfo], now: datetime) -> dict[str, float]:
        """`spent_today` of each routine in `zones` (its name, its own zone), in one query
        per distinct zone: what `list`, `status` and the dashboard show for many routines."""
        out = dict.fromkeys(zones, 0.0)
        with self._errors():
            for (start, end), names in today_bounds(zones, now).items():
                spent = dict(self._db.execute(Q.spent_by_routine(), (iso(start), iso(end))))
                out.update((n, float(spent[n])) for n in names if n in spent)
        return out

    def totals(self, start: datetime, end: datetime) -> list[dict[str, Any]]:
        """Per routine between two instants: runs, tokens and dollars, biggest spender first.

        Compacted days count when they start in [start, end): exact for days in the zone
        they were compacted in (the machine's), whatever the compaction line.
        """
        bounds = (iso(start), iso(end))
        runs = self._db.execute(Q.run_totals(), bounds).fetchall()
        days = self._db.execute(Q.day_totals(), bounds).fetchall()
        return shared.merge_totals([*runs, *days])

    def dollars_by_day(self, days: Sequence[date], zone: ZoneInfo) -> dict[date, float]:
        """Total dollars per calendar day in `zone`, for each day asked (compacted or not)."""
        out: dict[date, float] = {}
        for day in days:
            start, end = day_bounds(day, zone)
            bounds = (iso(start), iso(end))
            row = self._db.execute(Q.dollars_on(), (*bounds, *bounds)).fetchone()
            out[day] = int(row[0]) / 1e9
        return out

    # -- per-routine state ------------------------------------------------------------------

    def state(self, routine: str) -> RoutineState:
        with self._errors():
            row = self._db.execute(Q.state(), (routine,)).fetchone()
        return state_row(row) if row is not None else RoutineState(routine)

    def states(self) -> dict[str, RoutineState]:
        """Every routine's state, in one query (the daemon re-reads them after each run)."""
        with self._errors():
            rows = self._db.execute(Q.states()).fetchall()
        return {r["routine"]: state_row(r) for r in rows}

    @property
    def data_version(self) -> int:
        """Changes when another connection commits to the ledger (PRAGMA data_version)."""
        with self._errors():
            version: int = self._db.execute("PRAGMA data_version").fetchone()[0]
        return version

    def _set_state(self, db: sqlite3.Connection, routine: str, values: dict[str, object]) -> None:
        """Set columns of routine_state (creating the row); booleans stored as 0/1."""
        db.execute(
            shared.set_state_sql(tuple(values), "?", "?"),
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
        schedule `fingerprint`."""
        with self.transaction() as db:
            row = db.execute(Q.cursor(), (routine,)).fetchone()
            stored = row["cursor"] if row else None
            self._set_state(
                db,
                routine,
                shared.enable_values(
                    stored,
                    file_enabled=file_enabled,
                    file_identity=file_identity,
                    cursor=cursor,
                    fingerprint=fingerprint,
                ),
            )

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
        with self.transaction() as db:
            self._set_state(db, routine, values)

    def rebind_override(self, routine: str, was: str | None, now: str) -> bool:
        """The person edited the file an override is bound to (`was`): bind it to the edited
        file (`now`). `was` None: an override from before the binding, bound now to the file
        in force. False when the override is bound to another file, or there is none."""
        with self.transaction() as db:
            return db.execute(Q.rebind_override(), (now, routine, was or "")).rowcount > 0

    def clear_override(self, routine: str) -> None:
        """The file is gone (`remove`): whatever file appears under the name next starts
        from what it says."""
        with self.transaction() as db:
            self._set_state(db, routine, shared.CLEARED)

    def set_failure_streak(self, routine: str, streak: int) -> None:
        with self.transaction() as db:
            self._set_state(db, routine, {"failure_streak": streak})

    def set_cursor(self, routine: str, cursor: str | None, fingerprint: str | None = None) -> None:
        """Reset the cursor, anywhere, even back: for a new or edited schedule (it owes nothing
        from before; `fingerprint` is the new schedule's), or a clock that was wrong."""
        values = shared.cursor_values(cursor, fingerprint)
        with self.transaction() as db:
            self._set_state(db, routine, values)


def _note_last(
    db: sqlite3.Connection,
    routine: str,
    run_id: str,
    status: RunStatus,
    outcome: Outcome | None,
    started: str,
    finished: str,
) -> None:
    """Make this run the routine's last run unless a newer one is there already."""
    if status in NO_LAST_RUN:
        return
    db.execute(_NOTE_LAST_SQL, (routine, run_id, status, outcome, started, finished))


_NOTE_LAST_SQL = shared.note_last_sql("?")
_ADVANCE_CURSOR_SQL = shared.advance_cursor_sql("?")


_ADD_DAY_SQL = Q.add_day()
_INSERT_CLAIM_SQL = Q.insert_claim(("routine", "slot", "claimed_at", "run_id"))


def _row(row: sqlite3.Row) -> RunRow:
    return run_row(dict(row))
