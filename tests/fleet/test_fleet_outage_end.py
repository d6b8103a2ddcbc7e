"""A run's real end wins after a fleet database outage (supervisor/fleet/plan.py `may_reap`,
routines/ledger/shared.py `real_end_wins`). Real daemons, a real cluster stopped for longer
than a lease while runs finish."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.fleet.fleetkit import Machine, fleet_rows, minute_boundary, minutely, wait_logged
from tests.fleet.pgcluster import Cluster
from tests.fleet.test_fleet_daemons import pinned, place
from tests.supervisor.daemonkit import sid

MACHINES: list[Machine] = []


def wait_for(predicate: Any, what: str) -> Any:
    return wait_logged(predicate, what, MACHINES)


@pytest.mark.slow
def test_runs_that_finished_during_an_outage_are_recorded_as_they_ended(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    pg_cluster: Cluster,
    pg_dsn: str,
    not_root: None,
) -> None:
    """Machine b runs two routines; the database stops; both runs finish `ok` inside their
    leases, and b keeps the results. The outage outlasts the leases. Machine a, which ticks
    often, sees the database back first; b ticks slowly (its loop's connection backs off up to
    its tick, 20 s). Both runs are recorded `ok`, never `interrupted (lease lost)`: a waits a
    renewal period or two after the return before it ends a lapsed lease, and b's heartbeat,
    retrying every period, renews its leases within one."""
    gates = tmp_path / "gates"
    gates.mkdir()
    clock = tmp_path / "clock"
    start = minute_boundary()
    place(clock, start - timedelta(seconds=30))
    worker = ("gated", str(gates))
    a = Machine(tmp_path, monkeypatch, "a", pg_dsn, clock_file=clock, worker=worker)
    b = Machine(tmp_path, monkeypatch, "b", pg_dsn, clock_file=clock, worker=worker)
    # b's loop retries the database every 20 s: only its heartbeat sees the return in time.
    b.daemon.timings["tick_max_sec"] = 20.0
    MACHINES[:] = [a, b]
    for m in (a, b):
        for name in ("held-one", "held-two"):
            m.write(name, pinned(minutely(), "b"))
        m.start()
    place(clock, start + timedelta(seconds=1))
    for name in ("held-one", "held-two"):
        wait_for((gates / f"{name}.entered").exists, what=f"{name} to start on b")
    pg_cluster.stop()
    try:
        for name in ("held-one", "held-two"):
            (gates / f"{name}.go").touch()  # both end inside their leases (deadline 2 s)
        # Longer than a lease (3 s) and its take-over margin: every lease lapsed meanwhile.
        time.sleep(8)
    finally:
        pg_cluster.restart()
    wait_for(
        lambda: (
            all(r.status not in ("queued", "running") for r, _ in fleet_rows(pg_dsn))
            and len(fleet_rows(pg_dsn)) == 2
        ),
        what="both runs' ends written",
    )
    ends = {(r.routine, r.slot, r.status, m) for r, m in fleet_rows(pg_dsn)}
    assert ends == {(n, sid(start), "ok", "b") for n in ("held-one", "held-two")}, ends
    assert a.daemon.stop() == 0
    assert b.daemon.stop() == 0


@pytest.mark.slow
def test_reload_reaches_the_offline_pool(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    pg_cluster: Cluster,
    pg_dsn: str,
    not_root: None,
) -> None:
    """max_concurrent reloaded from 1 to 4 while the database is away: the offline runs are the
    daemon's one pool's (its `status` shows them), which runs the queued one now, beside the
    one running (a second pool kept the settings of the outage's start)."""
    gates = tmp_path / "gates"
    gates.mkdir()
    clock = tmp_path / "clock"
    start = minute_boundary()
    place(clock, start - timedelta(seconds=30))
    a = Machine(tmp_path, monkeypatch, "a", pg_dsn, clock_file=clock, worker=("gated", str(gates)))
    MACHINES[:] = [a]
    fleet_table = a.paths.config_file.read_text()
    a.paths.config_file.write_text("max_concurrent = 1\n" + fleet_table)
    for name in ("held-one", "held-two"):
        a.write(name, pinned(minutely(), "a"))
    a.start()
    pg_cluster.stop()
    try:
        wait_for(lambda: "on this machine while the fleet" in a.daemon.log(), what="offline")
        place(clock, start + timedelta(seconds=1))
        entered = [gates / f"{n}.entered" for n in ("held-one", "held-two")]
        wait_for(lambda: any(e.exists() for e in entered), what="one offline run")
        time.sleep(1)
        assert sum(e.exists() for e in entered) == 1  # one at a time
        status = a.daemon.request("status")
        held = {"held-one", "held-two"}
        assert {e["routine"] for e in status["running"] + status["queued"]} == held
        assert len(status["running"]) == 1
        a.paths.config_file.write_text("max_concurrent = 4\n" + fleet_table)
        a.daemon.request("reload")
        # At once (a tick), not when the outage's pool is rebuilt at the database's return.
        wait_logged(lambda: all(e.exists() for e in entered), "the queued run", MACHINES, 10)
        assert {e["routine"] for e in a.daemon.request("status")["running"]} == held
        for name in ("held-one", "held-two"):
            (gates / f"{name}.go").touch()
    finally:
        pg_cluster.restart()
    assert a.daemon.stop() == 0
