"""The fleet's ledger: the same contract as routines/ledger/sqlite.py's SQLite `Ledger`, in
PostgreSQL (psycopg 3), shared by one person's machines. Imported only when config.toml has
`[fleet]`.

Tables (one per concern; schema and migrations in routines/ledger/migrate_postgres.py, beside
SQLite's):
- runs, claims, routine_state, run_days: as in SQLite, plus the machine that ran each run.
- leases: one row per queued or running run, renewed by its machine's daemon
  (`renew`); a lease that lapsed marks its run `interrupted` (`expire_leases`), never replayed.
- machines: each machine's heartbeat, version and whether it left the fleet.
- definitions: each routine's definition fingerprint per machine (divergence).
The last three are routines/ledger/fleet.py's, a mixin of `PgLedger`.

Time: run rows keep the machine's clock as ISO text, exactly as SQLite (history, budgets and
compaction read them alike). Leases and heartbeats use the server's clock (`now()`), so a
machine whose clock is off cannot make a lease look alive or dead.

Invariant: a claim, its run row, its lease and the routine's cursor move in one transaction,
under a row lock on the routine's state, so two machines planning the same routine serialise
(tests/fleet/test_ledger_contract.py::
test_two_machines_claiming_one_routine_at_once_one_wins_each_round).

The connection, its deadline and its errors are routines/ledger/postgres_open.py's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any
from zoneinfo import ZoneInfo

from routines.ledger import rundays, shared
from routines.ledger.fleet import LEASE_SEC, FleetTables, MachineInUse, MachineRow
from routines.ledger.migrate_postgres import PG_LEDGER_VERSION, note_last
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
from routines.ledger.postgres_open import Cursor, Gate, PgConnection
from routines.ledger.rundays import DaySummary
from routines.ledger.shared import from_iso, iso
from routines.ledger.sql import CLAIM_ROUTINES, RUN_ROUTINES
from routines.ledger.sql import PG as Q
from routines.runs import (
    ACTIVE,
    NO_LAST_RUN,
    Ended,
    RunEnd,
    RunStatus,
    Strike,
    Trigger,
    is_event_slot,
    sql_in,
)

__all__ = [
    "LEASE_SEC",
    "PG_LEDGER_VERSION",
    "FleetRunRow",
    "Gate",
    "MachineInUse",
    "MachineRow",
    "PgLedger",
]


_NOW_ISO = "to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"


_DATA_VERSION_SQL = (
    "SELECT md5(COALESCE((SELECT string_agg(concat_ws('/', routine, enabled_override, "
    "file_enabled_seen, file_identity, failure_streak, disabled_reason, cursor, "
    "schedule_fingerprint, "
    "last_run_id, last_status), ',' ORDER BY routine) FROM routine_state), '') || '|' || "
    "COALESCE((SELECT string_agg(run_id || '/' || machine, ',' ORDER BY run_id) FROM leases "
    "WHERE expires_at > now()), '') || '|' || "
    "COALESCE((SELECT string_agg(d.routine || '/' || d.machine || '/' || d.fingerprint, ',' "
    "ORDER BY d.routine, d.machine) FROM definitions d JOIN machines m "
    "ON m.machine = d.machine WHERE m.left_at IS NULL "
    "AND m.heartbeat > now() - make_interval(secs => %s)), '')) AS digest"
)
_ADVANCE_CURSOR_SQL = shared.advance_cursor_sql("%s")
_ADD_DAY_SQL = Q.add_day()
_INSERT_CLAIM_SQL = Q.insert_claim(("routine", "slot", "claimed_at", "run_id", "machine"))


@dataclass(frozen=True, slots=True)
class FleetRunRow:
    """A run with the machine that ran it (`history` on a fleet)."""

    row: RunRow
    machine: str


def _row(r: Mapping[str, Any]) -> RunRow:
    return run_row({k: r[k] for k in RunRow.__dataclass_fields__})


class _Stale(Exception):
    pass


class PgLedger(PgConnection, FleetTables):
    """One connection to the fleet's database, for one thread (the daemon's loop, or a CLI).

    The connection opens lazily and reopens after a failure (through `gate`), so a daemon
    starts, and keeps its control socket, while PostgreSQL is down."""

    def __init__(
        self,
        dsn: str,
        machine: str,
        *,
        gate: Gate | None = None,
        lease_sec: float = LEASE_SEC,
        connect: bool = True,
        instance: str | None = None,
        taken_after: float = 0.0,
        deadline: float | None = None,
        on_lease: Callable[[str, float, float], None] | None = None,
        lease_clock: Callable[[], float] = time.monotonic,
        connect_within: float | None = None,
    ) -> None:
        self.machine = machine
        self.lease_sec = lease_sec
        self.instance = instance  # this daemon's start (fleet.py: one daemon per name)
        self.taken_after = taken_after
        # Told (run id, before, after) on `lease_clock` for each lease a claim or a queued
        # run's row made: the fleet gives its worker a deadline from `before`
        # (supervisor/fleet/member.py LeaseBook).
        self.on_lease = on_lease
        self.lease_clock = lease_clock
        super().__init__(
            dsn, gate=gate, connect=connect, deadline=deadline, connect_within=connect_within
        )

    @property
    def data_version(self) -> int:
        """Changes when what the daemon reads each tick may have: the routines' state, the
        live leases (who runs what), or the definitions of the machines up now. A digest the
        server computes (one short row), so an idle tick reads nothing else, as SQLite's
        PRAGMA data_version lets it (tests/fleet/test_ledger_contract.py)."""
        rows = self._read(_DATA_VERSION_SQL, (self.lease_sec,))
        return int(rows[0]["digest"][:15], 16)

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
        """As `Ledger.claim`, fleet-wide: the routine's state row is locked first, so every
        machine's claims of one routine happen one after the other."""
        before = self.lease_clock()
        try:
            with self.transaction() as cur:
                cur.execute(
                    "INSERT INTO routine_state (routine) VALUES (%s) ON CONFLICT DO NOTHING",
                    (routine,),
                )
                cur.execute(Q.cursor(), (routine,))
                row = cur.fetchone()
                if expect_cursor is not ANY and (row["cursor"] if row else None) != expect_cursor:
                    raise _Stale
                cur.execute(_INSERT_CLAIM_SQL, (routine, slot, iso(now), run_id, self.machine))
                if cur.rowcount == 0:
                    raise _Stale  # claimed before, by some machine
                if not is_event_slot(slot):  # an event's id is no instant: the cursor stays
                    self._advance_cursor(cur, routine, slot)
                self._insert_run(cur, routine, run_id, slot, trigger, status, now, detail, owner)
        except _Stale:
            return False
        self._leased(run_id, status, before)
        return True

    def _leased(self, run_id: str, status: RunStatus, before: float) -> None:
        if status in ACTIVE and self.on_lease is not None:
            self.on_lease(run_id, before, self.lease_clock())

    @staticmethod
    def _advance_cursor(cur: Cursor, routine: str, slot: str) -> None:
        cur.execute(_ADVANCE_CURSOR_SQL, (routine, slot))

    def advance_cursor(self, routine: str, slot: str) -> None:
        with self.transaction() as cur:
            self._advance_cursor(cur, routine, slot)

    def _insert_run(
        self,
        cur: Cursor,
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
        values["machine"] = self.machine
        cur.execute(shared.insert_run_sql(tuple(values), "%s"), tuple(values.values()))
        if status not in ACTIVE:
            note_last(cur, routine, run_id, status, None, iso(now), iso(now))
        else:
            cur.execute(
                "INSERT INTO leases (run_id, routine, machine, instance, expires_at) "
                "VALUES (%s, %s, %s, %s, now() + make_interval(secs => %s))",
                (run_id, routine, self.machine, self.instance, self.lease_sec),
            )

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
        before = self.lease_clock()
        with self.transaction() as cur:
            self._insert_run(
                cur, routine, run_id, slot, trigger, status, now, detail, owner, parent_run_id
            )
        self._leased(run_id, status, before)

    def prune_claims(self, now: datetime, keep_max: int | None = None) -> int:
        """Forget claims older than 45 days, and each routine's beyond its newest `keep_max`
        (the cursor keeps old slots from coming back)."""
        with self.transaction() as cur:
            cur.execute(Q.prune_old_claims(), (iso(now - CLAIM_RETENTION),))
            pruned = cur.rowcount
            if keep_max is not None:
                cur.execute(CLAIM_ROUTINES)
                for name in [r["r"] for r in cur.fetchall()]:
                    cur.execute(Q.prune_claims_beyond(), (name, name, keep_max - 1))
                    pruned += cur.rowcount
            return pruned

    def is_claimed(self, routine: str, slot: str) -> bool:
        return bool(self._read(Q.is_claimed(), (routine, slot)))

    # -- run rows -----------------------------------------------------------------------

    def start_run(self, run_id: str, *, now: datetime, worker_pid: int | None) -> None:
        with self.transaction() as cur:
            cur.execute(Q.start_run(), (RunStatus.RUNNING.value, iso(now), worker_pid, run_id))

    def finish_run(
        self, run_id: str, end: RunEnd, *, now: datetime, strike: Strike | None = None
    ) -> Ended:
        """As `Ledger.finish_run`: only an active row changes (truthy if it did), its lease
        goes with it, and with `strike` its routine's streak is written in the same
        transaction. One ending more may change a row: an `interrupted` another machine wrote
        when the run's lease lapsed yields to the run's own end, kept through an outage, when
        that end came first (shared.real_end_wins). KeyError when there is no such run."""
        with self.transaction() as cur:
            cur.execute(Q.run_to_finish(), (run_id,))
            row = cur.fetchone()
            if row is None:
                raise KeyError(run_id)
            if row["status"] not in ACTIVE and not (
                end.status is not RunStatus.INTERRUPTED
                and shared.real_end_wins(row["status"], row["detail"], row["finished_at"], now)
            ):
                return Ended.NOT_ACTIVE
            duration = end.duration_sec
            if duration is None and row["started_at"]:
                duration = max(0.0, (now - from_iso(row["started_at"])).total_seconds())
            cur.execute(Q.finish_run(), (*shared.finish_values(end, iso(now), duration), run_id))
            if end.status not in ACTIVE:
                cur.execute("DELETE FROM leases WHERE run_id = %s", (run_id,))
                if row["started_at"]:
                    note_last(
                        cur,
                        row["routine"],
                        run_id,
                        end.status,
                        end.outcome,
                        row["started_at"],
                        iso(now),
                    )
            if strike is None:
                return Ended.ENDED
            cur.execute(Q.failure_streak(), (row["routine"],))
            streak = cur.fetchone()
            values, ended = shared.strike_values(
                end.status, streak["failure_streak"] if streak else 0, strike
            )
            if values is not None:
                self._set_state(cur, row["routine"], values)
        return ended

    def active_runs(self) -> list[ActiveRun]:
        """This machine's queued and running runs (another machine's pids mean nothing here:
        those end through their leases)."""
        rows = self._read(Q.active_runs(" AND machine = %s"), (self.machine,))
        return [ActiveRun(**{**r, "status": RunStatus(r["status"])}) for r in rows]

    def paused_runs(self) -> list[ActiveRun]:
        """Every machine's runs that wait for a person: any machine may resume one."""
        rows = self._read(Q.paused_runs(), ())
        return [ActiveRun(**{**r, "status": RunStatus(r["status"])}) for r in rows]

    def end_pause(self, run_id: str, status: RunStatus, note: str, *, now: datetime) -> bool:
        """As `Ledger.end_pause`."""
        with self.transaction() as cur:
            cur.execute(Q.end_pause(), (status.value, note, run_id))
            if cur.rowcount != 1:
                return False
            cur.execute(Q.run_to_finish(), (run_id,))
            row = cur.fetchone()
            if row is not None and row["started_at"]:
                note_last(cur, row["routine"], run_id, status, None, row["started_at"], iso(now))
            return True

    def last_started_here(self, routine: str) -> str | None:
        """When this machine's newest finished run of `routine` started: since then, the
        decisions on the proposals kept here are news to its next run (a fleet shares no
        proposals; a machine's proposals come from its own runs)."""
        rows = self._read(
            "SELECT started_at FROM runs WHERE routine = %s AND machine = %s "
            f"AND COALESCE(status, '') NOT IN {sql_in(NO_LAST_RUN)} "
            "ORDER BY started_at DESC LIMIT 1",
            (routine, self.machine),
        )
        return str(rows[0]["started_at"]) if rows else None

    def run(self, run_id: str) -> RunRow | None:
        rows = self._read(Q.run(), (run_id,))
        return _row(rows[0]) if rows else None

    def history(self, routine: str | None = None, limit: int = 20) -> list[RunRow]:
        return [f.row for f in self.fleet_history(routine, limit)]

    def fleet_history(self, routine: str | None = None, limit: int = 20) -> list[FleetRunRow]:
        """Runs newest first with the machine of each (all routines when `routine` is None)."""
        args = [routine] if routine else []
        rows = self._read(Q.history(bool(routine), "machine, "), (*args, limit))
        return [FleetRunRow(_row(r), r["machine"]) for r in rows]

    def replies_to(self, run_ids: Sequence[str]) -> list[RunRow]:
        """The reply runs whose parent is one of `run_ids`, oldest first."""
        if not run_ids:
            return []
        rows = self._read(Q.replies_to(len(run_ids)), tuple(run_ids))
        return [_row(r) for r in rows]

    def thread(self, run_id: str) -> list[RunRow]:
        """As `Ledger.thread` (the same walk over `run` and `replies_to`)."""
        return walk_thread(run_id, self.run, self.replies_to)

    def fleet_runs_between(self, start: datetime, end: datetime) -> list[FleetRunRow]:
        """Runs of every routine and machine that started in [start, end), newest first."""
        rows = self._read(Q.runs_between("machine, "), (iso(start), iso(end)))
        return [FleetRunRow(_row(r), r["machine"]) for r in rows]

    def runs_between(self, start: datetime, end: datetime) -> list[RunRow]:
        rows = self._read(Q.runs_between(), (iso(start), iso(end)))
        return [_row(r) for r in rows]

    def last_runs(self) -> dict[str, LastRun]:
        rows = self._read(Q.last_runs())
        return {r["routine"]: last_run_row(r) for r in rows}

    # -- compaction ---------------------------------------------------------------------

    def compact(
        self, before: datetime, zone: ZoneInfo, limit: int = 500, keep_max: int | None = None
    ) -> int:
        """As `Ledger.compact` (runs before `before`, or before the day of their routine's
        `keep_max`-th newest run); SKIP LOCKED lets two machines compact at once, each run
        folded once."""
        with self.transaction() as cur:
            cur.execute(RUN_ROUTINES)
            names = [r["r"] for r in cur.fetchall()]
            rows: list[dict[str, Any]] = []
            for name in names:
                if len(rows) >= limit:
                    break
                line = before
                if keep_max is not None:
                    cur.execute(Q.nth_newest_start(), (name, keep_max - 1))
                    nth = cur.fetchone()
                    if nth is not None:
                        line = max(line, rundays.count_line(from_iso(nth["started_at"]), zone))
                cur.execute(Q.to_fold(), (name, iso(line), limit - len(rows)))
                rows += cur.fetchall()
            for f in rundays.fold([shared.fold_row(r) for r in rows], zone):
                cur.execute(_ADD_DAY_SQL, shared.add_day_args(f, zone.key))
            if rows:
                cur.execute(Q.delete_runs(len(rows)), [r["id"] for r in rows])
        return len(rows)

    def days(self, routine: str | None = None, limit: int = 20) -> list[DaySummary]:
        args = [routine] if routine else []
        rows = self._read(Q.days(bool(routine)), (*args, limit))
        return [rundays.summary(r) for r in rows]

    def oldest_run_start(self) -> str | None:
        rows = self._read(Q.oldest_run_start())
        return rows[0]["m"] if rows else None

    # -- money --------------------------------------------------------------------------

    def spent_on_day(self, routine: str, day: date, zone: ZoneInfo) -> float:
        """Every machine's spending of `routine` on `day` (the fleet-wide budget)."""
        start, end = day_bounds(day, zone)
        rows = self._read(Q.spent(), (routine, iso(start), iso(end)))
        return float(rows[0]["s"])

    def spent_today(self, routine: str, zone: ZoneInfo, now: datetime) -> float:
        return self.spent_on_day(routine, now.astimezone(zone).date(), zone)

    def spent_today_many(self, zones: Mapping[str, ZoneInfo], now: datetime) -> dict[str, float]:
        """`spent_today` of each routine in `zones` (its name, its own zone), in one query
        per distinct zone: what `list`, `status` and the dashboard show for many routines."""
        out = dict.fromkeys(zones, 0.0)
        for (start, end), names in today_bounds(zones, now).items():
            rows = self._read(Q.spent_by_routine(), (iso(start), iso(end)))
            spent = {r["routine"]: r["s"] for r in rows}
            out.update((n, float(spent[n])) for n in names if n in spent)
        return out

    def totals(self, start: datetime, end: datetime) -> list[dict[str, Any]]:
        bounds = (iso(start), iso(end))
        return shared.merge_totals(
            [*self._read(Q.run_totals(), bounds), *self._read(Q.day_totals(), bounds)]
        )

    def dollars_by_day(self, days: Sequence[date], zone: ZoneInfo) -> dict[date, float]:
        out: dict[date, float] = {}
        for day in days:
            start, end = day_bounds(day, zone)
            bounds = (iso(start), iso(end))
            rows = self._read(Q.dollars_on(), (*bounds, *bounds))
            out[day] = int(rows[0]["nano"]) / 1e9
        return out

    # -- per-routine state --------------------------------------------------------------

    def state(self, routine: str) -> RoutineState:
        rows = self._read(Q.state(), (routine,))
        return state_row(rows[0]) if rows else RoutineState(routine)

    def states(self) -> dict[str, RoutineState]:
        return {r["routine"]: state_row(r) for r in self._read(Q.states())}

    @staticmethod
    def _set_state(cur: Cursor, routine: str, values: dict[str, object]) -> None:
        """Set columns of routine_state (creating the row); booleans stored as 0/1."""
        cur.execute(
            shared.set_state_sql(tuple(values), "%s", _NOW_ISO),
            (routine, *shared.state_params(values)),
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
        """As `Ledger.enable`, under the routine's row lock (a claim may be racing it)."""
        with self.transaction() as cur:
            cur.execute(Q.cursor(), (routine,))
            row = cur.fetchone()
            stored = row["cursor"] if row else None
            self._set_state(
                cur,
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
        values = shared.disable_values(
            file_enabled=file_enabled,
            file_identity=file_identity,
            reason=reason,
            failure_streak=failure_streak,
        )
        with self.transaction() as cur:
            self._set_state(cur, routine, values)

    def rebind_override(self, routine: str, was: str | None, now: str) -> bool:
        """As `Ledger.rebind_override`."""
        with self.transaction() as cur:
            cur.execute(Q.rebind_override(), (now, routine, was or ""))
            return cur.rowcount > 0

    def clear_override(self, routine: str) -> None:
        """As `Ledger.clear_override`."""
        with self.transaction() as cur:
            self._set_state(cur, routine, shared.CLEARED)

    def set_failure_streak(self, routine: str, streak: int) -> None:
        with self.transaction() as cur:
            self._set_state(cur, routine, {"failure_streak": streak})

    def set_cursor(self, routine: str, cursor: str | None, fingerprint: str | None = None) -> None:
        values = shared.cursor_values(cursor, fingerprint)
        with self.transaction() as cur:
            self._set_state(cur, routine, values)
