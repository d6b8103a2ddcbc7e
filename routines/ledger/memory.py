"""A ledger in memory: the reference store the contract suite also runs against
(tests/fleet/test_ledger_contract.py), beside SQLite's `Ledger` and PostgreSQL's `PgLedger`.

It keeps the same rows as the plain tables (runs, claims, routine_state, run_days) in dicts
and decides with the same pure helpers (routines/ledger/shared.py and rundays.py), so it
states the contract in Python, without SQL, at the size of a page. Several `MemoryLedger`s
over one `MemoryData` are connections to one ledger (what another connection wrote is seen at
once; `data_version` counts the others' writes, as SQLite's PRAGMA data_version does).

Not for production: nothing is kept past the process, and one thread at a time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any
from zoneinfo import ZoneInfo

from routines.ledger import rundays, shared
from routines.ledger.memrequests import MemoryRequests, RequestData
from routines.ledger.model import (
    ANY,
    CLAIM_RETENTION,
    RUN_COLUMNS,
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
from routines.ledger.sql import FINISH_COLUMNS as _FINISH
from routines.ledger.sql import SUMS as _SUMS
from routines.runs import (
    ACTIVE,
    NO_LAST_RUN,
    NOT_A_RUN,
    PAUSED,
    Ended,
    RunEnd,
    RunStatus,
    Strike,
    Trigger,
    is_event_slot,
)

__all__ = ["MemoryData", "MemoryLedger"]

_STATE = (
    "enabled_override",
    "file_enabled_seen",
    "file_identity",
    "disabled_reason",
    "cursor",
    "schedule_fingerprint",
    "last_run_id",
    "last_status",
    "last_outcome",
    "last_started",
    "last_finished",
)


@dataclass
class MemoryData:
    """The rows of one ledger."""

    runs: dict[str, dict[str, Any]] = field(default_factory=dict)  # by run_id
    claims: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    states: dict[str, dict[str, Any]] = field(default_factory=dict)
    days: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    next_id: int = 1
    writes: int = 0
    requests: RequestData = field(default_factory=RequestData)  # proposals, conversations


def _round(x: float) -> int:
    """SQL's ROUND to an integer: half away from zero."""
    return int(math.copysign(math.floor(abs(x) + 0.5), x))


