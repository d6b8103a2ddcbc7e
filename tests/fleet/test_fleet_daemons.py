"""Real daemons, several machines, one real PostgreSQL database: a slot runs once across them."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from routines.runs import ACTIVE
from tests.fleet.fleetkit import Machine, fleet_rows, minute_boundary, minutely
from tests.supervisor.daemonkit import sid, wait_for

MINUTE = timedelta(minutes=1)
C_AHEAD = timedelta(seconds=90)  # how far machine c's clock runs ahead of a's


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
    # psycopg only with [fleet] (tests/supervisor/test_daemon_agent.py: none without it).
    assert a.daemon.request("ping")["loaded_modules"] == ["psycopg"]
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


def offsets(clocks: dict[Path, float], instant: datetime) -> None:
    """Put each clock at `instant` plus its own skew (seconds)."""
    for clock, skew in clocks.items():
        place(clock, instant + timedelta(seconds=skew))


@pytest.mark.slow
def test_a_machine_killed_mid_run_is_interrupted_after_its_lease_never_replayed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_dsn: str, not_root: None
) -> None:
    gates = tmp_path / "gates"
    gates.mkdir()
    clock = tmp_path / "clock"
    start = minute_boundary()
    place(clock, start - timedelta(seconds=30))
    a = Machine(tmp_path, monkeypatch, "a", pg_dsn, clock_file=clock, worker=("gated", str(gates)))
    b = Machine(tmp_path, monkeypatch, "b", pg_dsn, clock_file=clock, worker=("gated", str(gates)))
    # Pinned to a for the first slot, so a is the one that dies mid-run.
    a.write("held", pinned(minutely(), "a"))
    b.write("held", pinned(minutely(), "a"))
    a.start()
    b.start()
    place(clock, start + timedelta(seconds=1))
    wait_for((gates / "held.entered").exists, what="a's run to start")
    a.daemon.kill9()
    wait_for(
        lambda: [r for r, _ in fleet_rows(pg_dsn) if r.status == "interrupted"],
        what="b to end a's run once its lease lapsed",
    )
    [(row, machine)] = fleet_rows(pg_dsn)
    assert (row.slot, row.status, machine) == (sid(start), "interrupted", "a")
    assert "lease" in (row.detail or "")
    # The row is written before the line is logged: wait for the line, never race it.
    wait_for(lambda: "interrupted: its lease lapsed" in b.daemon.log(), what="b's log line")
    # b takes the routine over from the next slot (the file now lets any machine run it);
    # the interrupted slot is never run again.
    (gates / "held.go").touch()
    for m in (a, b):
        m.write("held", minutely())
    # a's definition (pinned) no longer counts once its heartbeat is a lease old.
    wait_for(lambda: b.daemon.request("status")["fleet"]["held"] == {}, what="b to agree")
    place(clock, start + MINUTE + timedelta(seconds=1))
    wait_for(lambda: [r for r, _ in fleet_rows(pg_dsn) if r.status == "ok"], what="the next slot")
    slots = Counter(r.slot for r, _ in fleet_rows(pg_dsn))
    assert slots == {sid(start): 1, sid(start + MINUTE): 1}
    assert b.daemon.stop() == 0


@pytest.mark.slow
def test_postgresql_stopped_mid_run_no_double_run_no_lost_record_and_resume(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    pg_cluster: object,
    pg_dsn: str,
    not_root: None,
) -> None:
    from tests.fleet.pgcluster import Cluster

    assert isinstance(pg_cluster, Cluster)
    gates = tmp_path / "gates"
    gates.mkdir()
    clock = tmp_path / "clock"
    start = minute_boundary()
    place(clock, start - timedelta(seconds=30))
    a = Machine(tmp_path, monkeypatch, "a", pg_dsn, clock_file=clock, worker=("gated", str(gates)))
    b = Machine(tmp_path, monkeypatch, "b", pg_dsn, clock_file=clock, worker=("gated", str(gates)))
    for m in (a, b):
        m.write("held", minutely())
    a.start()
    b.start()
    place(clock, start + timedelta(seconds=1))
    wait_for((gates / "held.entered").exists, what="the run to start")
    pg_cluster.stop()
    try:
        (gates / "held.go").touch()  # the run finishes while the database is away
        for m in (a, b):
            wait_for(
                lambda m=m: "no fleet routine runs" in m.daemon.log(), what=f"{m.name} to notice"
            )
        place(clock, start + MINUTE + timedelta(seconds=1))  # a slot due during the outage
        wait_for(
            lambda: any(m.daemon.request("status")["unwritten"] for m in (a, b)),
            what="the finished run kept in memory",
        )
    finally:
        pg_cluster.restart()
    # The kept record is written; the slot due during the outage is handled once when the
    # database is back (run, or skipped if the first run's record was not in yet: overlap is
    # fleet-wide); once both have ended, the next slot runs.
    wait_for(
        lambda: (
            (sid(start), "ok") in {(r.slot, r.status) for r, _ in fleet_rows(pg_dsn)}
            and {r.slot for r, _ in fleet_rows(pg_dsn) if r.status not in ACTIVE}
            == {sid(start), sid(start + MINUTE)}
        ),
        what="the kept record and the slot due during the outage",
    )
    place(clock, start + 2 * MINUTE + timedelta(seconds=1))
    wait_for(
        lambda: [r for r, _ in fleet_rows(pg_dsn) if r.slot == sid(start + 2 * MINUTE)
                 and r.status == "ok"],
        what="the next slot to run",
    )  # fmt: skip
    found = fleet_rows(pg_dsn)
    assert Counter(r.slot for r, _ in found) == {sid(start + i * MINUTE): 1 for i in range(3)}
    first = next(r for r, _ in found if r.slot == sid(start))
    assert (first.status, first.detail) == ("ok", "all good")
    for m in (a, b):
        assert m.daemon.stop() == 0
        log = m.daemon.log()
        said = [line for line in log.splitlines() if "no fleet routine runs" in line]
        assert [line.split(":", 1)[0] for line in said] == [  # logged and notified, once
            "ERROR vinos.daemon",
            "INFO vinos.notify",
        ], log
        assert "the fleet database is back" in log


def ended_ok(dsn: str, want: set[tuple[str, str | None]]) -> bool:
    """Whether each (routine, slot) of `want` has a run ended ok, and no run is going."""
    rows = fleet_rows(dsn)
    done = {(r.routine, r.slot) for r, _ in rows if r.status == "ok"}
    return want <= done and not any(r.status in ACTIVE for r, _ in rows)


@pytest.mark.slow
def test_a_machine_whose_clock_is_90_s_ahead_still_runs_each_slot_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_dsn: str, not_root: None
) -> None:
    clocks = {tmp_path / "clock-a": 0.0, tmp_path / "clock-c": C_AHEAD.total_seconds()}
    start = minute_boundary()
    offsets(clocks, start - timedelta(seconds=150))
    fleet = [
        Machine(tmp_path, monkeypatch, n, pg_dsn, clock_file=c)
        for n, c in zip(("a", "c"), clocks, strict=True)
    ]
    for m in fleet:
        m.write("tick", minutely())
        m.write("tock", minutely())
        m.start()
    # c starts on the minute before the first slot, and runs it: it must have ended before the
    # first step, or c rightly skips the first slot ("previous run still going").
    names = ("tick", "tock")
    wait_for(lambda: ended_ok(pg_dsn, {(n, sid(start - MINUTE)) for n in names}), what="c's start")
    # The clocks move 30 s a step, as real ones do (a 60 s jump would fold two slots into one
    # run: the single-machine rule for a clock stepped forward). c sees each slot 90 s before
    # a does; a plans it too once its own clock gets there, and the fence refuses it.
    slots = [start + i * MINUTE for i in range(10)]
    t = start - timedelta(seconds=89)
    while t <= slots[-1] + timedelta(seconds=1):
        offsets(clocks, t)
        # The very slots c has seen, by name, ended, and nothing going: a count of ok rows was
        # also met by the run of the minute c started in, and the next step could come while a
        # run still went, so c skipped that slot ("previous run still going"), rightly.
        seen_by_c = {(n, sid(s)) for n in names for s in slots if s <= t + C_AHEAD}
        wait_for(
            lambda want=seen_by_c: ended_ok(pg_dsn, want),
            what=f"the slots c has seen at {t}",
        )
        t += timedelta(seconds=30)
    for m in fleet:
        assert m.daemon.stop() == 0
    found = fleet_rows(pg_dsn)
    per_slot = Counter((r.routine, r.slot) for r, _ in found)
    assert set(per_slot.values()) == {1}
    assert {(n, sid(s)) for n in ("tick", "tock") for s in slots} <= set(per_slot)
    assert {r.trigger for r, _ in found} == {"schedule"}
    assert {m for _, m in found} == {"c"}  # the machine ahead is always first
    assert "already handled elsewhere" in fleet[0].daemon.log()  # a tried; the fence said no


@pytest.mark.slow
def test_a_divergent_routine_runs_nowhere_and_is_shown_until_the_files_agree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_dsn: str, not_root: None
) -> None:
    clock = tmp_path / "clock"
    start = minute_boundary()
    place(clock, start - timedelta(seconds=30))
    a, b = (Machine(tmp_path, monkeypatch, n, pg_dsn, clock_file=clock) for n in "ab")
    for m in (a, b):
        m.write("witness", minutely())
    a.write("split", minutely("echo one"))
    b.write("split", minutely("echo two"))
    a.start()
    b.start()
    for m in (a, b):
        wait_for(lambda m=m: "split" in m.daemon.request("status")["fleet"]["held"])
    why = a.daemon.request("status")["fleet"]["held"]["split"]
    assert why == "the routine file differs between machines: a / b"
    place(clock, start + timedelta(seconds=1))
    wait_for(lambda: [r for r, _ in fleet_rows(pg_dsn) if r.status == "ok"], what="the witness")
    assert {r.routine for r, _ in fleet_rows(pg_dsn)} == {"witness"}

    b.write("split", minutely("echo one"))  # the user's sync catches up
    for m in (a, b):
        wait_for(lambda m=m: m.daemon.request("status")["fleet"]["held"] == {})
    place(clock, start + MINUTE + timedelta(seconds=1))
    wait_for(lambda: [r for r, _ in fleet_rows(pg_dsn, "split") if r.status == "ok"], what="split")
    assert [r.slot for r, _ in fleet_rows(pg_dsn, "split")] == [sid(start + MINUTE)]
    for m in (a, b):
        assert m.daemon.stop() == 0
