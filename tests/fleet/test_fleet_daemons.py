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


def pinned(text: str, *to: str) -> str:
    listed = ", ".join(f'"{m}"' for m in to)
    return text.replace("[routine]\n", f"[routine]\nmachines = [{listed}]\n", 1)


def machines(
    tmp: Path, mp: pytest.MonkeyPatch, dsn: str, clock: Path, names: tuple[str, ...]
) -> list[Machine]:
    return [Machine(tmp, mp, n, dsn, clock_file=clock) for n in names]


@pytest.mark.slow
def test_three_machines_run_100_slots_of_5_routines_exactly_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_dsn: str, not_root: None
) -> None:
    """One shared stepped clock (so no machine sees a slot first), 20 minutes of 5 minutely
    routines; one routine is pinned to machine b."""
    clock = tmp_path / "clock"
    start = minute_boundary()
    place(clock, start - timedelta(seconds=30))
    fleet = machines(tmp_path, monkeypatch, pg_dsn, clock, ("a", "b", "c"))
    names = [f"r{i}" for i in range(4)]
    for m in fleet:
        for n in names:
            m.write(n, minutely())
        m.write("pinned", pinned(minutely(), "b"))
    for m in fleet:
        m.start()
    slots = [start + i * MINUTE for i in range(20)]
    for i, slot in enumerate(slots):
        place(clock, slot + timedelta(seconds=1))
        wait_for(
            lambda i=i: sum(r.status == "ok" for r, _ in fleet_rows(pg_dsn)) == 5 * (i + 1),
            what=f"the 5 runs of slot {i}",
        )
    for m in fleet:
        assert m.daemon.stop() == 0
    found = fleet_rows(pg_dsn)
    assert len(found) == 100
    per_slot = Counter((r.routine, r.slot) for r, _ in found)
    assert per_slot == {(n, sid(s)): 1 for n in [*names, "pinned"] for s in slots}
    assert {r.status for r, _ in found} == {"ok"}
    assert {m for r, m in found if r.routine == "pinned"} == {"b"}
    spread = Counter(m for _, m in found)
    assert len(spread) >= 2, spread  # whoever ticks first claims: more than one machine does
