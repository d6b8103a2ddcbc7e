"""The dashboard on a fleet machine reads the fleet's ledger (routines/ledger/api.py
`open_ledger`, the CLI's decision too), so it shows the runs other machines made. A real
PostgreSQL cluster and a real dashboard process."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from routines.ledger.postgres import PgLedger
from routines.runs import RunEnd, RunStatus, Trigger
from tests.dashboard.dashkit import Dashboard
from tests.fleet.fleetkit import Machine, minutely


def test_the_dashboard_of_a_fleet_machine_shows_a_run_made_on_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_dsn: str, not_root: None
) -> None:
    here = Machine(tmp_path, monkeypatch, "here", pg_dsn)
    here.write("brief", minutely())
    monkeypatch.setenv("VINOS_HOME", str(here.paths.home))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(here.paths.runtime_dir.parent))
    monkeypatch.setenv("VINOS_FLEET_DATABASE", pg_dsn)
    started = datetime.now(UTC) - timedelta(minutes=5)
    run_id = f"{started:%Y%m%dT%H%M%S}-brief-elsewhere"
    other = PgLedger(pg_dsn, "other")
    try:
        other.record_run(
            "brief", run_id=run_id, trigger=Trigger.MANUAL, status=RunStatus.RUNNING, now=started
        )
        other.finish_run(
            run_id, RunEnd(RunStatus.OK, dollars=0.25), now=started + timedelta(seconds=30)
        )
    finally:
        other.close()
    dashboard = Dashboard(tmp_path / "dashboard.log", env=dict(os.environ)).start()
    try:
        page = dashboard.get("/routine/brief", cookie=True)
        assert page.status == 200, page.body
        assert run_id in page.body  # the other machine's run, from the fleet's ledger
        assert dashboard.get("/", cookie=True).status == 200
        assert dashboard.get("/cost", cookie=True).status == 200
        assert dashboard.get("/api/pulse", cookie=True).status == 200
    finally:
        dashboard.stop()
