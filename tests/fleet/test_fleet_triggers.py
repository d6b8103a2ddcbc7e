"""Events are claimed like slots across a fleet: an upstream run on one machine starts its
follower once, on whichever machine claims its event first (real daemons, real PostgreSQL)."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest

from tests.fleet.fleetkit import Machine, fleet_rows, minute_boundary, minutely, wait_logged
from tests.fleet.test_fleet_daemons import pinned, place

MACHINES: list[Machine] = []

FOLLOWER = """[routine]
kind = "command"
enabled = true
[trigger]
after = ["up"]
[command]
run = "echo followed"
"""


@pytest.mark.slow
def test_each_upstream_run_starts_its_follower_once_across_the_fleet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_dsn: str, not_root: None
) -> None:
    clock = tmp_path / "clock"
    start = minute_boundary()
    place(clock, start - timedelta(seconds=30))
    fleet = [Machine(tmp_path, monkeypatch, n, pg_dsn, clock_file=clock) for n in ("a", "b")]
    MACHINES[:] = fleet
    for m in fleet:
        m.write("up", pinned(minutely(), "a"))  # upstream on a; its follower anywhere
        m.write("down", FOLLOWER)
    for m in fleet:
        m.start()
    slots = [start + timedelta(minutes=i) for i in range(5)]

    def followed() -> int:
        return sum(r.status == "ok" for r, _ in fleet_rows(pg_dsn, "down"))

    for i, slot in enumerate(slots):
        place(clock, slot + timedelta(seconds=1))
        want = i + 1
        wait_logged(lambda: followed() == want, f"the follower of upstream run {i}", fleet)  # noqa: B023
    for m in fleet:
        assert m.daemon.stop() == 0
    ups = [r for r, _ in fleet_rows(pg_dsn, "up")]
    downs = fleet_rows(pg_dsn, "down")
    assert len(ups) == 5
    assert Counter(r.slot for r, _ in downs) == {f"after:{u.run_id}": 1 for u in ups}
    assert {r.trigger for r, _ in downs} == {"after"}
