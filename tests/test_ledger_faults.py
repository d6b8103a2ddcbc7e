"""What each SQLite failure of a real ledger file becomes (routines/ledger/faults.py): a
LedgerUnavailable whose reason and message say what is wrong and what to do, and "move it
aside" only for a file PRAGMA quick_check finds damaged."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

import routines.ledger.sqlite_open as ledger_mod
from routines.ledger import Ledger, LedgerUnavailable, Unavailable
from routines.runs import RunStatus

T0 = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


def write(ledger: Ledger, run_id: str = "r1") -> None:
    ledger.record_run("x", run_id=run_id, trigger="manual", status=RunStatus.QUEUED, now=T0)


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
