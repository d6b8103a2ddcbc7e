"""Storage faults at start-up and after: each is a named pause that says what to do and when it
retries, and ends by itself; never a crash, a restart loop or advice that costs the history.

On real files: a full tmpfs of the daemon's own (the daemon under bwrap, unprivileged, as in
test_reliability_full_disk.py), and a ledger chmod 0400.

Before: on a full disk with an existing ledger the daemon exited with "cannot use the ledger
(disk I/O error) … If it is damaged, move it aside"; with a fresh home it crashed in
owner.acquire_locks (ENOSPC); after `chmod 0400 ledger.db` it died in its first tick with
"attempt to write a readonly database", and the -shm SQLite made 0400 kept it so after the
mode was restored.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shlex
import shutil
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

from routines.ledger import Ledger
from routines.runs import RunStatus, Trigger
from routines.spec.paths import paths
from supervisor.cli.client import DaemonError
from tests.supervisor.daemonkit import (
    DaemonProcess,
    command_routine,
    entered,
    final,
    gated,
    release,
    sid,
    wait_for,
    write_routine,
)
from tests.supervisor.gates import gate_home
from tests.supervisor.test_reliability_full_disk import OnTmpfs

pytestmark = pytest.mark.slow  # real daemons: make test-fast leaves these out


def filled_start(state: Path, ledger: Path | None) -> str:
    """The wrapper script: copy `ledger` (if any) onto the tmpfs, fill the tmpfs to its last
    page, then start the daemon on it."""
    copy = (
        f"cp {shlex.quote(str(ledger))} {shlex.quote(str(state / 'ledger.db'))} && "
        if ledger
        else ""
    )
    filler = shlex.quote(str(state / "filler"))
    return f'{copy}head -c 64M /dev/zero > {filler} 2>/dev/null; exec "$@"'


def no_bad_advice(log: str) -> None:
    assert "Traceback" not in log, log
    assert "move it aside" not in log, log


@pytest.mark.parametrize("existing", [True, False], ids=["existing-ledger", "fresh-home"])
def test_the_daemon_starts_paused_on_a_full_disk_and_resumes_by_itself(
    tmp_path: Path, not_root: None, existing: bool
) -> None:
    write_routine("ticker", command_routine("echo tick"))
    seed = None
    if existing:
        # A ledger closed cleanly: no -wal, no -shm, which SQLite cannot create on a full disk.
        seed = tmp_path / "seed" / "ledger.db"
        with Ledger(seed) as ledger:
            ledger.record_run(
                "ticker",
                run_id="old-run",
                trigger=Trigger.MANUAL,
                status=RunStatus.QUEUED,
                now=datetime(2026, 1, 1, tzinfo=UTC),
            )
        assert sorted(p.name for p in seed.parent.iterdir()) == ["ledger.db"]
    box = OnTmpfs(tmp_path, script=filled_start(paths().state_dir, seed))
    d = box.d.start()
    status = wait_for(
        lambda: (s := d.request("status"))["health"] != "ok" and s, what="the daemon to pause"
    )
    assert status["health"] == "disk full"
    assert status["status"] == "paused: the disk is full (0 finished run(s) wait to be recorded)"
    assert status["disk_full"].startswith("no space left for the ledger")
    assert "retried every 0.2 s, and resumed by itself once it passes" in status["disk_full"]
    # SQLite could make the -shm's inode but not size its first page: the ledger stays
    # closed (status comes from the daemon's memory) until an open succeeds.
    for _ in range(3):
        d.request("reload")  # a tick each: each tries again, none crashes or repeats itself
    assert d.log().count("no space left for the ledger") == 1
    no_bad_advice(d.log())

    (box.inside / "filler").unlink()  # space returns
    wait_for(lambda: d.request("status")["health"] == "ok", what="the pause to end")
    assert "space is back" in d.log()
    d.to_slot()
    wait_for(lambda: [r.status for r in box.ended("ticker")][-1:] == ["ok"], what="a run")
    ids = [r.run_id for r in box.runs("ticker")]
    assert ("old-run" in ids) is existing  # the history is kept, never moved aside
    no_bad_advice(d.log())
    assert d.stop() == 0


def test_a_read_only_ledger_is_a_named_pause_that_ends_when_its_mode_is_restored(
    tmp_path: Path, not_root: None
) -> None:
    write_routine("ticker", command_routine("echo tick"))
    d = DaemonProcess(tmp_path).start()
    d.to_slot()
    wait_for(lambda: len(final("ticker")) == 1, what="the first run")
    assert d.stop() == 0
    ledger = paths().ledger
    ledger.chmod(0o400)
    d = DaemonProcess(tmp_path).start()  # SQLite makes the -shm with ledger.db's mode: 0400 too
    status = wait_for(
        lambda: (s := d.request("status"))["health"] != "ok" and s, what="the daemon to pause"
    )
    assert status["health"] == "read-only"
    assert (
        status["status"]
        == "paused: the ledger is read-only (0 finished run(s) wait to be recorded)"
    )
    why = status["disk_full"]
    assert why.startswith(f"{ledger}: the ledger cannot be read or written (attempt to write a")
    assert f"chmod u+rw '{ledger}'" in why
    assert "retried every 0.2 s, and resumed by itself once it passes" in why
    paused_slot = d.to_slot()
    for _ in range(3):
        d.request("reload")
    with pytest.raises(DaemonError, match="the ledger cannot be read or written"):
        d.request("disable", {"name": "ticker"})  # its reason, not an internal error
    assert d.request("ping")["pid"] == d.pid  # alive: no crash, so no restart loop
    assert len(final("ticker")) == 1  # nothing claimed it could not record
    no_bad_advice(d.log())

    ledger.chmod(0o600)  # the user restores the file's mode, and only that
    wait_for(lambda: d.request("status")["health"] == "ok", what="the pause to end")
    assert "the ledger is usable again (it was read-only)" in d.log()
    shm = ledger.with_name("ledger.db-shm")
    assert not shm.exists() or shm.stat().st_mode & 0o777 == 0o600
    # The slot that came while paused runs once, late; then the next slot runs. Each is
    # awaited on its own: a step of the clock before the late run is claimed would fold both
    # into one catch-up, and two runs can both finish between two polls.
    wait_for(lambda: len(final("ticker")) >= 2, what="the paused slot to run late")
    next_slot = d.to_slot()
    wait_for(lambda: len(final("ticker")) >= 3, what="scheduling to resume")
    assert [r.slot for r in final("ticker")][1:] == [sid(paused_slot), sid(next_slot)]
    assert d.stop() == 0


def test_in_process_run_on_a_read_only_ledger_says_why_without_a_traceback(
    tmp_path: Path, not_root: None
) -> None:
    write_routine("once", command_routine("echo hi", enabled=False))
    Ledger(paths().ledger).close()
    paths().ledger.chmod(0o400)
    try:
        out = DaemonProcess(tmp_path).cli("run", "once")  # no daemon: it runs in this process
    finally:
        paths().ledger.chmod(0o600)
    assert out.returncode == 1, out
    assert "Traceback" not in out.stderr, out.stderr
    last = out.stderr.splitlines()[-1]
    assert last.startswith(f"vinos-routine: {paths().ledger}: the ledger cannot be read or ")
    assert f"chmod u+rw '{paths().ledger}'" in out.stderr
    assert os.access(paths().ledger, os.W_OK)


def sha(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


@pytest.mark.parametrize("how", ["rename", "hard-link-kept"])
def test_nothing_the_daemon_does_on_a_replaced_ledger_writes_its_wal_or_shm(
    tmp_path: Path, not_root: None, how: str
) -> None:
    """SQLite finds -wal and -shm by the ledger's path. Once another file is there, a run
    that ends, a tick, or the daemon's close (a checkpoint, then an unlink) would write the
    original's WAL into the replacement's files or delete them: before, the original, kept
    through a hard link, came out an empty 4 KB file."""
    write_routine("held", command_routine(gated("held"), enabled=False, extra=gate_home("held")))
    d = DaemonProcess(tmp_path).start()
    d.request("run", {"name": "held", "detach": True})
    wait_for(lambda: entered("held") == 1, what="the held run to start")
    ledger = paths().ledger
    wal, shm = ledger.with_name("ledger.db-wal"), ledger.with_name("ledger.db-shm")
    runs = original_runs(ledger, wal)
    assert runs >= 1  # the held run's row, at least
    replacement = tmp_path / "replacement.db"
    shutil.copyfile(ledger, replacement)
    kept = ledger.with_name("kept.db")
    if how == "hard-link-kept":
        os.link(ledger, kept)
    replacement.rename(ledger)
    d.request("reload")  # a tick: it notices, and stops
    wait_for(lambda: d.request("status")["health"] == "lost", what="the daemon to notice")
    before = {p.name: sha(p) for p in (wal, shm)}
    assert None not in before.values()
    release("held")  # the run ends: its end is kept in memory, not written
    wait_for(lambda: d.request("status")["unwritten"], what="the ended run to be kept")
    d.request("reload")
    assert d.stop() == 0  # and the close neither checkpoints nor unlinks them
    assert {p.name: sha(p) for p in (wal, shm)} == before
    assert "Traceback" not in d.log()
    if how == "hard-link-kept":
        # The original, kept through its hard link, still holds every run it had: its file
        # with its write-ahead log (still at ledger.db-wal, untouched above) reads whole.
        assert original_runs(kept, wal) == runs


def original_runs(main: Path, wal: Path) -> int:
    """count(*) of runs in the ledger made of `main` and `wal`, read from copies of the two
    (so reading them creates or changes nothing beside the real ones)."""
    check = main.parent.parent / f"check-{main.name}"
    check.mkdir()
    try:
        shutil.copyfile(main, check / "ledger.db")
        if wal.exists():
            shutil.copyfile(wal, check / "ledger.db-wal")
        with contextlib.closing(sqlite3.connect(check / "ledger.db")) as db:
            count: int = db.execute("SELECT count(*) FROM runs").fetchone()[0]
        return count
    finally:
        shutil.rmtree(check)


def test_a_damaged_ledger_is_a_pause_that_says_move_it_aside_not_a_restart_loop(
    tmp_path: Path, not_root: None
) -> None:
    ledger = paths().ledger
    ledger.parent.mkdir(parents=True, exist_ok=True)
    ledger.write_bytes(b"not a database, and quick_check says so" * 200)
    before = sha(ledger)
    d = DaemonProcess(tmp_path).start()
    status = wait_for(
        lambda: (s := d.request("status"))["health"] != "ok" and s, what="the daemon to pause"
    )
    assert status["health"] == "corrupt"
    assert status["status"].startswith("paused: the ledger is damaged")
    assert f"Move it aside (mv '{ledger}' '{ledger}.broken')" in status["disk_full"]
    d.request("reload")
    assert d.request("ping")["pid"] == d.pid  # up, answering: under systemd, no restart loop
    assert "Traceback" not in d.log()
    assert sha(ledger) == before
    assert d.stop() == 0


def test_a_ledger_first_opened_after_start_is_held_from_then_on(tmp_path: Path) -> None:
    """A daemon started on a full disk opens its ledger later: from then on a replacement of
    that file stops scheduling like one of a ledger opened at start."""
    from supervisor.engine.health import Ground, Health
    from supervisor.engine.owner import file_id

    path = tmp_path / "ledger.db"
    opened: list[tuple[int, int] | None] = [None]
    ground = Ground({}, tmp_path, lambda note: None, 30.0, ledger=(path, lambda: opened[0]))
    assert ground.check_held()  # nothing opened yet, nothing held
    Ledger(path).close()
    opened[0] = file_id(path)
    assert ground.check_held()
    path.rename(tmp_path / "aside.db")
    Ledger(path).close()  # another file at its path
    assert not ground.check_held()
    assert ground.health is Health.LOST
    assert ground.lost is not None and ground.lost.startswith(f"{path} was replaced by another")