class MemoryLedger(MemoryRequests):
    """One connection to a `MemoryData`. Its proposals and conversations are
    `MemoryRequests`'s (routines/ledger/memrequests.py)."""

    def __init__(self, data: MemoryData | None = None) -> None:
        self.data = data if data is not None else MemoryData()
        self.requests = self.data.requests
        self._own = 0

    def close(self) -> None:
        pass

    def __enter__(self) -> MemoryLedger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _wrote(self) -> None:
        self.data.writes += 1
        self._own += 1

    @property
    def data_version(self) -> int:
        return self.data.writes - self._own

    def _state(self, routine: str) -> dict[str, Any]:
        return self.data.states.setdefault(
            routine, {"routine": routine, "failure_streak": 0, **dict.fromkeys(_STATE)}
        )

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
        """As `Ledger.claim`: all or nothing, so every check comes before any change."""
        known = self.data.states.get(routine)
        if expect_cursor is not ANY and (known or {}).get("cursor") != expect_cursor:
            return False
        if (routine, slot) in self.data.claims:
            return False
        if run_id in self.data.runs:
            raise ValueError(f"run id {run_id} is recorded already")
        self.data.claims[(routine, slot)] = (iso(now), run_id)
        if not is_event_slot(slot):  # an event's id is no instant: the cursor stays
            self.advance_cursor(routine, slot)
        self._insert_run(routine, run_id, slot, trigger, status, now, detail, owner)
        return True

    def advance_cursor(self, routine: str, slot: str) -> None:
        state = self._state(routine)
        if state["cursor"] is None or state["cursor"] < slot:
            state["cursor"] = slot
        self._wrote()

    def is_claimed(self, routine: str, slot: str) -> bool:
        return (routine, slot) in self.data.claims

    def prune_claims(self, now: datetime, keep_max: int | None = None) -> int:
        old = iso(now - CLAIM_RETENTION)
        gone = [k for k, (at, _) in self.data.claims.items() if at < old]
        if keep_max is not None:
            for routine in {r for r, _ in self.data.claims}:
                slots = sorted((s for r, s in self.data.claims if r == routine), reverse=True)
                gone += [(routine, s) for s in slots[keep_max:] if (routine, s) not in gone]
        for k in gone:
            del self.data.claims[k]
        self._wrote()
        return len(gone)

    # -- run rows -----------------------------------------------------------------------

    def _insert_run(
        self,
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
        row: dict[str, Any] = {"id": self.data.next_id, "exit_status": None}
        row |= dict.fromkeys(RUN_COLUMNS) | dict.fromkeys(shared.ZERO_COLUMNS, 0) | values
        self.data.next_id += 1
        self.data.runs[run_id] = row
        if status not in ACTIVE:
            self._note_last(routine, run_id, status, None, iso(now), iso(now))
        self._wrote()

    def _note_last(
        self,
        routine: str,
        run_id: str,
        status: RunStatus,
        outcome: object,
        started: str,
        finished: str,
    ) -> None:
        if status in NO_LAST_RUN:
            return
        state = self._state(routine)
        if state["last_started"] is None or state["last_started"] <= started:
            state |= {
                "last_run_id": run_id,
                "last_status": str(status),
                "last_outcome": None if outcome is None else str(outcome),
                "last_started": started,
                "last_finished": finished,
            }

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
        if run_id in self.data.runs:
            raise ValueError(f"run id {run_id} is recorded already")
        self._insert_run(routine, run_id, slot, trigger, status, now, detail, owner, parent_run_id)

    def start_run(self, run_id: str, *, now: datetime, worker_pid: int | None) -> None:
        row = self.data.runs.get(run_id)
        if row is not None:
            row |= {"status": RunStatus.RUNNING.value, "started_at": iso(now)}
            row["worker_pid"] = worker_pid
            self._wrote()

    def finish_run(
        self, run_id: str, end: RunEnd, *, now: datetime, strike: Strike | None = None
    ) -> Ended:
        """As `Ledger.finish_run`: only an active row changes, with its strike; KeyError when
        there is none."""
        row = self.data.runs.get(run_id)
        if row is None:
            raise KeyError(run_id)
        if not shared.may_finish(row["status"], row["detail"], row["finished_at"], end.status, now):
            return Ended.NOT_ACTIVE
        duration = end.duration_sec
        if duration is None and row["started_at"]:
            duration = max(0.0, (now - from_iso(row["started_at"])).total_seconds())
        values = shared.finish_values(end, iso(now), duration)
        row |= dict(zip(_FINISH, values, strict=True))
        if end.status not in ACTIVE and row["started_at"]:
            self._note_last(
                row["routine"], run_id, end.status, end.outcome, row["started_at"], iso(now)
            )
        ended = Ended.ENDED
        if strike is not None:
            streak = (self.data.states.get(row["routine"]) or {}).get("failure_streak") or 0
            state, ended = shared.strike_values(end.status, streak, strike)
            if state is not None:
                self._set(row["routine"], state)
        self._wrote()
        return ended

    def paused_runs(self) -> list[ActiveRun]:
        return self._runs_in(PAUSED)

    def end_pause(self, run_id: str, status: RunStatus, note: str, *, now: datetime) -> bool:
        row = self.data.runs.get(run_id)
        if row is None or row["status"] not in PAUSED:
            return False
        row["status"] = status.value
        row["detail"] = (row["detail"] or "") + note
        if row["started_at"]:
            self._note_last(row["routine"], run_id, status, None, row["started_at"], iso(now))
        self._wrote()
        return True

    def active_runs(self) -> list[ActiveRun]:
        return self._runs_in(ACTIVE)

    def _runs_in(self, statuses: frozenset[RunStatus]) -> list[ActiveRun]:
        return [
            ActiveRun(
                r["run_id"],
                r["routine"],
                r["slot"],
                RunStatus(r["status"]),
                r["owner_pid"],
                r["owner_started"],
                r["worker_pid"],
            )
            for r in self.data.runs.values()
            if r["status"] in statuses
        ]

    def run(self, run_id: str) -> RunRow | None:
        row = self.data.runs.get(run_id)
        return _row(row) if row is not None else None

    def _newest(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # ORDER BY started_at DESC, id DESC (a NULL time sorts below every time).
        return sorted(
            rows, key=lambda r: (r["started_at"] is not None, r["started_at"] or "", r["id"])
        )[::-1]

    def history(self, routine: str | None = None, limit: int = 20) -> list[RunRow]:
        rows = [r for r in self.data.runs.values() if routine is None or r["routine"] == routine]
        return [_row(r) for r in self._newest(rows)[:limit]]

    def runs_between(self, start: datetime, end: datetime) -> list[RunRow]:
        return [_row(r) for r in self._newest(self._between(start, end))]

    def replies_to(self, run_ids: Sequence[str]) -> list[RunRow]:
        rows = [r for r in self.data.runs.values() if r["parent_run_id"] in set(run_ids)]
        return [_row(r) for r in self._newest(rows)[::-1]]

    def thread(self, run_id: str) -> list[RunRow]:
        return walk_thread(run_id, self.run, self.replies_to)

    def last_runs(self) -> dict[str, LastRun]:
        return {name: last_run_row(s) for name, s in self.data.states.items() if s["last_status"]}

    def last_started_here(self, routine: str) -> str | None:
        state = self.data.states.get(routine)
        return state["last_started"] if state else None

    # -- compaction -----------------------------------------------------------------------

    def compact(
        self, before: datetime, zone: ZoneInfo, limit: int = 500, keep_max: int | None = None
    ) -> int:
        """As `Ledger.compact`: each routine's finished runs before its line, oldest first."""
        picked: list[dict[str, Any]] = []
        for name in sorted({r["routine"] for r in self.data.runs.values()}):
            if len(picked) >= limit:
                break
            mine = [r for r in self.data.runs.values() if r["routine"] == name and r["started_at"]]
            line = iso(before)
            if keep_max is not None:
                starts = sorted((r["started_at"] for r in mine), reverse=True)
                if len(starts) >= keep_max:
                    counted = rundays.count_line(from_iso(starts[keep_max - 1]), zone)
                    line = max(line, iso(counted))
            done = [
                r
                for r in mine
                if r["started_at"] < line and (r["status"] or "") not in ACTIVE | PAUSED
            ]
            picked += sorted(done, key=lambda r: r["started_at"])[: limit - len(picked)]
        for f in rundays.fold([_fold_row(r) for r in picked], zone):
            args = shared.add_day_args(f, zone.key)
            self._add_day(dict(zip(rundays.DAY_COLUMNS, args, strict=True)))
        for r in picked:
            del self.data.runs[r["run_id"]]
        self._wrote()
        return len(picked)

    def _add_day(self, new: dict[str, Any]) -> None:
        key = (new["routine"], new["day"])
        old = self.data.days.get(key)
        if old is None:
            self.data.days[key] = new
            return
        for c in rundays.COUNTERS:
            old[c] += new[c]
        if new["first_started"] < old["first_started"]:
            old["first_run_id"], old["first_started"] = new["first_run_id"], new["first_started"]
        if new["last_started"] > old["last_started"]:
            old["last_run_id"], old["last_started"] = new["last_run_id"], new["last_started"]

    def days(self, routine: str | None = None, limit: int = 20) -> list[DaySummary]:
        rows = [d for d in self.data.days.values() if routine is None or d["routine"] == routine]
        rows.sort(key=lambda d: d["routine"])
        rows.sort(key=lambda d: d["start_at"], reverse=True)
        return [rundays.summary(d) for d in rows[:limit]]

    def oldest_run_start(self) -> str | None:
        return min(
            (r["started_at"] for r in self.data.runs.values() if r["started_at"]), default=None
        )

    # -- money ------------------------------------------------------------------------------

    def _between(self, start: datetime, end: datetime) -> list[dict[str, Any]]:
        lo, hi = iso(start), iso(end)
        rows = [r for r in self.data.runs.values() if lo <= (r["started_at"] or "") < hi]
        return sorted(rows, key=lambda r: (r["started_at"], r["id"]))

    def _days_between(self, start: datetime, end: datetime) -> list[dict[str, Any]]:
        lo, hi = iso(start), iso(end)
        return [d for d in self.data.days.values() if lo <= d["start_at"] < hi]

    def spent_on_day(self, routine: str, day: date, zone: ZoneInfo) -> float:
        rows = self._between(*day_bounds(day, zone))
        return float(sum(r["dollars"] or 0 for r in rows if r["routine"] == routine))

    def spent_today(self, routine: str, zone: ZoneInfo, now: datetime) -> float:
        return self.spent_on_day(routine, now.astimezone(zone).date(), zone)

    def spent_today_many(self, zones: Mapping[str, ZoneInfo], now: datetime) -> dict[str, float]:
        out = dict.fromkeys(zones, 0.0)
        for (start, end), names in today_bounds(zones, now).items():
            asked = set(names)
            for r in self._between(start, end):
                if r["routine"] in asked:
                    out[r["routine"]] += r["dollars"] or 0
        return out

    def totals(self, start: datetime, end: datetime) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for r in self._between(start, end):
            if (r["status"] or r["exit_status"] or "") in NOT_A_RUN:
                continue
            rows.append(
                {"routine": r["routine"], "runs": 1, "nano": _nano(r)}
                | {c: r[c] or 0 for c in _SUMS}
            )
        for d in self._days_between(start, end):
            runs = d["runs"] - d["skipped"] - d["missed"]
            if runs > 0:
                rows.append(
                    {"routine": d["routine"], "runs": runs, "nano": d["nanodollars"]}
                    | {c: d[c] for c in _SUMS}
                )
        return shared.merge_totals(rows)

    def dollars_by_day(self, days: Sequence[date], zone: ZoneInfo) -> dict[date, float]:
        out: dict[date, float] = {}
        for day in days:
            start, end = day_bounds(day, zone)
            nano = sum(_nano(r) for r in self._between(start, end))
            nano += sum(d["nanodollars"] for d in self._days_between(start, end))
            out[day] = nano / 1e9
        return out

    # -- per-routine state ------------------------------------------------------------------

    def state(self, routine: str) -> RoutineState:
        known = self.data.states.get(routine)
        return state_row(known) if known is not None else RoutineState(routine)

    def states(self) -> dict[str, RoutineState]:
        return {name: state_row(s) for name, s in self.data.states.items()}

    def _set(self, routine: str, values: dict[str, object]) -> None:
        state = self._state(routine)
        state |= dict(zip(values, shared.state_params(values), strict=True))
        self._wrote()

    def enable(
        self,
        routine: str,
        *,
        file_enabled: bool,
        file_identity: str,
        cursor: str,
        fingerprint: str,
    ) -> None:
        stored = (self.data.states.get(routine) or {}).get("cursor")
        self._set(
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
        self._set(
            routine,
            shared.disable_values(
                file_enabled=file_enabled,
                file_identity=file_identity,
                reason=reason,
                failure_streak=failure_streak,
            ),
        )

    def rebind_override(self, routine: str, was: str | None, now: str) -> bool:
        known = self.data.states.get(routine)
        if known is None or known["enabled_override"] is None or known["file_identity"] != was:
            return False
        self._set(routine, {"file_identity": now})
        return True

    def clear_override(self, routine: str) -> None:
        self._set(routine, shared.CLEARED)

    def set_failure_streak(self, routine: str, streak: int) -> None:
        self._set(routine, {"failure_streak": streak})

    def set_cursor(self, routine: str, cursor: str | None, fingerprint: str | None = None) -> None:
        self._set(routine, shared.cursor_values(cursor, fingerprint))


def _nano(r: dict[str, Any]) -> int:
    return _round(float(r["dollars"] or 0) * 1e9)


def _fold_row(r: dict[str, Any]) -> rundays.FoldRow:
    return shared.fold_row(
        {
            **r,
            "status": r["status"] or r["exit_status"] or "",
            "nano": _nano(r),
            "ms": _round(float(r["duration_sec"] or 0) * 1000),
        }
    )


def _row(r: dict[str, Any]) -> RunRow:
    data = {k: r[k] for k in RunRow.__dataclass_fields__}
    data["status"] = r["status"] if r["status"] is not None else r["exit_status"]
    return run_row(data)
