"""The ledger on real SQLite files: what only SQLite has (the file's creation and version,
a transaction rolled back on a constraint, locks held by another connection, damage and
permissions). What every store does (the fence, run rows, money by the routine's own day,
state) is tests/fleet/test_ledger_contract.py's, on SQLite, PostgreSQL and memory alike."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import routines.ledger.sqlite_open as ledger_mod
from routines.ledger import LEDGER_VERSION, Ledger, iso
from routines.ledger.model import (
    RUN_COLUMNS,
    LedgerError,
    LedgerUnavailable,
    RoutineState,
    Unavailable,
)
from routines.runs import RunEnd, RunStatus, Trigger
from tests.helpers import at

T0 = at("2024-06-01 10:00")


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "ledger.db"


@pytest.fixture
def ledger(db_path: Path) -> Iterator[Ledger]:
    with Ledger(db_path) as led:
        yield led


def dump(path: Path) -> dict[str, list[tuple[object, ...]]]:
    """Every row of every table, read with a separate plain connection."""
    db = sqlite3.connect(path)
    try:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {t: sorted(db.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in tables}
    finally:
        db.close()


def claim(
    led: Ledger,
    slot: str,
    *,
    routine: str = "day-brief",
    now: datetime = T0,
    status: str = "queued",
    run_id: str | None = None,
    **kw: object,
) -> bool:
    return led.claim(
        routine,
        slot,
        run_id=run_id or f"{routine}-{slot}",
        trigger=Trigger.SCHEDULE,
        status=RunStatus(status),
        now=now,
        **kw,  # type: ignore[arg-type]
    )


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- creation ---------------------------------------------------------------------------------


def test_fresh_ledger_is_created_at_the_current_version(db_path: Path) -> None:
    assert not db_path.parent.exists()
    with Ledger(db_path) as led:
        assert led.version == LEDGER_VERSION
    db = sqlite3.connect(db_path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == LEDGER_VERSION
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"runs", "claims", "routine_state", "run_days", "proposals"} <= tables
    # Plain tables: nothing reads them through a view or writes them through a trigger.
    assert not db.execute(
        "SELECT name FROM sqlite_master WHERE type IN ('view', 'trigger')"
    ).fetchall()
    columns = {r[1] for r in db.execute("PRAGMA table_info(runs)")}
    assert set(RUN_COLUMNS) <= columns
    # the v1-v3 columns an old ledger's readers rely on are all still there
    assert {
        "id",
        "exit_status",
        "tool_calls",
        "tools_used",
        "escalated",
        "escalated_reason",
        "local_input_tokens",
        "local_output_tokens",
        "route",
    } <= columns
    db.close()


def test_reopening_keeps_everything(db_path: Path) -> None:
    with Ledger(db_path) as led:
        assert claim(led, "2024-06-01T06:00:00Z")
    before = dump(db_path)
    with Ledger(db_path) as led:
        assert led.version == LEDGER_VERSION
    assert dump(db_path) == before


# -- the claim (run fence) ---------------------------------------------------------------------


def test_claim_run_row_and_cursor_are_one_transaction(ledger: Ledger, db_path: Path) -> None:
    # The run row insert fails (a run id already used) after the claim and the cursor were
    # written in the same transaction: neither may survive.
    assert claim(ledger, "2024-06-01T06:00:00Z", run_id="dup")
    before = dump(db_path)
    with pytest.raises(sqlite3.IntegrityError):
        claim(ledger, "2024-06-02T06:00:00Z", run_id="dup")
    assert dump(db_path) == before
    assert not ledger.is_claimed("day-brief", "2024-06-02T06:00:00Z")
    assert ledger.state("day-brief").cursor == "2024-06-01T06:00:00Z"
    # ... and the connection is still usable afterwards.
    assert claim(ledger, "2024-06-02T06:00:00Z", run_id="fresh")


# -- per-routine state (pure: the override rule) ------------------------------------------


@pytest.mark.parametrize(
    ("override", "seen", "file_enabled", "expected"),
    [
        (None, None, True, True),  # no enable/disable ever: the file decides
        (None, None, False, False),
        (True, False, False, True),  # `enable` while the file said false
        (False, True, True, False),  # `disable` (or three strikes) while the file said true
        (True, False, True, True),  # the file was edited to true since: the file decides
        (False, True, False, False),  # the file was edited to false since
        (True, True, False, False),  # `enable` when the file said true, then edited to false
    ],
)
def test_routine_state_enabled(
    override: bool | None, seen: bool | None, file_enabled: bool, expected: bool
) -> None:
    state = RoutineState("a", enabled_override=override, file_enabled_seen=seen)
    assert state.enabled(file_enabled, "f") is expected


# -- locks, damage ------------------------------------------------------------------------------


def hold_write_lock(path: Path, released: threading.Event) -> threading.Thread:
    """Another connection takes the write lock (BEGIN IMMEDIATE), holds it briefly, releases."""
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")

    def release() -> None:
        time.sleep(0.3)
        released.set()
        holder.execute("COMMIT")
        holder.close()

    thread = threading.Thread(target=release)
    thread.start()
    return thread


def make_v1_in_rollback_mode(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE runs (id INTEGER PRIMARY KEY, routine TEXT NOT NULL, started_at TEXT, "
        "model TEXT, input_tokens INTEGER, output_tokens INTEGER, dollars REAL, "
        "duration_sec REAL, exit_status TEXT)"
    )
    db.commit()
    db.close()


@pytest.mark.parametrize("kind", ["wal-ledger", "v1-ledger", "empty-file"])
def test_open_waits_for_a_locked_database(db_path: Path, kind: str) -> None:
    if kind == "wal-ledger":
        Ledger(db_path).close()
    elif kind == "v1-ledger":
        make_v1_in_rollback_mode(db_path)
    else:
        db_path.parent.mkdir(parents=True)
        db_path.write_bytes(b"")
    released = threading.Event()
    thread = hold_write_lock(db_path, released)
    try:
        with Ledger(db_path) as led:
            # An old or new ledger needs writing (WAL, migration): it waited for the other
            # writer rather than failing. A current ledger opens without writing at all.
            assert released.is_set() or kind == "wal-ledger"
            assert led.version == LEDGER_VERSION
    finally:
        thread.join()


def test_claim_waits_for_a_locked_database(ledger: Ledger, db_path: Path) -> None:
    released = threading.Event()
    thread = hold_write_lock(db_path, released)
    try:
        assert claim(ledger, "2024-06-01T06:00:00Z")
        assert released.is_set()
    finally:
        thread.join()


def test_a_lock_held_past_the_timeout_is_a_clear_error(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    Ledger(db_path).close()
    monkeypatch.setattr(ledger_mod, "BUSY_TIMEOUT_SEC", 0.2)
    holder = sqlite3.connect(db_path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with Ledger(db_path) as reader, pytest.raises(LedgerError) as info:
            claim(reader, "2024-06-01T06:00:00Z")  # reading works; writing waits, then fails
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert isinstance(info.value, LedgerUnavailable)
    assert info.value.reason is Unavailable.LOCKED
    assert str(info.value) == (
        f"{db_path}: the ledger stayed locked past the busy timeout (database is locked); "
        "another vinos-routine process holds it (a long `vinos-routine` command, or a copy of "
        "the daemon); let it finish or stop it"
    )


def corrupt_cases(tmp_path: Path) -> dict[str, Path]:
    """Damaged ledgers: random bytes, text, and real ledgers with rows, truncated."""
    cases: dict[str, Path] = {}

    def new(name: str) -> Path:
        p = tmp_path / name / "ledger.db"
        p.parent.mkdir(parents=True)
        cases[name] = p
        return p

    new("random").write_bytes(os.urandom(16384))
    new("text").write_text("not a database\n")
    full = tmp_path / "full" / "ledger.db"
    with Ledger(full) as led:
        for i in range(300):
            claim(led, f"slot-{i:04d}", detail="x" * 200)
    data = full.read_bytes()
    new("truncated-half").write_bytes(data[: len(data) // 2])
    new("truncated-last-page").write_bytes(data[: len(data) - 4096])
    v1 = tmp_path / "v1full" / "ledger.db"
    make_v1_in_rollback_mode(v1)
    db = sqlite3.connect(v1)
    db.executemany(
        "INSERT INTO runs (routine, started_at, dollars) VALUES (?, ?, ?)",
        [("a", "2024-01-01T06:00:00Z", 0.01)] * 2000,
    )
    db.commit()
    db.close()
    data = v1.read_bytes()
    new("v1-truncated").write_bytes(data[: len(data) // 3])
    return cases


def test_corrupt_ledger_is_refused_untouched_with_what_to_do(tmp_path: Path) -> None:
    for name, path in corrupt_cases(tmp_path).items():
        before = sha(path)
        with pytest.raises(LedgerError) as info:
            Ledger(path)
        message = str(info.value)
        assert isinstance(info.value, LedgerUnavailable), name
        assert info.value.reason is Unavailable.CORRUPT, name
        assert message.startswith(f"{path}: the ledger is damaged (PRAGMA quick_check fails: "), (
            name
        )
        assert message.endswith(
            f"It was left untouched. Move it aside (mv '{path}' '{path}.broken') and a new one "
            "is created on the next start; restore from a backup to keep the history."
        ), name
        assert sha(path) == before, name
        assert os.listdir(path.parent) == ["ledger.db"], name  # no -wal/-shm left behind


def test_unreadable_ledger_is_refused_untouched(db_path: Path, not_root: None) -> None:
    with Ledger(db_path) as led:
        claim(led, "s")
    before = sha(db_path)
    db_path.chmod(0)
    try:
        with pytest.raises(LedgerError) as info:
            Ledger(db_path)
    finally:
        db_path.chmod(0o600)
    assert isinstance(info.value, LedgerUnavailable)
    assert info.value.reason is Unavailable.READ_ONLY
    assert str(info.value) == (
        f"{db_path}: the ledger cannot be read or written (unable to open database file); it "
        f"was left untouched; make them yours to write again: chmod u+rw '{db_path}'"
    )
    assert "move it aside" not in str(info.value)
    assert sha(db_path) == before


def test_ledger_written_in_another_process_is_seen(db_path: Path) -> None:
    # Two connections (the daemon and a CLI): a commit by one is read by the other.
    with Ledger(db_path) as one, Ledger(db_path) as two:
        assert claim(one, "s", run_id="x")
        assert two.is_claimed("day-brief", "s")
        assert not claim(two, "s", run_id="y")
        two.finish_run("x", now=T0 + timedelta(seconds=1), end=RunEnd(status=RunStatus.OK))
        assert one.run("x").status == "ok"  # type: ignore[union-attr]


def test_iso_is_utc_and_sortable() -> None:
    assert iso(at("2024-06-01 06:00", "America/New_York")) == "2024-06-01T10:00:00.000000Z"
    assert iso(datetime(2024, 6, 1, 10, 0, 0, 5, tzinfo=UTC)) == "2024-06-01T10:00:00.000005Z"
