"""`once = "YYYY-MM-DD HH:MM"`: the routine runs at that time, once, under the real daemon, and
then turns itself off with the reason `list` shows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from routines.ledger import Ledger
from routines.spec.paths import paths
from tests.supervisor.daemonkit import DaemonProcess, state, wait_for, write_routine

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
