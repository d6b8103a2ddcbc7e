"""Compacted history: one row per routine per calendar day, for runs past `keep_runs_days`
(or beyond a routine's newest `keep_runs_max`).

A run older than the compaction line is folded into its day's row and deleted in the same
transaction (`Ledger.compact`), so a crash loses or double-counts nothing and the next batch
resumes where the last one committed.

For a second backend (PostgreSQL for a fleet): the schema here (SCHEMA, DAY_COLUMNS), the
lines (`compaction_line`, `count_line`) and the fold (`fold`, pure over typed `FoldRow`s) are
backend-free; the backend supplies the
methods supervisor/engine/housekeeping.py calls (routines/ledger/api.py `Maintenance`):
`compact(before, zone, limit)` as "select a batch FOR UPDATE SKIP LOCKED, upsert the day rows,
delete the batch" in one transaction (so two machines compacting at once fold each run once),
and `totals`/`dollars_by_day`/`days` reading both tables; SQLite alone gives pages back
(`Vacuum`). The cases of tests/routines/ledger/test_ledger_compaction.py are the contract to run on
it (their independent sums, and the SIGKILL test's hook, read SQLite directly and would be
ported to read the other backend the same way).

Money is kept in integer nanodollars on both sides of the line (routines/ledger/sql.py `NANO`
for run rows), so a sum is exact whatever the order the rows were added in: the 30-day or
monthly figure `cost` prints is the same before and after a compaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

__all__ = [
    "DAY_COLUMNS",
    "OUTCOMES",
    "STATUSES",
    "DayFold",
    "DaySummary",
    "FoldRow",
    "compaction_line",
    "count_line",
    "fold",
]


# Status and outcome counters, each a column of run_days. Any other status (a legacy
# exit_status such as "error") counts in `other`; queued and running runs are never compacted.
STATUSES = ("ok", "failed", "timeout", "interrupted", "skipped", "missed", "budget")
OUTCOMES = {"done": "done", "nothing-to-do": "nothing_to_do", "needs-attention": "needs_attention"}
SUMS = (
    "input_tokens",
    "output_tokens",
    "local_input_tokens",
    "local_output_tokens",
    "tool_calls",
    "nanodollars",
    "duration_ms",
)
COUNTERS = ("runs", *STATUSES, "other", *OUTCOMES.values(), *SUMS)
DAY_COLUMNS = (
    "routine",
    "day",
    "zone",
    "start_at",
    "end_at",
    *COUNTERS,
    "first_run_id",
    "first_started",
    "last_run_id",
    "last_started",
)

SCHEMA = (
    """CREATE TABLE run_days (
        routine TEXT NOT NULL,
        day TEXT NOT NULL,
        zone TEXT NOT NULL,
        start_at TEXT NOT NULL,
        end_at TEXT NOT NULL,
        """
    + "".join(f"{c} INTEGER NOT NULL DEFAULT 0,\n" for c in COUNTERS)
    + """first_run_id TEXT,
        first_started TEXT,
        last_run_id TEXT,
        last_started TEXT,
        PRIMARY KEY (routine, day)
    )""",
    "CREATE INDEX run_days_start ON run_days(start_at)",
)


def compaction_line(now: datetime, zone: ZoneInfo, keep_days: int) -> datetime:
    """Runs that started before this instant are compacted: the start of the calendar day
    (in `zone`) `keep_days` days ago, so every compacted day is a whole day."""
    day = now.astimezone(zone).date() - timedelta(days=keep_days)
    return datetime(day.year, day.month, day.day, tzinfo=zone).astimezone(UTC)


def count_line(nth_newest: datetime, zone: ZoneInfo) -> datetime:
    """With `[ledger].keep_runs_max` = N: runs that started before this instant are compacted
    too, the start of the day (in `zone`) of the routine's N-th newest run. So compacted days
    stay whole days, and a routine keeps at least N whole runs (at most a day's more)."""
    day = nth_newest.astimezone(zone).date()
    return datetime(day.year, day.month, day.day, tzinfo=zone).astimezone(UTC)


@dataclass(frozen=True, slots=True)
class FoldRow:
    """What the fold needs of one finished run, from any backend."""

    routine: str
    run_id: str  # or a stand-in ("row-12") for rows older versions wrote without one
    started_at: str  # ISO 8601
    status: str  # status, or the legacy exit_status, or ""
    outcome: str | None
    input_tokens: int
    output_tokens: int
    local_input_tokens: int
    local_output_tokens: int
    tool_calls: int
    nanodollars: int  # sql.NANO
    duration_ms: int  # sql.MS


@dataclass(slots=True)
class DayFold:
    """The sums of one (routine, day) for one batch, before they are added to its row."""

    routine: str
    day: date
    start_at: datetime
    end_at: datetime
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))
    first: tuple[str, str] | None = None  # (started_at, run id)
    last: tuple[str, str] | None = None


