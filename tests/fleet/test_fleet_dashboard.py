"""The dashboard on a fleet machine reads the fleet's ledger (routines/ledger/api.py
`open_ledger`, the CLI's decision too) through the read model (routines/query/), so every page
shows the runs other machines made: the routine's history, the run's own page, the brief and
the costs. A real PostgreSQL cluster and a real dashboard process."""

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
    # A few seconds ago: the brief page shows today's runs (a minute would cross midnight
    # more often than a suite runs then).
    started = datetime.now(UTC) - timedelta(seconds=5)
    made = f"{started.astimezone():%Y-%m-%d-%H%M}.md"  # the output stays on "other"
    run_id = f"{started:%Y%m%dT%H%M%S}-brief-elsewhere"
    other = PgLedger(pg_dsn, "other")
    try:
        other.record_run(
            "brief", run_id=run_id, trigger=Trigger.MANUAL, status=RunStatus.RUNNING, now=started
        )
        other.finish_run(
            run_id,
            RunEnd(RunStatus.OK, dollars=0.25, output_file=f"/elsewhere/brief/{made}"),
            now=started + timedelta(seconds=30),
        )
    finally:
        other.close()
    dashboard = Dashboard(tmp_path / "dashboard.log", env=dict(os.environ)).start()
    try:
        page = dashboard.get("/routine/brief", cookie=True)
        assert page.status == 200, page.body
        assert run_id in page.body  # the other machine's run, from the fleet's ledger
        assert dashboard.get("/", cookie=True).status == 200
        run = dashboard.get(f"/run/{run_id}", cookie=True)
        assert run.status == 200 and run_id in run.body, run.body  # its own page
        brief = dashboard.get("/brief", cookie=True)
        assert 'data-routine="brief"' in brief.body and run_id in brief.body, brief.body
        assert f"{made} cannot be read any more" in brief.body  # the output is over there
        cost = dashboard.get("/cost", cookie=True)
        assert cost.status == 200 and 'data-routine="brief"' in cost.body, cost.body
        assert "$0.25" in cost.body  # its spending counts here too
        assert dashboard.get("/api/pulse", cookie=True).status == 200
    finally:
        dashboard.stop()
