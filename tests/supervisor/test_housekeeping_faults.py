"""Housekeeping on a disk that is full for a moment: the failed batch is tried again with a
back-off (5 s, then doubling), not an hour later. On a real full tmpfs: a process of its own
under bwrap (unprivileged, in a user namespace) with a small tmpfs for the ledger, driving
`Housekeeper.run` with a recording sleep in place of the real one (so no test waits)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from routines.ledger import Ledger, LedgerUnavailable, Unavailable
from routines.runs import RunEnd, RunStatus, Trigger
from routines.spec.config import LedgerSettings
from supervisor.engine.clock import SystemClock
from supervisor.engine.housekeeping import IDLE_PAUSE_SEC, START_DELAY_SEC, Housekeeper, retry_after
from tests.supervisor.daemonkit import REPO

SCRIPT = r"""
import asyncio, errno, json, os, sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from routines.spec.config import LedgerSettings
from routines.ledger import Ledger
from routines.runs import RunEnd, RunStatus, Trigger
from supervisor.engine.clock import SystemClock
from supervisor.engine.housekeeping import Housekeeper

d = Path(sys.argv[1])
ledger = Ledger(d / "ledger.db")
old = datetime.now(UTC) - timedelta(days=200)
for i in range(600):
    at = old + timedelta(minutes=i)
    ledger.record_run("x", run_id=f"r{i}", trigger="manual", status=RunStatus.QUEUED, now=at)
    ledger.finish_run(f"r{i}", RunEnd(RunStatus.OK, "done"), now=at)
ledger._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the next write must grow the WAL
filler = d / "filler"
fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
for size in (65536, 512, 1):
    try:
        while True:
            os.write(fd, b"\0" * size)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
os.close(fd)
pauses = []

async def sleep(seconds):
    pauses.append(seconds)
    if len(pauses) == 2:
        filler.unlink()  # space returns during the first retry's pause
    if len(pauses) == 3:
        raise asyncio.CancelledError

keeper = Housekeeper(ledger, str(d), LedgerSettings(), SystemClock())
try:
    asyncio.run(keeper.run(sleep))
except asyncio.CancelledError:
    pass
print(json.dumps({"pauses": pauses, "days": len(ledger.days("x", 1000)),
                  "whole": len(ledger.history("x", 1000))}))
"""


def test_a_transient_full_disk_during_compaction_retries_in_seconds(
    tmp_path: Path, not_root: None
) -> None:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        pytest.fail("bwrap is missing: install bubblewrap (scripts/system-deps.sh)")
    disk = tmp_path / "disk"
    disk.mkdir()
    done = subprocess.run(
        [
            *(bwrap, "--dev-bind", "/", "/", "--size", str(8 << 20), "--tmpfs", str(disk)),
            *(sys.executable, "-c", SCRIPT, str(disk)),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "VINOS_HOME": str(tmp_path)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    # The start delay, the first retry 5 s after the full disk, then the next paced batch.
    assert out["pauses"][:2] == [START_DELAY_SEC, 5.0]
    assert out["pauses"][2] < IDLE_PAUSE_SEC
    assert "trying again in 5 s" in done.stderr
    assert out["days"] > 0  # the retry compacted


def test_retry_after_backs_off_for_passing_faults_only() -> None:
    full = LedgerUnavailable(Unavailable.DISK_FULL, "full")
    assert [retry_after(full, n) for n in (1, 2, 3)] == [5.0, 10.0, 20.0]
    assert retry_after(full, 40) == IDLE_PAUSE_SEC
    assert retry_after(OSError(28, "No space left on device"), 1) == 5.0
    damaged = LedgerUnavailable(Unavailable.CORRUPT, "damaged")
    assert retry_after(damaged, 1) == IDLE_PAUSE_SEC
    assert retry_after(ValueError("a bug"), 1) == IDLE_PAUSE_SEC


def test_housekeeping_on_a_read_only_ledger_retries_in_seconds(
    tmp_path: Path, not_root: None
) -> None:
    """A ledger chmod 0400 for a while (a backup tool, a mistaken chmod) is a passing fault,
    as a full disk is: housekeeping tries again 5 s later, not an hour. On a real file, with
    a recording sleep in place of the real one: the mode comes back during the first retry's
    pause, and the retry compacts."""
    path = tmp_path / "ledger.db"
    with Ledger(path) as setup:
        old = datetime.now(UTC) - timedelta(days=200)
        for i in range(20):
            at = old + timedelta(minutes=i)
            setup.record_run("x", run_id=f"r{i}", trigger=Trigger.MANUAL, status=RunStatus.QUEUED,
                             now=at)  # fmt: skip
            setup.finish_run(f"r{i}", RunEnd(RunStatus.OK, "done"), now=at)
    path.chmod(0o400)
    ledger = Ledger(path, wait=True)
    pauses: list[float] = []

    async def sleep(seconds: float) -> None:
        pauses.append(seconds)
        if len(pauses) == 2:
            path.chmod(0o600)  # the mode is restored during the first retry's pause
        if len(pauses) == 3:
            raise asyncio.CancelledError

    keeper = Housekeeper(ledger, str(tmp_path), LedgerSettings(), SystemClock())
    try:
        with pytest.raises(asyncio.CancelledError):
            asyncio.run(keeper.run(sleep))
    finally:
        path.chmod(0o600)
    assert pauses[:2] == [START_DELAY_SEC, 5.0]
    assert len(ledger.days("x", 99)) > 0  # the retry compacted
    ledger.close()


def test_a_read_only_ledger_backs_off_as_the_other_passing_faults_do() -> None:
    read_only = LedgerUnavailable(Unavailable.READ_ONLY, "read-only")
    assert [retry_after(read_only, n) for n in (1, 2, 3)] == [5.0, 10.0, 20.0]
