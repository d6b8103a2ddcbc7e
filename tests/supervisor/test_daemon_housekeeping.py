"""The real daemon does its housekeeping: a ledger with runs from 200 days ago is compacted
while it idles (same sums), and an old output and run log are deleted, the newest kept."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from routines.ledger import Ledger
from routines.runs import RunEnd, RunStatus, Trigger
from routines.spec.paths import paths
from tests.supervisor.daemonkit import DaemonProcess, command_routine, wait_for, write_routine

pytestmark = pytest.mark.slow  # real daemons: make test-fast leaves these out


def test_the_daemon_compacts_and_prunes_while_idle(tmp_path: Path, not_root: None) -> None:
    write_routine("old", command_routine("true", schedule='cron = "0 6 1 1 *"'))
    p = paths()
    start = datetime.now(UTC) - timedelta(days=200)
    with Ledger(p.ledger) as ledger:
        for i in range(1200):
            at = start + timedelta(minutes=10 * i)
            run_id = f"{at:%Y%m%dT%H%M%S}-old-{i:06d}"
            ledger.record_run(
                "old", run_id=run_id, trigger=Trigger.SCHEDULE, status=RunStatus.RUNNING, now=at
            )
            ledger.finish_run(run_id, now=at, end=RunEnd(status=RunStatus.OK, dollars=0.0125))
    runs = p.routine_state("old") / "runs"
    runs.mkdir(parents=True)
    old_log = f"{start:%Y%m%dT%H%M%S}-old-000000.jsonl"
    new_log = f"{start + timedelta(days=1):%Y%m%dT%H%M%S}-old-000144.jsonl"
    for name in (old_log, new_log):
        (runs / name).write_text("{}\n")
    old_out, new_out = f"{start:%Y-%m-%d}-0600.md", f"{start + timedelta(days=1):%Y-%m-%d}-0600.md"
    for name in (old_out, new_out):
        (p.routine_state("old") / name).write_text("# old\n")

    def counts() -> tuple[int, int, int]:
        db = sqlite3.connect(p.ledger)
        try:
            whole = db.execute("SELECT COUNT(*), SUM(dollars * 1e9) FROM runs").fetchone()
            days = db.execute("SELECT SUM(runs), SUM(nanodollars) FROM run_days").fetchone()
            return whole[0], days[0] or 0, round((whole[1] or 0) + (days[1] or 0))
        finally:
            db.close()

    assert counts() == (1200, 0, 1200 * 12_500_000)
    d = DaemonProcess(tmp_path, timings={"housekeeping_delay_sec": 0}).start()
    try:
        wait_for(
            lambda: counts() == (0, 1200, 1200 * 12_500_000), timeout=120, what="the compaction"
        )
        wait_for(lambda: not (runs / old_log).exists(), timeout=120, what="the old log deleted")
        assert (runs / new_log).exists()
        assert not (p.routine_state("old") / old_out).exists()
        assert (p.routine_state("old") / new_out).exists()
        assert d.request("ping")  # and it still answers
    finally:
        assert d.stop() == 0
