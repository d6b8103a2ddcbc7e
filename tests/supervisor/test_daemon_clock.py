"""A real daemon whose wall clock is stepped (its clock_offset_file, VINOS_DEBUG_TIMINGS): NTP
steps, a laptop waking after hours, a clock set years ahead and corrected: the clock is re-read
each tick, a late slot is missed or caught up once, a claimed slot never reruns. Command
routines, so no model is involved.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from supervisor.engine.plan import MISSED_CAP
from tests.supervisor.daemonkit import (
    DaemonProcess,
    command_routine,
    final,
    rows,
    sid,
    wait_for,
    write_routine,
)

pytestmark = pytest.mark.slow  # real daemons: make test-fast leaves these out

MINUTE = timedelta(minutes=1)


def place(d: DaemonProcess, instant: datetime) -> None:
    """Set the daemon's clock to `instant` (before it starts, or as a step while it runs)."""
    d.set_offset((instant - datetime.now(UTC)).total_seconds())


def boundary(every: timedelta, ahead: timedelta = timedelta(minutes=10)) -> datetime:
    """A multiple of `every` (UTC) some way ahead of the real time."""
    t = datetime.now(UTC) + ahead
    step = int(every.total_seconds())
    return datetime.fromtimestamp(int(t.timestamp()) // step * step, UTC)


def ping_answers(d: DaemonProcess) -> bool:
    with d.client() as c:
        return bool(c.request("ping")["pid"] == d.pid)


def test_a_90_second_step_forward_misses_nothing(tmp_path: Path, not_root: None) -> None:
    write_routine("minutely", command_routine("echo tick"))
    write_routine("fively", command_routine("echo tock", schedule='cron = "*/5 * * * *"'))
    d = DaemonProcess(tmp_path)
    slot = boundary(5 * MINUTE)
    place(d, slot - timedelta(seconds=50))
    d.start()
    d.step(timedelta(seconds=90))  # now slot + 40 s: one slot of each was stepped over
    wait_for(lambda: final("minutely") and final("fively"), what="both runs")
    for name in ("minutely", "fively"):
        [row] = rows(name)
        assert (row.slot, row.trigger, row.status) == (sid(slot), "schedule", "ok")
    assert d.request("status")["running"] == []
    assert d.stop() == 0


def test_a_step_back_of_an_hour_reruns_no_claimed_slot(tmp_path: Path, not_root: None) -> None:
    write_routine("steady", command_routine("echo steady"))
    d = DaemonProcess(tmp_path)
    place(d, boundary(MINUTE) - timedelta(seconds=30))
    d.start()
    first = sid(d.to_slot())
    wait_for(lambda: len(final("steady")) == 1, what="the first run")
    second = sid(d.to_slot())
    wait_for(lambda: len(final("steady")) == 2, what="the second run")

    d.step(-timedelta(hours=1))
    # A routine that appears now, while the clock is back, is a witness that the daemon
    # ticks (and plans every routine) in the stepped-back hour.
    write_routine("witness", command_routine("echo here"))
    wait_for(lambda: "witness" in [n["routine"] for n in d.request("status")["next"]])
    d.to_slot()
    wait_for(lambda: final("witness"), what="the witness run")
    assert [r.slot for r in rows("steady")] == [first, second]
    assert {n["routine"]: n["at"] for n in d.request("status")["next"]}["steady"] == (
        datetime.strptime(second, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC) + MINUTE
    ).isoformat()

    # Forward again past where it was: the claimed slots stay done, the next one runs.
    d.step(timedelta(hours=1))
    third = sid(d.to_slot())
    wait_for(lambda: len(final("steady")) == 3, what="the next new slot")
    assert [(r.slot, r.status) for r in rows("steady")] == [
        (first, "ok"),
        (second, "ok"),
        (third, "ok"),
    ]
    assert d.stop() == 0


def test_a_three_hour_jump_over_a_quarter_hourly_routine(tmp_path: Path, not_root: None) -> None:
    quarter = 'cron = "*/15 * * * *"'
    write_routine("catchup", command_routine("echo caught up", schedule=quarter))
    write_routine("skipper", command_routine("echo ran", schedule=quarter, missed="skip"))
    q = boundary(15 * MINUTE)
    d = DaemonProcess(tmp_path)
    place(d, q + timedelta(minutes=7, seconds=30))  # mid-interval
    d.start()
    d.step(timedelta(hours=3))  # a laptop waking up three hours later
    [run] = wait_for(lambda: final("catchup"), what="the catch-up run")
    assert (run.trigger, run.slot, run.status) == ("catch_up", sid(q + timedelta(hours=3)), "ok")
    assert "stands in for 12 missed runs" in (run.detail or "")
    [missed] = rows("skipper")
    assert (missed.status, missed.slot, missed.detail) == (
        "missed",
        sid(q + timedelta(hours=3)),
        "12 missed runs",
    )
    assert len(rows("catchup")) == 1  # one run, not twelve
    assert d.stop() == 0


def test_years_ahead_then_corrected(tmp_path: Path, not_root: None) -> None:
    # Hourly, and every instant here 30 s after an hour's slot: nothing comes due for 59
    # minutes but the slots the steps make due. (Minutely, with the step landing anywhere in
    # a minute, the years-ahead clock's next slot came due while the first runs ended, under
    # load: a second, rightful row where the test counted one. The plan makes one run of
    # ten thousand missed slots: tests/supervisor/test_plan.py.)
    hourly = 'cron = "0 * * * *"'
    write_routine("often", command_routine("echo often", schedule=hourly))
    write_routine("often-skip", command_routine("echo often", schedule=hourly, missed="skip"))
    d = DaemonProcess(tmp_path)
    hour = timedelta(hours=1)
    place(d, boundary(hour, ahead=timedelta(0)) + timedelta(seconds=30))
    d.start()
    real_offset = float(d.clock_file.read_text())
    years = boundary(hour, ahead=timedelta(days=3 * 365 + 1)) + timedelta(seconds=30)
    place(d, years)  # 26,000-odd hourly slots stepped over
    # often-skip's `missed` row is final at once; wait for its run too.
    wait_for(lambda: final("often") and len(final("often-skip")) == 2, what="the runs years ahead")
    assert ping_answers(d)
    [run] = rows("often")
    assert f"{MISSED_CAP:,}+ missed runs" in (run.detail or "")
    missed, ran = rows("often-skip")
    assert (missed.status, missed.detail) == ("missed", f"{MISSED_CAP:,}+ missed runs")
    assert ran.status == "ok"

    d.set_offset(real_offset)  # corrected
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:  # answers all along, tick after tick
        assert ping_answers(d)
        status = d.request("status")
        assert datetime.fromisoformat(status["now"]) < datetime.now(UTC) + timedelta(days=1)
    # Bounded: three rows for the years ahead, not one per missed slot, and none since.
    assert len(rows()) == 3, [(r.routine, r.started_at, r.status) for r in rows()]
    assert d.stop() == 0
