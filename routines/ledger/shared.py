"""What both ledger backends (routines/ledger/sqlite.py's SQLite `Ledger`,
routines/ledger/postgres.py's PostgreSQL `PgLedger`) write and read alike: the values a run
row is inserted with, the state values `enable`/`disable`/`set_cursor` set, the rows
compaction folds, and the SQL text that is the same in both dialects but for the placeholder
(`mark`: "?" for SQLite, "%s" for psycopg).

Pure: no connection here; each backend executes these with its own cursor and transaction.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from enum import Enum
from typing import Any, Protocol

from routines.ledger import rundays
from routines.runs import ACTIVE, NO_LAST_RUN, Ended, RunEnd, RunStatus, Strike, Trigger, strike

__all__ = [
    "LEASE_LOST",
    "ZERO_COLUMNS",
    "add_day_args",
    "cursor_values",
    "disable_values",
    "enable_values",
    "finish_values",
    "fold_row",
    "from_iso",
    "iso",
    "may_finish",
    "merge_totals",
    "new_run",
    "note_last_args",
    "real_end_wins",
    "set_state_sql",
    "state_params",
    "strike_values",
]


class Row(Protocol):
    """A result row read by column name: sqlite3.Row or psycopg's dict row."""

    def __getitem__(self, key: str, /) -> Any: ...


