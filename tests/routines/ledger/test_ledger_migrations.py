"""Migrations: ledgers written by v2.0.4 (schema 1) and v2.0.5 (schema 2), built here with plain
sqlite3 exactly as those versions laid them out, open under this version with every row intact,
NULL in the new columns, and the queries working on the old rows. A newer ledger is refused
byte for byte untouched."""

from __future__ import annotations

import hashlib
import os
import sqlite3
from datetime import date
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from routines.ledger import LEDGER_VERSION, Ledger, LedgerError
from routines.ledger.migrate_sqlite import STEPS, legacy_steps
from routines.runs import RunEnd, RunStatus, Trigger
from tests.helpers import at

# v2.0.4: the first runs table (tokens, dollars, duration, exit status), in rollback
# journal mode, no other table.
V1_SCHEMA = """
CREATE TABLE runs (
    id INTEGER PRIMARY KEY,
    routine TEXT NOT NULL,
    started_at TEXT,
    model TEXT,
    input_tokens INTEGER,
    output_tokens INTEGER,
    dollars REAL,
    duration_sec REAL,
    exit_status TEXT
)
"""
V1_COLUMNS = (
    "id",
    "routine",
    "started_at",
    "model",
    "input_tokens",
    "output_tokens",
    "dollars",
    "duration_sec",
    "exit_status",
)
V1_ROWS: list[tuple[object, ...]] = [
    (
        1,
        "day-brief",
        "2025-03-01T11:00:02.412000+00:00",
        "claude-sonnet-4-5",
        5200,
        610,
        0.0248,
        41.5,
        "ok",
    ),
    (2, "github-review", "2025-03-01T14:00:05+00:00", "llama3.2:3b", 3000, 400, 0.0, 12.0, "ok"),
    (3, "day-brief", "2025-03-02T11:00:01+00:00", "claude-sonnet-4-5", 0, 0, 0.0, 0.4, "error"),
    (4, "evening-shutdown", "2025-03-02T23:00:03+00:00", None, None, None, None, None, None),
]
# v2.0.5 added tool tracking (tool_calls, tools_used).
V2_COLUMNS = (*V1_COLUMNS, "tool_calls", "tools_used")
V2_ROWS: list[tuple[object, ...]] = [
    (*V1_ROWS[0], 4, '["read_files","run_shell"]'),
    (*V1_ROWS[1], 0, "[]"),
    (*V1_ROWS[2], None, None),
    (*V1_ROWS[3], None, None),
    (
        5,
        "inbox-triage",
        "2025-03-03T12:00:00Z",
        "claude-haiku-4-5",
        800,
        90,
        0.00125,
        9.75,
        "ok",
        1,
        '["run_shell"]',
    ),
]
NEW_V3 = ("route", "escalated", "escalated_reason", "local_input_tokens", "local_output_tokens")
NEW_V4 = (
    "run_id",
    "slot",
    "trigger",
    "status",
    "outcome",
    "detail",
    "finished_at",
    "output_file",
    "owner_pid",
    "owner_started",
    "worker_pid",
)


