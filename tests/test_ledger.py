"""The ledger on real SQLite files: creation, the claim (run fence), run rows, money by the
routine's own calendar day (midnight and DST), per-routine state, pruning, locks and damage."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from helpers import at

import routines.ledger.sqlite_open as ledger_mod
from routines.ledger import LEDGER_VERSION, Ledger, iso
from routines.ledger.model import (
    RUN_COLUMNS,
    LedgerError,
    LedgerUnavailable,
    RoutineState,
    Unavailable,
)
from routines.runs import Outcome, RunEnd, RunStatus

NY = ZoneInfo("America/New_York")
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
        trigger="schedule",
        status=status,
        now=now,
        **kw,  # type: ignore[arg-type]
    )


def spend(
    led: Ledger, routine: str, when: datetime, dollars: float, status: str = "ok", **tokens: int
) -> str:
    """A finished run of `routine` started at `when` that cost `dollars` (and `tokens`)."""
    run_id = f"{routine}-{iso(when)}-{dollars}"
    led.record_run(routine, run_id=run_id, trigger="manual", status="running", now=when)
    end = RunEnd(RunStatus(status), dollars=dollars, **tokens)  # type: ignore[arg-type]
    led.finish_run(run_id, end, now=when + timedelta(seconds=30))
    return run_id


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


def test_cursor_never_moves_backwards(ledger: Ledger) -> None:
    assert claim(ledger, "2024-06-02T06:00:00Z")
    # The clock was set back: an older slot may be recorded, the cursor stays.
    assert claim(ledger, "2024-06-01T06:00:00Z")
    assert ledger.state("day-brief").cursor == "2024-06-02T06:00:00Z"
    ledger.advance_cursor("day-brief", "2024-05-01T06:00:00Z")
    assert ledger.state("day-brief").cursor == "2024-06-02T06:00:00Z"
    ledger.advance_cursor("day-brief", "2024-06-03T06:00:00Z")
    assert ledger.state("day-brief").cursor == "2024-06-03T06:00:00Z"


def test_cursor_keeps_other_state(ledger: Ledger) -> None:
    ledger.enable("day-brief", file_enabled=False, cursor="2024-05-01T06:00:00Z", fingerprint="f")
    ledger.set_failure_streak("day-brief", 2)
    assert claim(ledger, "2024-06-01T06:00:00Z")
    s = ledger.state("day-brief")
    assert (s.cursor, s.failure_streak, s.enabled_override) == ("2024-06-01T06:00:00Z", 2, True)


def test_record_run_writes_a_row_without_a_claim(ledger: Ledger) -> None:
    ledger.record_run("day-brief", run_id="manual-1", trigger="manual", status="queued", now=T0)
    assert ledger.run("manual-1") is not None
    assert not ledger.is_claimed("day-brief", "")
    assert ledger.state("day-brief") == RoutineState("day-brief")


# -- run rows ----------------------------------------------------------------------------------


def test_start_and_finish_run(ledger: Ledger) -> None:
    assert claim(ledger, "s", run_id="r1")
    started = T0 + timedelta(seconds=5)
    ledger.start_run("r1", now=started, worker_pid=4321)
    (active,) = ledger.active_runs()
    assert (active.status, active.worker_pid) == ("running", 4321)
    ledger.finish_run(
        "r1",
        now=started + timedelta(seconds=90),
        end=RunEnd(
            status="ok",
            outcome="done",
            detail="brief written",
            route="local->premium",
            model="claude-sonnet-4-6",
            escalated=True,
            escalated_reason="low_confidence",
            input_tokens=1200,
            output_tokens=300,
            local_input_tokens=900,
            local_output_tokens=20,
            tool_calls=3,
            tools_used=["read_files", "run_shell"],
            dollars=0.0081,
            output_file="/x/2024-06-01-1000.md",
        ),
    )
    row = ledger.run("r1")
    assert row is not None
    assert row.as_json() == {
        "id": row.id,
        "routine": "day-brief",
        "run_id": "r1",
        "slot": "s",
        "trigger": "schedule",
        "status": "ok",
        "outcome": "done",
        "detail": "brief written",
        "started_at": iso(started),
        "finished_at": iso(started + timedelta(seconds=90)),
        "duration_sec": 90.0,
        "route": "local->premium",
        "model": "claude-sonnet-4-6",
        "escalated": 1,
        "escalated_reason": "low_confidence",
        "input_tokens": 1200,
        "output_tokens": 300,
        "local_input_tokens": 900,
        "local_output_tokens": 20,
        "tool_calls": 3,
        "tools_used": ["read_files", "run_shell"],
        "dollars": 0.0081,
        "output_file": "/x/2024-06-01-1000.md",
        "parent_run_id": None,
    }
    assert ledger.active_runs() == []


def test_finish_run_keeps_a_given_duration_and_empty_tools(ledger: Ledger) -> None:
    ledger.record_run("day-brief", run_id="r", trigger="manual", status="running", now=T0)
    ledger.finish_run(
        "r",
        now=T0 + timedelta(hours=1),
        end=RunEnd(status="timeout", duration_sec=600.0, tools_used=[]),
    )
    row = ledger.run("r")
    assert row is not None
    assert (row.status, row.duration_sec, row.tools_used) == ("timeout", 600.0, [])


def test_finish_run_changes_only_an_active_run(ledger: Ledger) -> None:
    """A run ends with exactly one final status: an exception path after `ok` was written
    (Pool._run's supervisor error), or a second daemon marking it interrupted, changes
    nothing and is told so."""
    ledger.record_run("day-brief", run_id="r", trigger="manual", status="running", now=T0)
    done = T0 + timedelta(seconds=30)
    ok = RunEnd(RunStatus.OK, "brief written", outcome=Outcome.DONE, dollars=0.25)
    assert ledger.finish_run("r", ok, now=done) is True
    failed = RunEnd(RunStatus.FAILED, "supervisor error: RuntimeError: boom")
    assert ledger.finish_run("r", failed, now=done + timedelta(seconds=1)) is False
    row = ledger.run("r")
    assert row is not None
    assert (row.status, row.outcome, row.detail, row.dollars, row.finished_at) == (
        RunStatus.OK,
        Outcome.DONE,
        "brief written",
        0.25,
        iso(done),
    )
    assert ledger.last_runs()["day-brief"].status == RunStatus.OK
    # A row recorded finished (a skipped slot) is not active either.
    assert claim(ledger, "s", run_id="sk", status="skipped")
    assert ledger.finish_run("sk", failed, now=done) is False
    assert ledger.run("sk").status == "skipped"  # type: ignore[union-attr]


def test_last_runs_is_each_routines_newest_finished_run(ledger: Ledger) -> None:
    spend(ledger, "a", at("2024-06-01 06:00"), 0.01, status="failed")
    spend(ledger, "a", at("2024-06-02 06:00"), 0.02, status="ok")
    assert claim(ledger, "s1", routine="a", now=at("2024-06-03 06:00"), status="skipped")
    assert claim(ledger, "s2", routine="a", now=at("2024-06-04 06:00"), status="running")
    spend(ledger, "b", at("2024-06-01 06:00"), 0.0, status="timeout")
    last = ledger.last_runs()
    assert {k: (v.status, v.started_at) for k, v in last.items()} == {
        "a": ("ok", iso(at("2024-06-02 06:00"))),
        "b": ("timeout", iso(at("2024-06-01 06:00"))),
    }


# -- money ---------------------------------------------------------------------------------------


def test_spent_today_uses_the_routines_own_midnight(ledger: Ledger) -> None:
    # New York is UTC-4 in June: its 1 June runs from 04:00 UTC to 04:00 UTC on 2 June.
    spend(ledger, "a", at("2024-06-01 03:59:59"), 1.0)  # 31 May 23:59:59 in New York
    spend(ledger, "a", at("2024-06-01 04:00"), 2.0)  # 1 June 00:00 in New York
    spend(ledger, "a", at("2024-06-02 03:59:59"), 4.0)  # 1 June 23:59:59 in New York
    spend(ledger, "a", at("2024-06-02 04:00"), 8.0)  # 2 June 00:00 in New York
    spend(ledger, "b", at("2024-06-01 12:00"), 16.0)  # another routine
    noon_ny = at("2024-06-01 12:00", "America/New_York")
    assert ledger.spent_today("a", NY, noon_ny) == pytest.approx(6.0)
    assert ledger.spent_today("a", NY, at("2024-06-02 03:00")) == pytest.approx(6.0)
    assert ledger.spent_today("a", NY, at("2024-06-02 04:00")) == pytest.approx(8.0)
    # The same rows by the UTC calendar.
    utc = ZoneInfo("UTC")
    assert ledger.spent_today("a", utc, at("2024-06-01 12:00")) == pytest.approx(3.0)
    assert ledger.spent_on_day("a", date(2024, 6, 2), utc) == pytest.approx(12.0)
    assert ledger.spent_on_day("a", date(2024, 5, 31), NY) == pytest.approx(1.0)


def test_spent_on_a_23_hour_day_spring_forward(ledger: Ledger) -> None:
    # 10 March 2024 in New York: 00:00 EST (05:00 UTC) to 24:00 EDT (04:00 UTC on 11 March).
    spend(ledger, "a", at("2024-03-10 04:59:59"), 1.0)  # 9 March 23:59:59 EST
    spend(ledger, "a", at("2024-03-10 05:00"), 2.0)  # 10 March 00:00 EST
    spend(ledger, "a", at("2024-03-10 07:30"), 4.0)  # 10 March 03:30 EDT, after the gap
    spend(ledger, "a", at("2024-03-11 03:59:59"), 8.0)  # 10 March 23:59:59 EDT
    spend(ledger, "a", at("2024-03-11 04:00"), 16.0)  # 11 March 00:00 EDT
    assert ledger.spent_on_day("a", date(2024, 3, 10), NY) == pytest.approx(14.0)
    assert ledger.spent_on_day("a", date(2024, 3, 9), NY) == pytest.approx(1.0)
    assert ledger.spent_on_day("a", date(2024, 3, 11), NY) == pytest.approx(16.0)


def test_spent_on_a_25_hour_day_fall_back(ledger: Ledger) -> None:
    # 3 November 2024 in New York: 00:00 EDT (04:00 UTC) to 24:00 EST (05:00 UTC on 4 Nov).
    spend(ledger, "a", at("2024-11-03 03:59:59"), 1.0)  # 2 Nov 23:59:59 EDT
    spend(ledger, "a", at("2024-11-03 05:30"), 2.0)  # 01:30 EDT, the first one
    spend(ledger, "a", at("2024-11-03 06:30"), 4.0)  # 01:30 EST, the second one
    spend(ledger, "a", at("2024-11-04 04:30"), 8.0)  # 3 Nov 23:30 EST (would be 4 Nov in EDT)
    spend(ledger, "a", at("2024-11-04 05:00"), 16.0)  # 4 Nov 00:00 EST
    assert ledger.spent_on_day("a", date(2024, 11, 3), NY) == pytest.approx(14.0)
    assert ledger.spent_on_day("a", date(2024, 11, 4), NY) == pytest.approx(16.0)
    assert ledger.spent_today("a", NY, at("2024-11-04 04:59")) == pytest.approx(14.0)


def test_totals_per_routine_biggest_spender_first(ledger: Ledger) -> None:
    spend(
        ledger,
        "a",
        at("2024-06-01 06:00"),
        0.10,
        input_tokens=100,
        output_tokens=10,
        local_input_tokens=5,
        local_output_tokens=1,
    )
    spend(ledger, "a", at("2024-06-02 06:00"), 0.20)
    spend(ledger, "b", at("2024-06-01 07:00"), 0.50, input_tokens=7)
    spend(ledger, "c", at("2024-06-01 08:00"), 0.0)
    # skipped and missed rows are not runs
    assert claim(ledger, "s", routine="c", now=at("2024-06-01 09:00"), status="skipped")
    assert claim(ledger, "t", routine="c", now=at("2024-06-01 10:00"), status="missed")
    spend(ledger, "a", at("2024-06-03 06:00"), 9.0)  # outside the window
    totals = ledger.totals(at("2024-06-01 00:00"), at("2024-06-03 00:00"))
    assert [(t["routine"], t["runs"], round(t["dollars"], 6)) for t in totals] == [
        ("b", 1, 0.5),
        ("a", 2, 0.3),
        ("c", 1, 0.0),
    ]
    assert (totals[1]["input_tokens"], totals[1]["output_tokens"]) == (100, 10)
    assert (totals[1]["local_input_tokens"], totals[1]["local_output_tokens"]) == (5, 1)
    assert totals[0]["input_tokens"] == 7


def test_dollars_by_day_in_a_zone(ledger: Ledger) -> None:
    spend(ledger, "a", at("2024-06-01 03:00"), 1.0)  # 31 May in New York
    spend(ledger, "b", at("2024-06-01 05:00"), 2.0)
    spend(ledger, "a", at("2024-06-02 02:00"), 4.0)  # still 1 June in New York
    days = [date(2024, 5, 31), date(2024, 6, 1), date(2024, 6, 2)]
    assert ledger.dollars_by_day(days, NY) == pytest.approx(
        {date(2024, 5, 31): 1.0, date(2024, 6, 1): 6.0, date(2024, 6, 2): 0.0}
    )
    assert ledger.dollars_by_day(days, ZoneInfo("UTC")) == pytest.approx(
        {date(2024, 5, 31): 0.0, date(2024, 6, 1): 3.0, date(2024, 6, 2): 4.0}
    )


# -- per-routine state ----------------------------------------------------------------------------


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
    assert state.enabled(file_enabled) is expected


def test_state_round_trip(ledger: Ledger) -> None:
    assert ledger.state("a") == RoutineState("a")
    ledger.disable("a", file_enabled=True, reason="failed 3 times in a row", failure_streak=3)
    ledger.set_cursor("a", "2024-06-01T06:00:00Z", "fp1")
    ledger.set_failure_streak("b", 1)
    assert ledger.state("a") == RoutineState(
        "a",
        enabled_override=False,
        file_enabled_seen=True,
        failure_streak=3,
        disabled_reason="failed 3 times in a row",
        cursor="2024-06-01T06:00:00Z",
        schedule_fingerprint="fp1",
    )
    assert ledger.states() == {"a": ledger.state("a"), "b": RoutineState("b", failure_streak=1)}
    assert ledger.state("a").enabled(True) is False
    # An edited schedule resets the cursor: set_cursor may move it anywhere, even back.
    ledger.set_cursor("a", None, "fp2")
    assert (ledger.state("a").cursor, ledger.state("a").schedule_fingerprint) == (None, "fp2")
    # A wrong clock puts the cursor back and keeps the fingerprint.
    ledger.set_cursor("a", "2024-05-01T06:00:00Z")
    assert (ledger.state("a").cursor, ledger.state("a").schedule_fingerprint) == (
        "2024-05-01T06:00:00Z",
        "fp2",
    )


def test_enable_clears_the_streak_and_owes_nothing_from_before(ledger: Ledger) -> None:
    ledger.disable("a", file_enabled=True, reason="3 failed runs in a row", failure_streak=3)
    ledger.set_cursor("a", "2024-06-01T06:00:00Z", "fp1")
    ledger.enable("a", file_enabled=True, cursor="2024-06-05T08:00:00Z", fingerprint="fp1")
    assert ledger.state("a") == RoutineState(
        "a",
        enabled_override=True,
        file_enabled_seen=True,
        failure_streak=0,
        disabled_reason=None,
        cursor="2024-06-05T08:00:00Z",
        schedule_fingerprint="fp1",
    )
    # The cursor never moves back on enable (a slot already handled is not owed again).
    ledger.enable("a", file_enabled=False, cursor="2024-06-04T00:00:00Z", fingerprint="fp2")
    s = ledger.state("a")
    assert (s.cursor, s.schedule_fingerprint, s.file_enabled_seen) == (
        "2024-06-05T08:00:00Z",
        "fp2",
        False,
    )
    # disable keeps the streak unless it is given (a new draft starts from 0).
    ledger.set_failure_streak("a", 2)
    ledger.disable("a", file_enabled=True)
    assert (ledger.state("a").failure_streak, ledger.state("a").enabled(True)) == (2, False)
    ledger.disable("a", file_enabled=True, failure_streak=0)
    assert ledger.state("a").failure_streak == 0


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
        two.finish_run("x", now=T0 + timedelta(seconds=1), end=RunEnd(status="ok"))
        assert one.run("x").status == "ok"  # type: ignore[union-attr]


def test_iso_is_utc_and_sortable() -> None:
    assert iso(at("2024-06-01 06:00", "America/New_York")) == "2024-06-01T10:00:00.000000Z"
    assert iso(datetime(2024, 6, 1, 10, 0, 0, 5, tzinfo=UTC)) == "2024-06-01T10:00:00.000005Z"
