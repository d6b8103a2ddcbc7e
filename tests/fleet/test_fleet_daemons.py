"""Real daemons, several machines, one real PostgreSQL database (issue 13)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.fleet.fleetkit import Machine, fleet_rows, minute_boundary, minutely
from tests.supervisor.daemonkit import sid, wait_for

MINUTE = timedelta(minutes=1)


def place(clock: Path, instant: datetime) -> None:
    tmp = clock.with_suffix(".tmp")
    tmp.write_text(repr((instant - datetime.now(UTC)).total_seconds()))
    tmp.replace(clock)


def test_one_fleet_daemon_runs_a_slot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_dsn: str, not_root: None
) -> None:
    clock = tmp_path / "clock"
    start = minute_boundary()
    place(clock, start - timedelta(seconds=20))
    a = Machine(tmp_path, monkeypatch, "a", pg_dsn, clock_file=clock)
    a.write("tick", minutely())
    a.start()
    place(clock, start + timedelta(seconds=1))
    wait_for(lambda: [r for r, _ in fleet_rows(pg_dsn) if r.status == "ok"], what="a run")
    [(row, machine)] = fleet_rows(pg_dsn)
    assert (row.slot, row.status, machine) == (sid(start), "ok", "a")
    assert a.daemon.stop() == 0
