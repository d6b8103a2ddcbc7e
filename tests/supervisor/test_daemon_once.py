"""`once = "YYYY-MM-DD HH:MM"`: the routine runs at that time, once, under the real daemon, and
then turns itself off with the reason `list` shows; a time that passed while the machine slept
is caught up once (missed = "catch_up", the default), then the routine is off all the same.
The daemon's wall clock is stepped through its clock_offset_file (VINOS_DEBUG_TIMINGS)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from routines.ledger import Ledger
from routines.spec.paths import paths
from tests.supervisor.daemonkit import (
    DaemonProcess,
    command_routine,
    final,
    sid,
    state,
    wait_for,
    write_routine,
)

pytestmark = pytest.mark.slow  # a real daemon: make test-fast leaves it out


def test_a_once_routine_runs_at_its_time_then_turns_itself_off(
    tmp_path: Path, not_root: None
) -> None:
    now = datetime.now(UTC)
    at = (now + timedelta(minutes=11)).replace(second=0, microsecond=0)
    once = at.strftime("%Y-%m-%d %H:%M")
    write_routine(
        "xmas",
        '[routine]\nkind = "command"\nenabled = true\n'
        f'[schedule]\nonce = "{once}"\ntimezone = "UTC"\n'
        "[command]\nrun = 'echo ran once'\n",
    )
    d = DaemonProcess(tmp_path).start()
    try:
        assert d.request("status")["next"][0]["routine"] == "xmas"
        d.step(at - now + timedelta(seconds=5))  # the daemon's clock: just past the slot
        ledger = Ledger(paths().ledger)

        def finished() -> list[object]:
            return [r for r in ledger.history("xmas") if r.status == "ok"]

        [row] = wait_for(finished, timeout=60, what="the once run")
        assert row.trigger == "schedule" and row.slot is not None
        st = wait_for(lambda: state("xmas"), what="the routine's state")
        wait_for(lambda: state("xmas").enabled_override is False, what="turned off")
        st = state("xmas")
        assert st.disabled_reason == f"ran once, as scheduled ({once})"
        # Nothing is scheduled for it any more.
        assert all(n["routine"] != "xmas" for n in d.request("status")["next"])
    finally:
        d.stop()


def test_a_once_time_passed_while_asleep_is_caught_up_once_then_off(
    tmp_path: Path, not_root: None
) -> None:
    # Ahead of the real time, so the file is valid ("not in the past") when it is loaded.
    at = (datetime.now(UTC) + timedelta(minutes=11)).replace(second=0, microsecond=0)
    once = at.strftime("%Y-%m-%d %H:%M")
    write_routine(
        "xmas",
        '[routine]\nkind = "command"\nenabled = true\n'
        f'[schedule]\nonce = "{once}"\ntimezone = "UTC"\n'
        "[command]\nrun = 'echo caught up once'\n",
    )
    d = DaemonProcess(tmp_path)
    d.set_offset((at - timedelta(minutes=2) - datetime.now(UTC)).total_seconds())
    d.start()
    try:
        assert d.request("status")["next"][0]["routine"] == "xmas"
        d.step(timedelta(hours=3))  # a laptop waking three hours later: the time is long past
        [run] = wait_for(lambda: final("xmas"), timeout=60, what="the catch-up run")
        assert (run.trigger, run.slot, run.status) == ("catch_up", sid(at), "ok")
        wait_for(lambda: state("xmas").enabled_override is False, what="turned off")
        assert state("xmas").disabled_reason == f"ran once, as scheduled ({once})"
        assert all(n["routine"] != "xmas" for n in d.request("status")["next"])
        # Another day on, and a reload (the file is re-read, its time now in the past): the
        # routine stays off and runs no more. An every-minute witness shows the daemon has
        # ticked past that day before the count is checked.
        day_on = (d.now() + timedelta(days=1, minutes=1)).replace(second=0, microsecond=0)
        d.step(day_on - timedelta(seconds=5) - d.now())  # 5 s before a minute boundary
        write_routine("witness", command_routine("echo tick"))
        d.request("reload")
        wait_for(lambda: final("witness"), timeout=60, what="a witness run a day later")
        assert [r.id for r in final("xmas")] == [run.id]
        assert all(n["routine"] != "xmas" for n in d.request("status")["next"])
    finally:
        d.stop()