def build(path: Path, version: int, user_version: int) -> list[tuple[object, ...]]:
    """A real v1 or v2 ledger with rows, made with plain sqlite3; returns the rows."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    db.execute(V1_SCHEMA)
    columns, rows = (V1_COLUMNS, V1_ROWS) if version == 1 else (V2_COLUMNS, V2_ROWS)
    if version == 2:
        db.execute("ALTER TABLE runs ADD COLUMN tool_calls INTEGER")
        db.execute("ALTER TABLE runs ADD COLUMN tools_used TEXT")
    marks = ", ".join("?" for _ in columns)
    db.executemany(f"INSERT INTO runs ({', '.join(columns)}) VALUES ({marks})", rows)
    db.execute(f"PRAGMA user_version = {user_version}")
    db.commit()
    db.close()
    return rows


def read_rows(path: Path, columns: tuple[str, ...]) -> list[tuple[object, ...]]:
    db = sqlite3.connect(path)
    try:
        return db.execute(f"SELECT {', '.join(columns)} FROM runs ORDER BY id").fetchall()
    finally:
        db.close()


@pytest.mark.parametrize(
    ("version", "user_version"),
    [(1, 0), (1, 1), (2, 2)],
    ids=["v2.0.4-no-user-version", "v2.0.4-user-version-1", "v2.0.5"],
)
def test_old_ledger_migrates_with_every_row_intact(
    tmp_path: Path, version: int, user_version: int
) -> None:
    path = tmp_path / "state" / "ledger.db"
    rows = build(path, version, user_version)
    columns = V1_COLUMNS if version == 1 else V2_COLUMNS
    with Ledger(path) as led:
        assert led.version == LEDGER_VERSION
    assert read_rows(path, columns) == rows
    new = (("tool_calls", "tools_used") if version == 1 else ()) + NEW_V3 + NEW_V4
    assert read_rows(path, new) == [(None,) * len(new)] * len(rows)
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == LEDGER_VERSION
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    db.close()
    # Opening again changes nothing.
    with Ledger(path) as led:
        assert led.version == LEDGER_VERSION
    assert read_rows(path, columns) == rows


def test_history_and_last_runs_read_old_rows(tmp_path: Path) -> None:
    path = tmp_path / "state" / "ledger.db"
    build(path, 2, 2)
    with Ledger(path) as led:
        history = led.history("day-brief")
        assert [r.id for r in history] == [3, 1]  # newest first
        old = history[1]
        assert (old.routine, old.model, old.input_tokens, old.output_tokens) == (
            "day-brief",
            "claude-sonnet-4-5",
            5200,
            610,
        )
        assert (old.dollars, old.duration_sec, old.tool_calls) == (0.0248, 41.5, 4)
        assert old.tools_used == ["read_files", "run_shell"]
        assert old.status == "ok"  # the old exit_status stands in for the status
        assert (old.run_id, old.slot, old.trigger, old.outcome, old.route) == (None,) * 5
        assert history[0].tools_used is None and history[0].status == "error"
        assert [r.id for r in led.history()] == [5, 4, 3, 2, 1]
        assert led.history("github-review")[0].tools_used == []
        last = led.last_runs()
        # evening-shutdown's only row has no exit status (v2.0.4 never finished it): no result.
        assert {k: (v.status, v.started_at) for k, v in last.items()} == {
            "day-brief": ("error", "2025-03-02T11:00:01+00:00"),
            "github-review": ("ok", "2025-03-01T14:00:05+00:00"),
            "inbox-triage": ("ok", "2025-03-03T12:00:00Z"),
        }


def test_money_queries_count_old_rows(tmp_path: Path) -> None:
    path = tmp_path / "state" / "ledger.db"
    build(path, 1, 0)
    utc = ZoneInfo("UTC")
    with Ledger(path) as led:
        assert led.spent_on_day("day-brief", date(2025, 3, 1), utc) == pytest.approx(0.0248)
        # 11:00 UTC on 1 March is 06:00 in New York, the same day.
        ny = ZoneInfo("America/New_York")
        assert led.spent_on_day("day-brief", date(2025, 3, 1), ny) == pytest.approx(0.0248)
        totals = led.totals(at("2025-03-01 00:00"), at("2025-03-03 00:00"))
        assert [(t["routine"], t["runs"], t["input_tokens"]) for t in totals] == [
            ("day-brief", 2, 5200),
            ("evening-shutdown", 1, 0),
            ("github-review", 1, 3000),
        ]
        assert led.dollars_by_day([date(2025, 3, 1), date(2025, 3, 2)], utc) == pytest.approx(
            {date(2025, 3, 1): 0.0248, date(2025, 3, 2): 0.0}
        )


def test_migrated_ledger_takes_new_runs_beside_old_ones(tmp_path: Path) -> None:
    path = tmp_path / "state" / "ledger.db"
    build(path, 1, 1)
    with Ledger(path) as led:
        assert led.claim(
            "day-brief",
            "2025-03-04T11:00:00Z",
            run_id="new-1",
            trigger=Trigger.SCHEDULE,
            status=RunStatus.RUNNING,
            now=at("2025-03-04 11:00:01"),
        )
        assert not led.claim(
            "day-brief",
            "2025-03-04T11:00:00Z",
            run_id="new-2",
            trigger=Trigger.SCHEDULE,
            status=RunStatus.RUNNING,
            now=at("2025-03-04 11:00:02"),
        )
        led.finish_run(
            "new-1",
            now=at("2025-03-04 11:01:01"),
            end=RunEnd(status=RunStatus.OK, dollars=0.01, tools_used=("run_shell",)),
        )
        history = led.history("day-brief")
        assert [(r.id, r.run_id, r.status) for r in history] == [
            (5, "new-1", "ok"),
            (3, None, "error"),
            (1, None, "ok"),
        ]
        assert history[0].duration_sec == 60.0
        assert led.state("day-brief").cursor == "2025-03-04T11:00:00Z"
    assert read_rows(path, V1_COLUMNS)[:4] == V1_ROWS


def test_newer_ledger_is_refused_and_left_byte_for_byte(tmp_path: Path) -> None:
    path = tmp_path / "state" / "ledger.db"
    build(path, 2, 2)
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE runs ADD COLUMN from_the_future TEXT")
    db.execute(f"PRAGMA user_version = {LEDGER_VERSION + 4}")
    db.commit()
    db.close()
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(LedgerError) as info:
        Ledger(path)
    assert str(info.value) == (
        f"{path}: written by a newer vinos-routine (schema {LEDGER_VERSION + 4}, this one knows "
        f"{LEDGER_VERSION}); "
        "upgrade vinos-routine, the ledger was not touched"
    )
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    assert os.listdir(path.parent) == ["ledger.db"]


# v2.1 (schema 4): as Ledger created it before run_days, with auto_vacuum off.
V4_SCHEMA = (
    V1_SCHEMA,
    *(f"ALTER TABLE runs ADD COLUMN {c}" for c in ("tool_calls INTEGER", "tools_used TEXT")),
    *(
        f"ALTER TABLE runs ADD COLUMN {c}"
        for c in (
            "route TEXT",
            "escalated INTEGER",
            "escalated_reason TEXT",
            "local_input_tokens INTEGER",
            "local_output_tokens INTEGER",
        )
    ),
    *(f"ALTER TABLE runs ADD COLUMN {c} TEXT" for c in NEW_V4[:8]),
    *(f"ALTER TABLE runs ADD COLUMN {c}" for c in ("owner_pid INTEGER", "owner_started REAL")),
    "ALTER TABLE runs ADD COLUMN worker_pid INTEGER",
    "CREATE UNIQUE INDEX runs_run_id ON runs(run_id)",
    "CREATE INDEX runs_routine_started ON runs(routine, started_at)",
    "CREATE INDEX runs_started ON runs(started_at)",
    "CREATE INDEX runs_active ON runs(status) WHERE status IN ('queued', 'running')",
    "CREATE TABLE claims (routine TEXT NOT NULL, slot TEXT NOT NULL, claimed_at TEXT NOT NULL, "
    "run_id TEXT, PRIMARY KEY (routine, slot))",
    "CREATE TABLE routine_state (routine TEXT PRIMARY KEY, enabled_override INTEGER, "
    "file_enabled_seen INTEGER, failure_streak INTEGER NOT NULL DEFAULT 0, "
    "disabled_reason TEXT, cursor TEXT, schedule_fingerprint TEXT, updated_at TEXT)",
)


def test_v4_ledger_gains_day_rows_last_runs_and_incremental_vacuum(tmp_path: Path) -> None:
    path = tmp_path / "state" / "ledger.db"
    path.parent.mkdir(parents=True)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    for statement in V4_SCHEMA:
        db.execute(statement)
    rows = [
        ("r1", "brief", "2026-01-05T06:00:00.000000Z", "ok", "done", 0.25),
        ("r2", "brief", "2026-01-06T06:00:00.000000Z", "failed", None, 0.125),
        ("r3", "brief", "2026-01-07T06:00:00.000000Z", "skipped", None, 0.0),
        ("r4", "triage", "2026-01-06T08:00:00.000000Z", "running", None, 0.0),
        ("r5", "triage", "2026-01-05T08:00:00.000000Z", "ok", "nothing-to-do", 0.5),
    ]
    db.executemany(
        "INSERT INTO runs (run_id, routine, started_at, status, outcome, dollars, finished_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        [(*r, r[2]) for r in rows],
    )
    db.execute(
        "INSERT INTO routine_state (routine, failure_streak, cursor) "
        "VALUES ('brief', 1, '2026-01-07T06:00:00Z')"
    )
    db.execute("INSERT INTO claims VALUES ('brief', '2026-01-07T06:00:00Z', 'x', 'r3')")
    db.execute("PRAGMA user_version = 4")
    db.close()
    with Ledger(path) as led:
        assert led.version == LEDGER_VERSION
        assert led._db.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # 2: INCREMENTAL
        assert [r.run_id for r in led.history(None, 10)] == ["r3", "r4", "r2", "r5", "r1"]
        state = led.state("brief")
        assert (state.failure_streak, state.cursor) == (1, "2026-01-07T06:00:00Z")
        assert led.is_claimed("brief", "2026-01-07T06:00:00Z")
        last = led.last_runs()
        # The newest finished run: a skipped slot or a run still going is not one.
        assert {k: (v.run_id, v.status, v.outcome) for k, v in last.items()} == {
            "brief": ("r2", "failed", None),
            "triage": ("r5", "ok", "nothing-to-do"),
        }
        assert led.compact(at("2026-02-01 00:00"), ZoneInfo("UTC")) == 4  # r4 still running
        [day] = led.days("triage")
        assert (day.day, day.runs, day.counts["ok"], day.dollars) == ("2026-01-05", 1, 1, 0.5)
    stamp = path.stat().st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest()
    with Ledger(path) as led:  # current now: opening it writes nothing
        assert led.version == LEDGER_VERSION
    assert (path.stat().st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest()) == stamp


def test_v9_overrides_are_kept_unbound_and_bound_at_their_next_enable(tmp_path: Path) -> None:
    """Schema 10 binds an enable/disable to its file. A row from before is bound to no file
    (it holds for the file there, as before) until the next enable or disable binds it;
    `vinos-routine mcp` refuses to draft over any override meanwhile."""
    path = tmp_path / "state" / "ledger.db"
    with Ledger(path):
        pass
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("ALTER TABLE routine_state DROP COLUMN file_identity")
    db.execute("ALTER TABLE runs DROP COLUMN tried_model")  # schema 11's, also after 9
    db.execute("DROP TABLE ledger_migrations")  # schema 9 had numbers, not named steps
    db.execute("DROP TABLE conversations")  # a step of the named era, after 9
    db.execute("DROP INDEX proposals_run")
    db.execute(
        "INSERT INTO routine_state (routine, enabled_override, file_enabled_seen) "
        "VALUES ('brief', 1, 0)"
    )
    db.execute("PRAGMA user_version = 9")
    db.close()
    with Ledger(path) as led:
        assert led.version == LEDGER_VERSION
        state = led.state("brief")
        assert (state.enabled_override, state.file_identity) == (True, None)
        assert state.enabled(False, "any file") is True
        # The daemon binds it to the file in force (supervisor/engine/toggle.py `unbound`), once.
        assert led.rebind_override("brief", None, "f1") is True
        assert led.rebind_override("brief", None, "f2") is False
        assert led.state("brief").enabled(False, "another file") is False
        assert led.state("brief").enabled(False, "f1") is True


def applied_names(path: Path) -> list[str]:
    db = sqlite3.connect(path)
    try:
        return [r[0] for r in db.execute("SELECT name FROM ledger_migrations ORDER BY name")]
    finally:
        db.close()


def test_a_new_ledger_records_every_step_by_name(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with Ledger(path) as led:
        assert led.version == LEDGER_VERSION
    assert applied_names(path) == sorted(s.name for s in STEPS)


@pytest.mark.parametrize("number", [5, 8, 9, 11])
def test_a_numbered_ledger_upgrades_in_place_its_steps_named_and_none_run_twice(
    tmp_path: Path, number: int
) -> None:
    """A ledger from before named steps (PRAGMA user_version `number`, no ledger_migrations),
    laid out by the very steps that made it: its number says which steps it has; only the
    later ones run (a step run twice would fail: ALTER TABLE of a column that exists)."""
    path = tmp_path / "ledger.db"
    db = sqlite3.connect(path, isolation_level=None)
    for step in legacy_steps(number):
        step.apply(db)
    db.execute(
        "INSERT INTO runs (run_id, routine, trigger, status, started_at, dollars) "
        "VALUES ('r0', 'brief', 'manual', 'ok', '2026-12-01T07:00:00.000000Z', 0.5)"
    )
    db.execute(f"PRAGMA user_version = {number}")
    db.close()
    with Ledger(path) as led:
        assert led.version == LEDGER_VERSION
        [row] = led.history("brief")
        assert (row.run_id, row.status, row.dollars, row.tried_model) == ("r0", "ok", 0.5, None)
    assert applied_names(path) == sorted(s.name for s in STEPS)
    stamp = hashlib.sha256(path.read_bytes()).hexdigest()
    with Ledger(path):  # current now: opening it again writes nothing
        pass
    assert hashlib.sha256(path.read_bytes()).hexdigest() == stamp


def test_a_ledger_with_a_step_this_version_lacks_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "state" / "ledger.db"
    Ledger(path).close()
    db = sqlite3.connect(path)
    db.execute("INSERT INTO ledger_migrations VALUES ('m099_from_the_future', 'then')")
    db.commit()
    db.close()
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(LedgerError) as info:
        Ledger(path)
    assert str(info.value) == (
        f"{path}: written by a newer vinos-routine (steps m099_from_the_future unknown to this "
        "one); upgrade vinos-routine, the ledger was not touched"
    )
    with pytest.raises(LedgerError, match="m099_from_the_future"):
        Ledger.read_only(path)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_a_ledger_in_the_withdrawn_packed_layout_is_refused_naming_the_file(
    tmp_path: Path,
) -> None:
    """Schemas 6 to 8 of a build no release shipped kept runs in `run_log` behind a view: this
    version reads them no more, and says so, and what to do, leaving the file be."""
    path = tmp_path / "state" / "ledger.db"
    path.parent.mkdir()
    db = sqlite3.connect(path, isolation_level=None)
    for step in legacy_steps(5):
        step.apply(db)
    db.execute("CREATE TABLE run_log (id INTEGER PRIMARY KEY, routine INTEGER)")
    db.execute("PRAGMA user_version = 7")
    db.close()
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(LedgerError) as info:
        Ledger(path)
    assert str(info.value).startswith(
        f"{path}: a ledger in the withdrawn packed layout (schema 7, table run_log)"
    )
    assert "move it aside to start a new ledger; it was not touched" in str(info.value)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
