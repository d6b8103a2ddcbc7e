"""The ledger: 100,000 claims (claim + run row + cursor, one transaction each; target <= 0.1 ms
median) against a bare sqlite3 INSERT in autocommit on the same kind of file in the same run;
then the daily-spend query over that 100k-row ledger against a full-table SUM."""

from __future__ import annotations

import sqlite3
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

from bench.common import Row, median_seconds
from routines.ledger import Ledger, iso
from routines.runs import RunStatus, Trigger

ROUTINES = 20
STEP = timedelta(minutes=5)  # 100k runs spread over about a year


def _claims(ledger: Ledger, count: int) -> list[float]:
    base = datetime(2025, 1, 1, tzinfo=UTC)
    times = []
    for i in range(count):
        now = base + i * STEP
        routine = f"routine-{i % ROUTINES:02d}"
        slot = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        t0 = time.perf_counter()
        ledger.claim(
            routine,
            slot,
            run_id=f"run-{i}",
            trigger=Trigger.SCHEDULE,
            status=RunStatus.QUEUED,
            now=now,
        )
        times.append(time.perf_counter() - t0)
    return times


def _bare_inserts(path: Path, count: int) -> list[float]:
    db = sqlite3.connect(path, isolation_level=None)  # autocommit: one implicit txn each
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute(
        "CREATE TABLE runs (id INTEGER PRIMARY KEY, run_id TEXT, routine TEXT, slot TEXT, "
        "started_at TEXT, status TEXT, dollars REAL)"
    )
    base = datetime(2025, 1, 1, tzinfo=UTC)
    times = []
    for i in range(count):
        now = base + i * STEP
        row = (f"run-{i}", f"routine-{i % ROUTINES:02d}", iso(now), iso(now), "queued", 0.0)
        t0 = time.perf_counter()
        db.execute(
            "INSERT INTO runs (run_id, routine, slot, started_at, status, dollars) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            row,
        )
        times.append(time.perf_counter() - t0)
    db.close()
    return times


def _p99(times: list[float]) -> float:
    return sorted(times)[int(len(times) * 0.99)]


def run(quick: bool) -> list[Row]:
    count = 10_000 if quick else 100_000
    queries = 50 if quick else 200
    with tempfile.TemporaryDirectory(prefix="vinos-bench-ledger-") as tmp:
        root = Path(tmp)
        bare = _bare_inserts(root / "bare.db", count)
        with Ledger(root / "ledger.db") as ledger:
            t0 = time.perf_counter()
            claims = _claims(ledger, count)
            total = time.perf_counter() - t0
            # The daily-spend query, as the budget check runs it: a routine's spend today in
            # its own zone, on a day in the middle of the ledger.
            zone = ZoneInfo("America/New_York")
            now = datetime(2025, 1, 1, tzinfo=UTC) + (count // 2) * STEP
            spend = median_seconds(lambda: ledger.spent_today("routine-07", zone, now), queries)
            # `list`'s today column for every routine: one query per zone (spent_today_many)
            # against one spent_today per routine, as `list` asked before.
            zones = {f"routine-{i:02d}": zone for i in range(ROUTINES)}
            many = median_seconds(lambda: ledger.spent_today_many(zones, now), queries)
            each = median_seconds(
                lambda: [ledger.spent_today(n, z, now) for n, z in zones.items()], queries
            )
            # `list`'s last run per routine: one routine_state row each, whatever the history
            # (kept current by finish_run; bench_ledger_year.py times the commands).
            last = median_seconds(ledger.last_runs, max(queries // 10, 5))
            db = sqlite3.connect(root / "ledger.db")
            scan = median_seconds(
                lambda: db.execute("SELECT COALESCE(SUM(dollars), 0) FROM runs").fetchone(),
                max(queries // 10, 5),
            )
            db.close()
    claim_med = statistics.median(claims)
    bare_med = statistics.median(bare)
    bare_rate = count / sum(bare)
    return [
        Row(
            name=f"ledger: claim + run row insert, median of {count:,}",
            value=claim_med * 1000,
            unit="ms",
            baseline=f"bare INSERT (autocommit): {bare_med * 1000:.3f} ms",
            ratio=claim_med / bare_med,
            target="<= 0.1 ms median",
            met=claim_med <= 0.0001,
        ),
        Row(
            # The tail is WAL checkpoints (an fsync every ~1,000 pages), paid by the claim that
            # crosses the threshold.
            name=f"ledger: claim + run row insert, p99 of {count:,}",
            value=_p99(claims) * 1000,
            unit="ms",
            baseline=f"bare INSERT (autocommit): {_p99(bare) * 1000:.3f} ms",
            ratio=_p99(claims) / _p99(bare),
        ),
        Row(
            name=f"ledger: claim + run row inserts ({count:,})",
            value=count / total,
            unit="ops/s",
            baseline=f"bare INSERT (autocommit): {bare_rate:,.0f} ops/s",
            ratio=(count / total) / bare_rate,
        ),
        Row(
            name=f"ledger: daily-spend query over {count:,} rows, median",
            value=spend * 1000,
            unit="ms",
            baseline=f"full-table SUM(dollars): {scan * 1000:.2f} ms",
            ratio=spend / scan,
        ),
        Row(
            name=f"ledger: today's spend of all {ROUTINES} routines over {count:,} rows (list)",
            value=many * 1000,
            unit="ms",
            baseline=f"{ROUTINES} x spent_today: {each * 1000:.2f} ms",
            ratio=many / each,
        ),
        Row(
            name=f"ledger: last run per routine over {count:,} rows (list)",
            value=last * 1000,
            unit="ms",
            baseline=f"full-table SUM(dollars): {scan * 1000:.2f} ms",
            ratio=last / scan,
        ),
    ]
