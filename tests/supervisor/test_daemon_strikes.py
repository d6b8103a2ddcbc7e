"""Three strikes with a real daemon: failed and timeout count, ok resets, skipped/missed/interrupted
do not, a failed catch-up run counts once; the third failure in a row disables the routine, records
why and sends a desktop notification through notify-send (here a real stand-in script on PATH that
records its argv); `enable` resets the streak.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from routines.spec.paths import paths
from routines.store import read_json
from tests.helpers import identity
from tests.supervisor.daemonkit import (
    DaemonProcess,
    command_routine,
    entered,
    fake_notify_send,
    final,
    notifications,
    rows,
    sid,
    state,
    wait_for,
    write_routine,
)
from tests.supervisor.gates import gate, gate_home

pytestmark = pytest.mark.slow  # real daemons: make test-fast leaves these out


def moody(name: str) -> str:
    """A command whose mood is a file in its gate (tests/supervisor/gates.py): `pass` → ok,
    `hold` → wait for `go`, neither → fail with exit 3. The routine shows it the gate."""
    d = gate(name)
    return (
        f"if [ -e {d}/pass ]; then echo fine; exit 0; fi; "
        f"if [ -e {d}/hold ]; then echo in >> {d}/entered; "
        f"while [ ! -e {d}/go ]; do sleep 0.05; done; fi; "
        "echo broken >&2; exit 3"
    )


def mood(name: str, which: str | None) -> None:
    d = gate(name)
    for f in ("pass", "hold", "go"):
        (d / f).unlink(missing_ok=True)
    if which:
        (d / which).touch()


def last_run(name: str) -> dict[str, Any]:
    return read_json(paths().last_run(name)) or {}


def test_three_failures_disable_and_notify_and_enable_resets(
    tmp_path: Path, not_root: None
) -> None:
    bin_dir, record = fake_notify_send(tmp_path)
    write_routine("flaky", command_routine(moody("flaky"), extra=gate_home("flaky")))
    write_routine("witness", command_routine("echo here"))
    d = DaemonProcess(tmp_path, extra_env={"PATH": f"{bin_dir}:{os.environ['PATH']}"}).start()
    # Waits read last-run.json, not the ledger: opening the ledger from another process is
    # itself a change the daemon notices, and must not be what makes it see the disable.
    for _ in range(3):
        slot = sid(d.to_slot())
        wait_for(lambda s=slot: last_run("flaky").get("slot") == s, what="a failed run")
        wait_for(lambda s=slot: last_run("witness").get("slot") == s, what="the witness")
    assert last_run("flaky")["status"] == "failed"
    assert "exited with code 3" in last_run("flaky")["error"]
    # The slot after the third failure: the witness runs, the disabled routine does not.
    after = sid(d.to_slot())
    wait_for(lambda: last_run("witness").get("slot") == after, what="the witness")
    assert [r.status for r in rows("flaky")] == ["failed", "failed", "failed"]
    st = state("flaky")
    assert (st.enabled_override, st.failure_streak) == (False, 3)
    assert (st.disabled_reason or "").startswith("3 failed runs in a row; last: ")
    assert "exited with code 3" in (st.disabled_reason or "")
    wait_for(lambda: notifications(record), what="the notification")
    [call] = [c for c in notifications(record) if "flaky disabled" in c]
    assert "--urgency=critical" in call
    assert "vinos-routine enable flaky" in "\n".join(call)

    listed = {r["name"]: r for r in json.loads(d.cli("list", "--json").stdout)}
    assert listed["flaky"]["enabled"] is False
    assert "3 failed runs in a row" in listed["flaky"]["disabled_reason"]
    assert listed["witness"]["enabled"] is True

    mood("flaky", "pass")
    out = d.cli("enable", "flaky")
    assert out.returncode == 0, out.stderr
    st = state("flaky")
    assert (st.enabled_override, st.failure_streak, st.disabled_reason) == (True, 0, None)
    slot = sid(d.to_slot())
    wait_for(lambda: last_run("flaky").get("slot") == slot, what="the run after enable")
    assert [(r.slot, r.status) for r in rows("flaky")][-1] == (slot, "ok")
    assert d.stop() == 0


def test_what_counts_toward_the_streak(tmp_path: Path, not_root: None) -> None:
    five = 'cron = "*/5 * * * *"'
    write_routine(
        "streaky", command_routine(moody("streaky"), schedule=five, extra=gate_home("streaky"))
    )
    d = DaemonProcess(tmp_path)
    t = datetime.now(UTC) + timedelta(minutes=10)
    five_min = datetime.fromtimestamp(int(t.timestamp()) // 300 * 300, UTC)
    d.set_offset((five_min + timedelta(minutes=2, seconds=30) - datetime.now(UTC)).total_seconds())
    d.start()

    def streak() -> tuple[int, bool]:
        st = state("streaky")
        return st.failure_streak, st.enabled(True, identity(paths().routines_dir / "streaky.toml"))

    # A catch-up run standing in for 3 missed slots fails: it counts once.
    d.step(timedelta(minutes=15))
    [run] = wait_for(lambda: final("streaky"), what="the catch-up run")
    assert (run.trigger, run.status) == ("catch_up", "failed")
    assert "stands in for 3 missed runs" in (run.detail or "")
    assert streak() == (1, True)

    d.to_slot(300)
    wait_for(lambda: len(final("streaky")) == 2, what="the second failure")
    assert streak() == (2, True)

    # A run held at the gate: the next slot is skipped, then the daemon is killed, so the
    # run ends interrupted. Neither counts.
    mood("streaky", "hold")
    d.to_slot(300)
    wait_for(lambda: entered("streaky") == 1, what="the held run")
    d.to_slot(300)
    wait_for(lambda: len(final("streaky")) == 3, what="the skipped slot")
    d.kill9()
    d = DaemonProcess(tmp_path).start()
    wait_for(lambda: len(final("streaky")) == 4, what="the interrupted run")
    assert sorted(str(r.status) for r in rows("streaky")[2:]) == ["interrupted", "skipped"]
    assert streak() == (2, True)

    # Missed slots (missed = skip) do not count either.
    write_routine(
        "streaky",
        command_routine(moody("streaky"), schedule=five, missed="skip", extra=gate_home("streaky")),
    )
    wait_for(lambda: d.request("reload")["enabled"] == 1)
    d.step(timedelta(minutes=17, seconds=30))
    wait_for(lambda: rows("streaky")[-1].status == "missed", what="the missed row")
    assert streak() == (2, True)

    # A success resets the streak; a failure after it starts again from one.
    mood("streaky", "pass")
    d.to_slot(300)
    wait_for(lambda: rows("streaky")[-1].status == "ok", what="a success")
    assert streak() == (0, True)
    mood("streaky", None)
    d.to_slot(300)
    wait_for(lambda: rows("streaky")[-1].status == "failed", what="a failure")
    assert streak() == (1, True)
    assert d.stop() == 0
