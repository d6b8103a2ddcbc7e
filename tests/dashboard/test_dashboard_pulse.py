"""The overview's short poll (dashboard/static/live.js) refreshes only when /api/pulse
changes: it must change when a run starts and ends, and a page carries the pulse it was drawn
at (`data-at`), which the script starts from. Before, the script took its first poll as the
baseline: a run that started while the page rendered left it showing "queued" for good
(tests/dashboard/test_dashboard_browser.py::test_a_person_enables_runs_and_reads_a_routine
failed so). A real daemon and the real dashboard over plain HTTP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from routines.ledger import Ledger
from routines.spec.paths import paths
from tests.dashboard.dashkit import Dashboard
from tests.supervisor.daemonkit import (
    DaemonProcess,
    command_routine,
    entered,
    final,
    gated,
    release,
    wait_for,
    write_routine,
)
from tests.supervisor.gates import gate_home

pytestmark = pytest.mark.slow  # real daemons: make test-fast leaves these out


def pulse(dash: Dashboard) -> str:
    reply = dash.get("/api/pulse", cookie=True)
    assert reply.status == 200, reply.body
    value: str = json.loads(reply.body)["pulse"]
    return value


def status(run_id: str) -> str:
    with Ledger(paths().ledger) as ledger:
        row = ledger.run(run_id)
    assert row is not None
    return str(row.status)


def test_the_pulse_changes_when_a_run_starts_and_when_it_ends(
    tmp_path: Path, not_root: None, dashboard: Dashboard
) -> None:
    write_routine(
        "hello",
        command_routine(gated("hello"), schedule='cron = "0 3 * * *"', extra=gate_home("hello")),
    )
    d = DaemonProcess(tmp_path).start()
    try:
        before = pulse(dashboard)
        assert f'data-at="{before}"' in dashboard.get("/", cookie=True).body
        run_id = d.request("run", {"name": "hello", "detach": True})["run_id"]
        wait_for(lambda: entered("hello") == 1, what="the command's start")
        assert status(run_id) == "running"
        running = pulse(dashboard)
        assert running != before
        assert f'data-at="{running}"' in dashboard.get("/", cookie=True).body
        page = dashboard.get(f"/run/{run_id}", cookie=True).body
        assert 'data-at="running:' in page, page
        release("hello")
        wait_for(lambda: final("hello"), what="the run's end")
        assert pulse(dashboard) not in (before, running)
    finally:
        d.stop()
