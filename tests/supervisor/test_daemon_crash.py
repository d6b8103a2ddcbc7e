"""Crashes, end to end: a real daemon, real workers in the real sandbox, kill -9.

A run left by a dead daemon is interrupted, never replayed; workers die with their supervisor; one
daemon per VINOS_HOME.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil
import pytest

from routines.spec.paths import paths
from tests.supervisor.daemonkit import (
    REPO,
    DaemonProcess,
    command_routine,
    entered,
    final,
    gated,
    processes_with_cmdline,
    release,
    rows,
    sid,
    wait_for,
    write_routine,
)
from tests.supervisor.gates import gate, gate_home

pytestmark = pytest.mark.slow  # real daemons: make test-fast leaves these out


def gone(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def sandboxed(name: str) -> list[psutil.Process]:
    """The routine's command processes (their command line names its gate)."""
    return processes_with_cmdline(str(gate(name)) + "/")


def test_kill9_of_the_daemon_mid_run_then_restart(tmp_path: Path, not_root: None) -> None:
    # Hourly: a minutely slot that comes on its own while the run is held (a loaded machine's
    # minute) would be a second, skipped row.
    hourly = 'cron = "0 * * * *"'
    write_routine("long", command_routine(gated("long"), schedule=hourly, extra=gate_home("long")))
    d = DaemonProcess(tmp_path).start()
    slot = sid(d.to_slot(every=3600))
    wait_for(lambda: entered("long") == 1, what="the command to start")
    [worker] = d.workers()
    assert sandboxed("long"), "the sandboxed command should be visible while it runs"
    d.kill9()

    # Workers die with their supervisor: the worker, bwrap and everything in the sandbox.
    wait_for(lambda: gone(worker.pid) and not sandboxed("long"), what="the run's processes to go")
    got = rows("long")
    assert len(got) == 1, [(r.slot, r.status, r.trigger, r.detail) for r in got]
    [row] = got
    assert row.status == "running"  # nobody was left to record its end
    assert row.run_id is not None and d.proc is not None
    scratch = paths().run_scratch("long", row.run_id)
    assert scratch.is_dir()  # the worker died before it could remove it

    d2 = DaemonProcess(tmp_path).start()
    [row] = wait_for(lambda: final("long"), what="the run to be marked")
    assert (row.status, row.slot) == ("interrupted", slot)
    assert not scratch.exists()  # nothing a sandbox wrote outlives the run but the workspace
    assert f"pid {d.proc.pid}" in (row.detail or "") and "not replayed" in (row.detail or "")

    # Its slot is not run again; the next one runs as usual.
    release("long")
    slot2 = sid(d2.to_slot(every=3600))
    wait_for(lambda: len(final("long")) == 2, what="the next slot's run")
    statuses = [(r.slot, r.status, r.trigger) for r in rows("long")]
    assert statuses == [
        (slot, "interrupted", "schedule"),
        (slot2, "ok", "schedule"),
    ]
    assert entered("long") == 2  # the interrupted slot's command never started again
    assert d2.stop() == 0


def test_kill9_of_a_worker_fails_that_run_and_the_daemon_carries_on(
    tmp_path: Path, not_root: None
) -> None:
    write_routine("victim", command_routine(gated("victim"), extra=gate_home("victim")))
    d = DaemonProcess(tmp_path).start()
    d.to_slot()
    wait_for(lambda: entered("victim") == 1, what="the command to start")
    [worker] = d.workers()
    worker.kill()

    [row] = wait_for(lambda: final("victim"), what="the killed run to be recorded")
    assert row.status == "failed"
    assert "killed by SIGKILL" in (row.detail or "")
    # The sandbox went with its worker (bwrap --die-with-parent).
    wait_for(lambda: not sandboxed("victim"), what="the sandbox to go")
    assert d.request("ping")["pid"] == d.pid

    release("victim")
    slot2 = sid(d.to_slot())
    wait_for(lambda: len(final("victim")) == 2, what="the next slot's run")
    last = rows("victim")[-1]
    assert (last.status, last.slot) == ("ok", slot2)
    assert d.stop() == 0


def test_a_second_daemon_on_the_same_home_exits_with_a_clear_message(
    tmp_path: Path, not_root: None
) -> None:
    d = DaemonProcess(tmp_path).start()
    home = paths().home

    second = DaemonProcess(tmp_path).start(wait=False)
    assert second.proc is not None and second.proc.wait(30) == 1
    assert f"another daemon is already running for {home} (pid {d.pid}" in second.log()

    # Also with another runtime dir (its own socket): the lock in the state dir still holds.
    # (Not below tmp_path: the socket path must fit a Unix socket address.)
    other_runtime = Path(tempfile.mkdtemp(prefix="vinos-run2-"))
    third = DaemonProcess(tmp_path, extra_env={"XDG_RUNTIME_DIR": str(other_runtime)})
    third.start(wait=False)
    assert third.proc is not None and third.proc.wait(30) == 1
    shutil.rmtree(other_runtime)
    assert "another daemon is already running" in third.log()
    assert "ledger" not in third.log().lower()  # refused before touching anything

    assert d.request("ping")["pid"] == d.pid  # the first one is unharmed
    assert d.stop() == 0


def test_a_crash_between_the_claim_and_the_worker_start(tmp_path: Path, not_root: None) -> None:
    write_routine("fenced", command_routine("echo ran"))
    now = datetime.now(UTC)
    slot = now.replace(second=0, microsecond=0) + timedelta(minutes=5)
    # A supervisor claims the slot and dies before it starts a worker (SIGKILL, for real).
    helper = subprocess.run(
        [
            sys.executable,
            str(REPO / "tests/supervisor/schedhelper.py"),
            "crash-after-claim",
            (slot - timedelta(seconds=30)).isoformat(),
            (slot + timedelta(seconds=1)).isoformat(),
        ],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert helper.returncode == -signal.SIGKILL, helper.stderr
    [run_id] = helper.stdout.split()
    [row] = rows("fenced")
    assert (row.run_id, row.status) == (run_id, "queued")

    d = DaemonProcess(tmp_path)
    d.set_offset((slot + timedelta(seconds=5) - datetime.now(UTC)).total_seconds())
    d.start()
    [row] = wait_for(lambda: final("fenced"), what="the claimed run to be marked")
    assert (row.run_id, row.status) == (run_id, "interrupted")
    assert row.slot == sid(slot)

    slot2 = sid(d.to_slot())
    wait_for(lambda: len(final("fenced")) == 2, what="the next slot's run")
    assert [(r.slot, r.status) for r in rows("fenced")] == [
        (sid(slot), "interrupted"),
        (slot2, "ok"),
    ]
    assert d.stop() == 0