def _parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def fold(rows: Iterable[FoldRow], zone: ZoneInfo) -> list[DayFold]:
    """Group finished runs by (routine, calendar day in `zone`) and sum them."""
    out: dict[tuple[str, date], DayFold] = {}
    for row in rows:
        started = _parse(row.started_at)
        day = started.astimezone(zone).date()
        f = out.get((row.routine, day))
        if f is None:
            start = datetime(day.year, day.month, day.day, tzinfo=zone)
            nxt = day + timedelta(days=1)
            end = datetime(nxt.year, nxt.month, nxt.day, tzinfo=zone)
            f = out[(row.routine, day)] = DayFold(
                row.routine, day, start.astimezone(UTC), end.astimezone(UTC)
            )
        c = f.counts
        c["runs"] += 1
        c[row.status if row.status in STATUSES else "other"] += 1
        outcome = OUTCOMES.get(row.outcome or "")
        if outcome:
            c[outcome] += 1
        for column in SUMS:
            c[column] += getattr(row, column)
        ident = (row.started_at, row.run_id)
        if f.first is None or ident < f.first:
            f.first = ident
        if f.last is None or ident > f.last:
            f.last = ident
    return list(out.values())


@dataclass(frozen=True, slots=True)
class DaySummary:
    """A compacted day of one routine, as `history` shows it."""

    routine: str
    day: str  # YYYY-MM-DD in `zone`
    zone: str
    start_at: str
    end_at: str
    counts: Mapping[str, int]
    first_run_id: str | None
    last_run_id: str | None

    @property
    def runs(self) -> int:
        return self.counts["runs"]

    @property
    def dollars(self) -> float:
        return self.counts["nanodollars"] / 1e9

    def as_json(self) -> dict[str, Any]:
        c = self.counts
        return {
            "day": self.day,
            "routine": self.routine,
            "compacted": True,
            "runs": c["runs"],
            **{s: c[s] for s in STATUSES},
            "other": c["other"],
            **{k: c[v] for k, v in OUTCOMES.items()},
            "input_tokens": c["input_tokens"],
            "output_tokens": c["output_tokens"],
            "local_input_tokens": c["local_input_tokens"],
            "local_output_tokens": c["local_output_tokens"],
            "tool_calls": c["tool_calls"],
            "dollars": self.dollars,
            "duration_sec": c["duration_ms"] / 1000,
            "first_run_id": self.first_run_id,
            "last_run_id": self.last_run_id,
            "zone": self.zone,
        }


def summary(row: Mapping[str, Any]) -> DaySummary:
    return DaySummary(
        routine=row["routine"],
        day=row["day"],
        zone=row["zone"],
        start_at=row["start_at"],
        end_at=row["end_at"],
        counts={c: row[c] for c in COUNTERS},
        first_run_id=row["first_run_id"],
        last_run_id=row["last_run_id"],
    )
