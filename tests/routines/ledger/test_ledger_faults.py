"""What each SQLite failure of a real ledger file becomes (routines/ledger/faults.py): a
LedgerUnavailable whose reason and message say what is wrong and what to do, and "move it
aside" only for a file PRAGMA quick_check finds damaged."""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

import routines.ledger.sqlite_open as ledger_mod
from routines.ledger import Ledger, LedgerUnavailable, Unavailable
from routines.ledger.faults import keep_wal_on_close
from routines.runs import RunStatus, Trigger

T0 = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


def write(ledger: Ledger, run_id: str = "r1") -> None:
    ledger.record_run("x", run_id=run_id, trigger=Trigger.MANUAL, status=RunStatus.QUEUED, now=T0)


def test_a_read_only_file_is_read_only_and_names_what_to_chmod(
    tmp_path: Path, not_root: None
) -> None:
    path = tmp_path / "ledger.db"
    Ledger(path).close()
    path.chmod(0o400)
    try:
        with Ledger(path) as ledger, pytest.raises(LedgerUnavailable) as info:
            write(ledger)
    finally:
        path.chmod(0o600)
    assert info.value.reason is Unavailable.READ_ONLY
    assert "chmod u+rw" in str(info.value) and "move it aside" not in str(info.value).lower()


def test_a_lock_held_past_the_busy_timeout_is_locked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ledger.db"
    Ledger(path).close()
    monkeypatch.setattr(ledger_mod, "BUSY_TIMEOUT_SEC", 0.2)  # held throughout: not a race
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with Ledger(path) as ledger, pytest.raises(LedgerUnavailable) as info:
            write(ledger)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert info.value.reason is Unavailable.LOCKED


def test_damage_quick_check_does_not_confirm_is_an_io_error_not_move_it_aside(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ledger.db"
    with Ledger(path) as ledger:
        write(ledger)
        # SQLite's own error object, as a read of a bad sector returns it; the file is whole.
        mapped = ledger._unusable(sqlite3.DatabaseError("database disk image is malformed"))
    assert isinstance(mapped, LedgerUnavailable)
    assert mapped.reason is Unavailable.IO_ERROR
    assert "move it aside" not in str(mapped).lower()
    assert "PRAGMA quick_check passes" in str(mapped)


def test_a_damaged_file_is_corrupt_and_only_then_says_move_it_aside(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    path.write_bytes(b"\0not sqlite" * 1000)
    with pytest.raises(LedgerUnavailable) as info:
        Ledger(path)
    assert info.value.reason is Unavailable.CORRUPT
    assert f"Move it aside (mv '{path}' '{path}.broken')" in str(info.value)


def test_waiting_ledger_retries_its_open_and_works_once_it_can(
    tmp_path: Path, not_root: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ledger_mod, "REOPEN_AFTER_SEC", 0.0)  # each use tries again
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o500)  # the file cannot be created here
    try:
        ledger = Ledger(state / "ledger.db", wait=True)
        assert ledger.unavailable is not None
        assert ledger.unavailable.reason is Unavailable.READ_ONLY
        with pytest.raises(LedgerUnavailable):
            write(ledger)
    finally:
        state.chmod(0o700)
    write(ledger)  # opened now, created and migrated
    assert ledger.unavailable is None and ledger.run("r1") is not None
    ledger.close()


def test_keep_wal_on_close_holds_on_this_python_and_closing_leaves_the_wal(
    tmp_path: Path,
) -> None:
    """What a replaced ledger's fence rests on: after `keep_wal_on_close`, closing the
    connection neither checkpoints nor unlinks its -wal (on 3.11 the flag is set through a
    pointer read by ctypes; a CPython whose layout moved makes it False, never a wrong
    write). A connection without it, beside, checkpoints and unlinks at close."""

    def wal_db(path: Path) -> sqlite3.Connection:
        db = sqlite3.connect(path, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE t (x)")
        db.execute("INSERT INTO t VALUES (1)")
        return db

    kept, plain = tmp_path / "kept.db", tmp_path / "plain.db"
    kept_wal, plain_wal = tmp_path / "kept.db-wal", tmp_path / "plain.db-wal"
    db = wal_db(kept)
    assert keep_wal_on_close(db, kept) is True
    before = kept_wal.read_bytes()
    assert before  # the insert is in the WAL, not yet in the file
    db.close()
    assert kept_wal.read_bytes() == before
    other = wal_db(plain)
    assert plain_wal.exists()
    other.close()
    assert not plain_wal.exists()  # the default: checkpoint, then unlink


def test_a_replaced_ledger_whose_wal_cannot_be_kept_says_the_risk_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A mock: this Python's sqlite3 is one keep_wal_on_close knows, so nothing real here
    # makes it fail; a future CPython whose connection layout moved would.
    monkeypatch.setattr(ledger_mod, "keep_wal_on_close", lambda conn, path: False)
    path = tmp_path / "ledger.db"
    ledger = Ledger(path, wait=True)
    write(ledger)
    copy = tmp_path / "copy.db"
    copy.write_bytes(path.read_bytes())
    copy.rename(path)
    with caplog.at_level(logging.ERROR, logger="vinos.ledger"):
        for _ in range(2):
            with pytest.raises(LedgerUnavailable) as info:
                write(ledger, "r2")
            assert info.value.reason is Unavailable.REPLACED
    [record] = [r for r in caplog.records if r.name == "vinos.ledger"]
    assert record.levelno == logging.ERROR
    assert "was replaced" in record.getMessage()
    assert f"{path}-wal" in record.getMessage()
    assert "checkpoint at close could not be turned off" in record.getMessage()
    ledger.close()


def test_an_unrecognised_database_error_is_said_in_its_own_words_not_as_the_disk(
    tmp_path: Path,
) -> None:
    """An OperationalError none of the known faults names (here a table another process
    dropped: SQLite's generic SQLITE_ERROR) is an unexpected database error with SQLite's
    message; it never tells the user to check the disk, nor to move the ledger aside."""
    path = tmp_path / "ledger.db"
    with Ledger(path) as ledger:
        write(ledger)
        with contextlib.closing(sqlite3.connect(path)) as other:
            other.execute("DROP TABLE routine_state")
            other.commit()
        with pytest.raises(LedgerUnavailable) as info:
            ledger.states()
    assert info.value.reason is Unavailable.UNEXPECTED
    message = str(info.value)
    assert "an unexpected database error (no such table: routine_state)" in message
    assert "check the disk" not in message and "dmesg" not in message
    assert "move it aside" not in message.lower() and "chmod" not in message