def iso(instant: datetime) -> str:
    """An aware datetime as the ledger stores it: UTC, microseconds, sortable as text."""
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def from_iso(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


# Counters a new run starts at 0 (written as literals, not bound).
ZERO_COLUMNS = (
    "dollars",
    "input_tokens",
    "output_tokens",
    "local_input_tokens",
    "local_output_tokens",
    "tool_calls",
)


def new_run(
    *,
    run_id: str,
    routine: str,
    slot: str | None,
    trigger: Trigger,
    status: RunStatus,
    started: str,
    detail: str,
    owner: tuple[int, float] | None,
    parent_run_id: str | None,
) -> dict[str, object]:
    """The bound columns of a new run row: a run recorded already finished (skipped, missed,
    refused) gets its finish time and a zero duration at once."""
    finished = status not in ACTIVE
    return {
        "run_id": run_id,
        "routine": routine,
        "slot": slot,
        "trigger": str(trigger),
        "status": str(status),
        "detail": detail,
        "started_at": started,
        "finished_at": started if finished else None,
        "duration_sec": 0.0 if finished else None,
        "owner_pid": owner[0] if owner else None,
        "owner_started": owner[1] if owner else None,
        "parent_run_id": parent_run_id,
    }


def enable_values(
    stored_cursor: str | None,
    *,
    file_enabled: bool,
    file_identity: str,
    cursor: str,
    fingerprint: str,
) -> dict[str, object]:
    """routine_state's columns after `enable`: the override is stored with the file's
    `enabled` at this moment and the file it was made for, the failure streak cleared, the
    cursor moved to `cursor` but never backwards from `stored_cursor`."""
    return {
        "enabled_override": True,
        "file_enabled_seen": file_enabled,
        "file_identity": file_identity,
        "failure_streak": 0,
        "disabled_reason": None,
        "cursor": stored_cursor if stored_cursor and stored_cursor > cursor else cursor,
        "schedule_fingerprint": fingerprint,
    }


def disable_values(
    *, file_enabled: bool, file_identity: str, reason: str | None, failure_streak: int | None
) -> dict[str, object]:
    """routine_state's columns after `disable` (the streak only when given)."""
    values: dict[str, object] = {
        "enabled_override": False,
        "file_enabled_seen": file_enabled,
        "file_identity": file_identity,
        "disabled_reason": reason,
    }
    if failure_streak is not None:
        values["failure_streak"] = failure_streak
    return values


# routine_state's columns after `clear_override`: the file says again whether it runs.
CLEARED: dict[str, object] = {
    "enabled_override": None,
    "file_enabled_seen": None,
    "file_identity": None,
    "disabled_reason": None,
    "failure_streak": 0,
}


# The detail's start of a run another machine ended because its lease lapsed (PgLedger's
# expire_leases): the one ending a run's own end may still replace (`real_end_wins`).
LEASE_LOST = "lease lost: "


def real_end_wins(status: str, detail: str | None, marked_at: str | None, ended: datetime) -> bool:
    """Whether a run's own end, kept by its machine through a database outage and written now,
    replaces the `interrupted` another machine wrote when the run's lease lapsed meanwhile.

    Yes when the row says the lease was lost and the run ended (`ended`, its machine's clock)
    no later than it was marked (`marked_at`): it ended inside its lease (its worker stops
    itself at its lease's deadline, before another machine may end it), so the end it
    reported is how it really ended (tests/fleet/test_fleet_outage_end.py)."""
    return (
        status == RunStatus.INTERRUPTED.value
        and (detail or "").startswith(LEASE_LOST)
        and marked_at is not None
        and ended <= from_iso(marked_at)
    )


def strike_values(
    status: RunStatus, streak: int, rule: Strike
) -> tuple[dict[str, object] | None, Ended]:
    """routine_state's columns after a run ended `status` with `streak` failures before it,
    counted by `rule` (None: nothing changes), and what `finish_run` answers: DISABLED when
    this end is the third strike (`disable_values`)."""
    after, disable = strike(status, streak)
    if disable:
        values = disable_values(
            file_enabled=rule.file_enabled,
            file_identity=rule.file_identity,
            reason=rule.reason,
            failure_streak=after,
        )
        return values, Ended.DISABLED
    return (None if after == streak else {"failure_streak": after}), Ended.ENDED


def cursor_values(cursor: str | None, fingerprint: str | None) -> dict[str, object]:
    """routine_state's columns after `set_cursor` (the fingerprint only when given)."""
    values: dict[str, object] = {"cursor": cursor}
    if fingerprint is not None:
        values["schedule_fingerprint"] = fingerprint
    return values


def set_state_sql(columns: tuple[str, ...], mark: str, updated_at: str) -> str:
    """Upsert of routine_state (creating the row): `routine` then `columns` bound with `mark`
    (values from `state_params`), updated_at set from the SQL `updated_at` (a mark too, or the
    server's clock)."""
    cols = ", ".join(["routine", *columns, "updated_at"])
    marks = ", ".join([mark] * (len(columns) + 1) + [updated_at])
    updates = ", ".join(f"{k} = excluded.{k}" for k in (*columns, "updated_at"))
    return (
        f"INSERT INTO routine_state ({cols}) VALUES ({marks}) "
        f"ON CONFLICT (routine) DO UPDATE SET {updates}"
    )


def state_params(values: dict[str, object]) -> list[object]:
    """`values` as bound: booleans as 0/1, enums as their text."""
    return [
        int(v) if isinstance(v, bool) else v.value if isinstance(v, Enum) else v
        for v in values.values()
    ]


def note_last_args(
    routine: str,
    run_id: str,
    status: RunStatus | str,
    outcome: object,
    started: str,
    finished: str,
) -> tuple[object, ...] | None:
    """The values of `sql.Dialect.note_last` that make this run its routine's last run, or
    None when its status is not a last run (skipped, missed, refused...). `status` may be a
    v2.0.x text the enum lacks, copied in by `fleet join`."""
    if status in NO_LAST_RUN:
        return None
    return (routine, run_id, _text(status), _text(outcome), started, finished)


def may_finish(
    status: str, detail: str | None, marked_at: str | None, end: RunStatus, ended: datetime
) -> bool:
    """Whether a run whose row says `status` (`detail`, finished at `marked_at`) takes the end
    `end`, reported at `ended`: the one rule of every store's `finish_run`. An active row does;
    an ended one does not (a run ends once), but for an `interrupted` another machine wrote
    when the run's lease lapsed, which yields to the run's own end (`real_end_wins`)."""
    if status in ACTIVE:
        return True
    return end is not RunStatus.INTERRUPTED and real_end_wins(status, detail, marked_at, ended)


def add_day_args(f: rundays.DayFold, zone: str) -> tuple[object, ...]:
    """One batch's fold as the values of its day row, in `rundays.DAY_COLUMNS` order."""
    assert f.first is not None and f.last is not None
    return (
        f.routine,
        f.day.isoformat(),
        zone,
        iso(f.start_at),
        iso(f.end_at),
        *(f.counts[c] for c in rundays.COUNTERS),
        f.first[1],
        f.first[0],
        f.last[1],
        f.last[0],
    )


def fold_row(r: Row) -> rundays.FoldRow:
    """A run selected for compaction (with `nano` and `ms` computed) as a `rundays.FoldRow`."""
    return rundays.FoldRow(
        routine=r["routine"],
        run_id=r["run_id"] or f"row-{r['id']}",
        started_at=r["started_at"],
        status=r["status"],
        outcome=r["outcome"],
        input_tokens=r["input_tokens"] or 0,
        output_tokens=r["output_tokens"] or 0,
        local_input_tokens=r["local_input_tokens"] or 0,
        local_output_tokens=r["local_output_tokens"] or 0,
        tool_calls=r["tool_calls"] or 0,
        nanodollars=int(r["nano"]),
        duration_ms=int(r["ms"]),
    )


def finish_values(end: RunEnd, finished: str, duration: float | None) -> tuple[object, ...]:
    """A run's final columns, in `sql.FINISH_COLUMNS` order (enums as their text)."""
    return (
        _text(end.status),
        _text(end.outcome),
        end.detail,
        finished,
        duration,
        end.route,
        end.model,
        None if end.escalated is None else int(end.escalated),
        end.escalated_reason,
        end.input_tokens,
        end.output_tokens,
        end.local_input_tokens,
        end.local_output_tokens,
        end.tool_calls,
        None if end.tools_used is None else json.dumps(list(end.tools_used)),
        end.dollars,
        end.output_file,
        end.tried_model,
    )


def _text(value: object) -> object:
    return value.value if isinstance(value, Enum) else value


def merge_totals(rows: Iterable[Row]) -> list[dict[str, Any]]:
    """`totals`: the run rows' and the day rows' sums per routine (`sql.run_totals`,
    `day_totals`) added up, dollars from nanodollars, biggest spender first."""
    keys = ("runs", "input_tokens", "output_tokens", "local_input_tokens", "local_output_tokens")
    merged: dict[str, dict[str, int]] = {}
    for r in rows:
        m = merged.setdefault(r["routine"], dict.fromkeys((*keys, "nano"), 0))
        for k in m:
            m[k] += int(r[k])
    out: list[dict[str, Any]] = []
    for name, m in merged.items():
        nano = m.pop("nano")
        out.append({"routine": name, **m, "dollars": nano / 1e9})
    out.sort(key=lambda r: (-r["dollars"], r["routine"]))
    return out
