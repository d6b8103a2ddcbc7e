"""What `list`, `status` and `status --waybar` ask the ledger never walks the run history: each
statement they run is checked with EXPLAIN QUERY PLAN on a real ledger with rows, and none of
them scans the runs table (an index search, or routine_state, only). So the commands do not
notice how long the history is (bench/bench_ledger_year.py times them on 1.6M rows)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

from routines.ledger import Ledger
from routines.runs import RunStatus, Trigger

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def test_the_status_queries_scan_no_run_rows(tmp_path: Path) -> None:
    with Ledger(tmp_path / "ledger.db") as ledger:
        for i in range(300):
            at = NOW - timedelta(hours=i)
            ledger.record_run(
                f"r{i % 3}", run_id=f"id{i}", trigger=Trigger.MANUAL, status=RunStatus.OK, now=at
            )
        ledger.record_run(
            "r0", run_id="live", trigger=Trigger.MANUAL, status=RunStatus.RUNNING, now=NOW
        )
        ledger._db.execute("ANALYZE")
        statements: list[str] = []
        ledger._db.set_trace_callback(statements.append)
        zone = ZoneInfo("Europe/Paris")
        # What listing.collect(), status.gather() and status.waybar() call.
        ledger.states()
        ledger.last_runs()
        ledger.active_runs()
        ledger.spent_today("r1", zone, NOW)
        ledger.dollars_by_day([NOW.date()], zone)
        ledger._db.set_trace_callback(None)
        assert len(statements) == 5
        for sql in statements:
            plan = [r[3] for r in ledger._db.execute(f"EXPLAIN QUERY PLAN {sql}")]
            scans = [p for p in plan if p.startswith("SCAN") and ("runs" in p or "run_log" in p)]
            assert not scans, (sql, plan)
            assert not any(p.startswith("SCAN") and "run_days" in p for p in plan), (sql, plan)
