"""A ledger or lock deleted or replaced under the running daemon, with the real daemon: it notices
(device and inode against what it opened), stops scheduling and says so, once, in its log, its
status and a desktop notification (a real notify-send stand-in); and the CLI never creates a second,
empty ledger beside it.

Before: after `rm -r ~/.vinos/routines` the daemon went on with the deleted ledger and lock,
the CLI quietly made a new ledger, and a slot could run twice.

Each step ends with a `reload`, which runs one tick before it answers: had the daemon gone on
scheduling, the slot due at that tick would be queued or running by then.
"""

from __future__ import annotations

import os
import shutil
from datetime import timedelta
from pathlib import Path

import pytest

from routines.spec.paths import paths
from tests.supervisor.daemonkit import (
    DaemonProcess,
    command_routine,
    fake_notify_send,
    final,
    notifications,
    wait_for,
    write_routine,
)

pytestmark = pytest.mark.slow  # real daemons: make test-fast leaves these out


def start(tmp_path: Path) -> tuple[DaemonProcess, Path]:
    bin_dir, record = fake_notify_send(tmp_path)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}"}
    write_routine("ticker", command_routine("echo tick"))
    d = DaemonProcess(tmp_path, extra_env=env).start()
    d.to_slot()
    wait_for(lambda: len(final("ticker")) == 1, what="the first run")
    return d, record


def nothing_scheduled(d: DaemonProcess) -> None:
    d.step(timedelta(seconds=60))  # the next slot is due
    d.request("reload")  # one tick, at the new time
    status = d.request("status")
    assert (status["running"], status["queued"]) == ([], [])
    assert status["status"].startswith("stopped scheduling: ")


def test_a_deleted_routines_dir_stops_scheduling_and_no_second_ledger_appears(
    tmp_path: Path, not_root: None
) -> None:
    d, record = start(tmp_path)
    routines = paths().routines_dir
    shutil.rmtree(routines)
    write_routine("ticker", command_routine("echo tick"))  # the file comes back (a backup)
    nothing_scheduled(d)
    status = d.request("status")
    assert status["lost"].startswith(f"{paths().ledger} was deleted while the daemon ran")
    assert not (paths().state_dir / "ticker").exists()  # no run wrote anything

    for args in (("list",), ("status",), ("history", "ticker"), ("run", "ticker")):
        out = d.cli(*args)
        assert out.returncode == 1, (args, out.stdout, out.stderr)
        assert f"the ledger {paths().ledger} is gone, but the daemon (pid {d.pid})" in out.stderr
    assert not paths().ledger.exists()  # the CLI made no second ledger

    nothing_scheduled(d)
    lines = [ln for ln in d.log().splitlines() if "stopped scheduling" in ln]
    assert len(lines) == 1, d.log()  # said once, not every tick
    calls = [c for c in notifications(record) if "vinos-routine stopped scheduling" in c]
    assert len(calls) == 1
    assert d.stop() == 0


def test_a_replaced_ledger_stops_scheduling_until_it_is_moved_back(
    tmp_path: Path, not_root: None
) -> None:
    d, _ = start(tmp_path)
    ledger = paths().ledger
    aside = ledger.with_name("ledger.db.old")
    ledger.rename(aside)
    ledger.touch()  # another file in its place (nothing here opens it as a ledger)
    nothing_scheduled(d)
    assert d.request("status")["lost"].startswith(f"{ledger} was replaced by another file")
    ran = d.cli("run", "ticker")  # refused by the daemon itself: a file is there
    assert ran.returncode == 1 and "was replaced by another file" in ran.stderr

    aside.replace(ledger)  # the very file it opened is back: it resumes
    d.request("reload")
    assert d.request("status")["lost"] is None
    assert "scheduling resumed" in d.log()
    # The slot that came due while it was stopped is claimed at that tick and runs.
    wait_for(
        lambda: [r.status for r in final("ticker")] == ["ok", "ok"],
        what="a run after the file came back",
    )
    assert d.stop() == 0
