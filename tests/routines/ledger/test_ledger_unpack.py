"""Schema 6's packed layout (routines/ledger/migrate_packed6.py) unpacked into plain tables by
step 9 (routines/ledger/migrate_unpack.py), on real SQLite files.

A packed ledger is made here the way schema 6 made one: a schema-5 ledger laid out by the
v1-v5 migrations themselves, filled by plain SQL with every shape of row older versions and
the daemon wrote, then packed by schema 6's own statements (and, for 8, schema 7's and 8's).
It unpacks with every run, sum, claim and cursor exactly as the packed views showed them. A
process killed with SIGKILL in the middle of the unpacking (at a fixed point, not a time)
leaves the packed file whole, and the next open unpacks it. `keep_runs_max` folds whole days
beyond a routine's newest N runs, and prunes claims the same way, with every sum exact.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from routines.ledger import LEDGER_VERSION, Ledger, iso, migrate_packed6
from routines.ledger import migrate_sqlite as ledger_module
from routines.runs import RunEnd, RunStatus, Trigger

REPO = Path(__file__).resolve().parents[3]
NOW = datetime(2026, 12, 3, 10, 0, tzinfo=UTC)
V5_COLUMNS = (
    "id",
    "routine",
    "started_at",
    "model",
    "input_tokens",
    "output_tokens",
    "dollars",
    "duration_sec",
    "exit_status",
    "tool_calls",
    "tools_used",
    "route",
    "escalated",
    "escalated_reason",
    "local_input_tokens",
    "local_output_tokens",
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
OWNER = ("owner_pid", "owner_started", "worker_pid")


def v5_ledger(path: Path) -> sqlite3.Connection:
    """An empty schema-5 ledger made by the ledger's own migrations 1 to 5."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA auto_vacuum=INCREMENTAL")
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(ledger_module.V1)
    for step in range(2, 6):
        columns, statements = ledger_module.STEPS[step]
        for column in columns:
            db.execute(f"ALTER TABLE runs ADD COLUMN {column}")
        for statement in statements:
            db.execute(statement)
    db.execute("PRAGMA user_version = 5")
    return db


def _row(**values: object) -> dict[str, object]:
    row: dict[str, object] = dict.fromkeys(V5_COLUMNS)
    row.update(values)
    return row


# Every shape of row: the daemon's own (packed run ids), hand-made ids, v2.0.4 rows with no
# run id and +00:00 times, runs still going (owners kept), two routines whose run ids pack to
# the same number, odd floats, unicode, a path-less output name.
ROWS = [
    _row(
        id=1,
        routine="day-brief",
        started_at="2025-03-01T11:00:02.412000+00:00",
        model="claude-sonnet-4-5",
        input_tokens=5200,
        output_tokens=610,
        dollars=0.0248,
        duration_sec=41.5,
        exit_status="ok",
        tool_calls=4,
        tools_used='["read_files","run_shell"]',
    ),
    _row(id=2, routine="day-brief", started_at="2025-03-02T11:00:01+00:00", exit_status="error"),
    _row(id=3, routine="evening", started_at=None),
    _row(
        id=10,
        routine="day-brief",
        run_id="20261201T060012-day-brief-3f9a1c",
        slot="2026-12-01T06:00:00Z",
        trigger="schedule",
        status="ok",
        outcome="done",
        detail="résumé: 3 mails ✉, nothing urgent",
        started_at="2026-12-01T06:00:12.123456Z",
        finished_at="2026-12-01T06:01:53.654321Z",
        duration_sec=101.530865,
        route="local",
        model="llama3.2:3b",
        escalated=1,
        escalated_reason="the tool asked for it",
        input_tokens=1234,
        output_tokens=56,
        local_input_tokens=7000,
        local_output_tokens=300,
        tool_calls=2,
        tools_used='["run_shell"]',
        dollars=0.123456,
        output_file="/home/u/.vinos/routines/state/day-brief/2026-12-01-0600.md",
        owner_pid=4242,
        owner_started=1764000000.25,
        worker_pid=5151,
    ),
    _row(
        id=11,
        routine="day-brief",
        run_id="20261202T060003-day-brief-000001",
        slot="2026-12-02T06:00:00Z",
        trigger="schedule",
        status="running",
        started_at="2026-12-02T06:00:03.000001Z",
        duration_sec=None,
        dollars=0,
        owner_pid=4242,
        owner_started=1764000000.25,
        worker_pid=5152,
    ),
    _row(
        id=12,
        routine="triage",
        run_id="20261202T060003-triage-000001",  # packs like id 11's: kept as text
        slot="2026-12-02T06:00:00Z",
        trigger="manual",
        status="queued",
        started_at="2026-12-02T06:00:03.500000Z",
        owner_pid=4243,
        owner_started=1764000001.5,
    ),
    _row(
        id=13,
        routine="triage",
        run_id="r13",
        slot="not-a-slot",
        trigger="catch-up",
        status="failed",
        detail="the command exited with code 1",
        started_at="2026-12-02T07:00:00.000000Z",
        finished_at="2026-12-02T07:00:00+00:00",
        duration_sec=12.0,
        output_file="loose-name.md",
        dollars=1e-06,
    ),
    _row(
        id=14,
        routine="triage",
        run_id="20261202T080000-triage-ffffff",
        slot="2026-12-02T08:00:00Z",
        trigger="schedule",
        status="skipped",
        detail="",
        started_at="2026-12-02T08:00:00.000000Z",
        finished_at="2026-12-02T08:00:00.000000Z",
        duration_sec=0.0,
        dollars=0,
        tools_used="[]",
    ),
]
CLAIMS = [
    ("day-brief", "2026-12-01T06:00:00Z", "2026-12-01T06:00:12.123456Z", ROWS[3]["run_id"]),
    ("day-brief", "2026-12-02T06:00:00Z", "2026-12-02T06:00:03.000001Z", ROWS[4]["run_id"]),
    ("triage", "2026-12-02T06:00:00Z", "2026-12-02T06:00:03.500000Z", ROWS[5]["run_id"]),
    ("triage", "2026-12-02T08:00:00Z", "2026-12-02T08:00:00.000000Z", ROWS[7]["run_id"]),
]


def build_v5(path: Path, extra_runs: int = 0) -> None:
    db = v5_ledger(path)
    db.execute("BEGIN")
    cols = ", ".join(V5_COLUMNS)
    marks = ", ".join(f":{c}" for c in V5_COLUMNS)
    db.executemany(f"INSERT INTO runs ({cols}) VALUES ({marks})", ROWS)
    db.executemany("INSERT INTO claims VALUES (?, ?, ?, ?)", CLAIMS)
    db.execute(
        "INSERT INTO routine_state (routine, failure_streak, cursor, schedule_fingerprint, "
        "last_run_id, last_status, last_started, last_finished) VALUES "
        "('day-brief', 2, '2026-12-02T06:00:00Z', 'fp1', ?, 'ok', ?, ?)",
        (ROWS[3]["run_id"], ROWS[3]["started_at"], ROWS[3]["finished_at"]),
    )
    if extra_runs:  # a minutely routine, rows shaped like the daemon's
        start = int((NOW - timedelta(minutes=extra_runs)).timestamp())
        db.execute(
            f"""WITH RECURSIVE m(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM m
                WHERE i < {extra_runs - 1})
            INSERT INTO runs (run_id, routine, slot, trigger, status, detail, started_at,
                finished_at, duration_sec, dollars, output_file)
            SELECT strftime('%Y%m%dT%H%M%S', {start} + i * 60, 'unixepoch') || '-minutely-'
                       || printf('%06x', i), 'minutely',
                   strftime('%Y-%m-%dT%H:%M:00Z', {start} + i * 60, 'unixepoch'), 'schedule',
                   'ok', 'summary of day ' || (i / 1440),
                   strftime('%Y-%m-%dT%H:%M:%S.000000Z', {start} + i * 60, 'unixepoch'),
                   strftime('%Y-%m-%dT%H:%M:%S.250000Z', {start} + i * 60 + 1, 'unixepoch'),
                   1.25, (i % 13) / 1000.0, '/state/minutely/' || i || '.md' FROM m"""
        )
    db.execute("COMMIT")
    db.close()


def pack(path: Path, version: int) -> None:
    """Turn the schema-5 ledger at `path` into a packed one of `version` (6, 7 or 8) with the
    statements those schemas ran."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("BEGIN")
    for statement in migrate_packed6.MIGRATION:
        db.execute(statement)
    later: tuple[str, ...] = ()
    if version >= 7:
        for statement in ledger_module.STEPS[7][1]:
            db.execute(statement)
    if version >= 8:
        db.execute("ALTER TABLE run_log ADD COLUMN parent_run_id TEXT")
        later = ("parent_run_id",)
    for statement in migrate_packed6.views(later):
        db.execute(statement)
    db.execute(f"PRAGMA user_version = {version}")
    db.execute("COMMIT")
    db.close()


def build_packed(path: Path, version: int, extra_runs: int = 0) -> None:
    build_v5(path, extra_runs)
    pack(path, version)


STATE_COLUMNS = (
    "routine",
    "enabled_override",
    "file_enabled_seen",
    "failure_streak",
    "disabled_reason",
    "cursor",
    "schedule_fingerprint",
    "updated_at",
)


def snapshot(path: Path) -> dict[str, object]:
    """Everything a user can read, through plain sqlite3, keyed so packed ids may change."""
    db = sqlite3.connect(path)
    try:
        runs = {}
        for r in db.execute(f"SELECT {', '.join(V5_COLUMNS)} FROM runs"):
            row = dict(zip(V5_COLUMNS, r, strict=True))
            key = row["run_id"] or f"id-{row['id']}"
            if row["run_id"] is not None:
                row.pop("id")
            if row["status"] not in ("queued", "running"):
                for c in OWNER:  # an owner means nothing once a run has finished
                    row.pop(c)
            runs[key] = row
        sums = db.execute(
            "SELECT routine, COUNT(*), SUM(dollars), SUM(input_tokens), SUM(duration_sec) "
            "FROM runs GROUP BY routine ORDER BY routine"
        ).fetchall()
        claims = sorted(db.execute("SELECT routine, slot, run_id FROM claims").fetchall())
        # The columns schema 5 had: a later step's new column (file_identity) starts empty.
        state = db.execute(
            f"SELECT {', '.join(STATE_COLUMNS)} FROM routine_state ORDER BY routine"
        ).fetchall()
        days = db.execute("SELECT * FROM run_days ORDER BY routine, day").fetchall()
        return {"runs": runs, "sums": sums, "claims": claims, "state": state, "days": days}
    finally:
        db.close()


@pytest.mark.parametrize("version", [6, 8])
def test_a_packed_ledger_unpacks_with_every_run_sum_claim_and_cursor_exact(
    tmp_path: Path, version: int
) -> None:
    path = tmp_path / "ledger.db"
    build_packed(path, version, extra_runs=3000)
    before = snapshot(path)
    with Ledger(path) as led:
        assert led.version == LEDGER_VERSION
        assert led._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        ids = dict(led._db.execute("SELECT run_id, id FROM runs WHERE run_id IS NOT NULL"))
        # A run id schema 6 kept as text keeps its row id; the packed ones are numbered in
        # the order schema 6 kept them (two in one second: in the order they were written).
        assert ids["r13"] == 13
        assert ids["20261202T060003-day-brief-000001"] < ids["20261202T060003-triage-000001"]
        # Through the API, as before.
        assert led.run("20261201T060012-day-brief-3f9a1c") is not None
        assert led.run("20261202T060003-triage-000001") is not None
        assert {a.run_id for a in led.active_runs()} == {
            "20261202T060003-day-brief-000001",
            "20261202T060003-triage-000001",
        }
        assert [r.id for r in led.history("day-brief")][-2:] == [2, 1]
        assert led.is_claimed("triage", "2026-12-02T08:00:00Z")
        assert not led.is_claimed("triage", "2026-12-02T09:00:00Z")
        assert led.state("day-brief").cursor == "2026-12-02T06:00:00Z"
    assert snapshot(path) == before
    db = sqlite3.connect(path)
    # Plain tables only: no view, no trigger, none of the packed tables.
    kinds = dict(db.execute("SELECT name, type FROM sqlite_master WHERE name NOT LIKE 'sqlite%'"))
    assert "view" not in kinds.values() and "trigger" not in kinds.values()
    assert {"run_log", "fence", "texts", "routines"}.isdisjoint(kinds)
    assert kinds["runs"] == kinds["claims"] == kinds["proposals"] == "table"
    # As `sqlite3 ledger.db 'SELECT * FROM runs'` shows them: the ISO times as written.
    assert db.execute(
        "SELECT started_at, finished_at, parent_run_id FROM runs WHERE run_id = 'r13'"
    ).fetchone() == ("2026-12-02T07:00:00.000000Z", "2026-12-02T07:00:00+00:00", None)
    # The same columns, in the same order, as a ledger that was never packed.
    Ledger(tmp_path / "fresh.db").close()
    fresh = sqlite3.connect(tmp_path / "fresh.db")
    for table in ("runs", "claims"):
        info = f"PRAGMA table_info({table})"
        assert db.execute(info).fetchall() == fresh.execute(info).fetchall()
    indexes = "SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'runs%'"
    assert sorted(db.execute(indexes)) == sorted(fresh.execute(indexes))
    db.close()
    fresh.close()


def test_a_v5_ledger_upgrades_in_place_without_a_copy(tmp_path: Path) -> None:
    """Schema 5 is plain already: it takes the steps after it and keeps every row."""
    path = tmp_path / "ledger.db"
    build_v5(path, extra_runs=300)
    before = snapshot(path)
    with Ledger(path) as led:
        assert led.version == LEDGER_VERSION
        assert [r.id for r in led.history("day-brief")][-2:] == [2, 1]
    assert snapshot(path) == before


def test_what_plain_sql_and_the_api_write_reads_back_the_same(tmp_path: Path) -> None:
    """Rows written into `runs` by plain SQL (as older tools and the tests' SQL do) and
    through the API read back exactly as written."""
    with Ledger(tmp_path / "ledger.db") as led:
        with led.transaction() as db:
            cols = ", ".join(c for c in V5_COLUMNS if c != "id")
            marks = ", ".join(f":{c}" for c in V5_COLUMNS if c != "id")
            db.executemany(f"INSERT INTO runs ({cols}) VALUES ({marks})", ROWS[3:])
        got = {
            r["run_id"]: dict(r)
            for r in led._db.execute(f"SELECT {', '.join(V5_COLUMNS)} FROM runs")
        }
        for want in ROWS[3:]:
            row = got[str(want["run_id"])]
            assert {k: row[k] for k in V5_COLUMNS if k != "id"} == {
                k: want[k] for k in V5_COLUMNS if k != "id"
            }
        t = datetime(2026, 12, 3, 6, 0, 7, 654321, tzinfo=UTC)
        rid = f"{t:%Y%m%dT%H%M%S}-api-0a0b0c"
        assert led.claim("api", "2026-12-03T06:00:00Z", run_id=rid, trigger=Trigger.SCHEDULE,
                         status=RunStatus.QUEUED, now=t, owner=(1, 2.5))  # fmt: skip
        led.start_run(rid, now=t + timedelta(seconds=1), worker_pid=77)
        [active] = [a for a in led.active_runs() if a.run_id == rid]
        assert (active.run_id, active.status, active.owner_pid, active.worker_pid) == (
            rid,
            "running",
            1,
            77,
        )
        assert led.finish_run(rid, RunEnd(RunStatus.OK), now=t + timedelta(seconds=30.5))
        run = led.run(rid)
        assert run is not None
        assert (run.slot, run.started_at, run.finished_at, run.duration_sec) == (
            "2026-12-03T06:00:00Z",
            iso(t + timedelta(seconds=1)),
            iso(t + timedelta(seconds=30.5)),
            29.5,
        )
        assert rid not in {a.run_id for a in led.active_runs()}


# The upgrade in a process of its own, with three test seams: the note's threshold and the
# batch size lowered (argv[2], argv[3]) so a small ledger prints the note and its progress,
# and a wait after the whole unpacking has run and before it commits, where the test kills
# it. Killed there, it is killed midway on any machine, fast or loaded.
CONVERT = """
import sys, time
from pathlib import Path
import routines.ledger.migrate_sqlite as ledger_mod
from routines.ledger import Ledger
from routines.ledger import migrate_unpack
ledger_mod.SLOW_UPGRADE_ROWS = int(sys.argv[2])
migrate_unpack.BATCH = int(sys.argv[3])
unpack = migrate_unpack.unpack
def unpack_then_wait(*args):
    unpack(*args)
    print("unpacked, not committed", file=sys.stderr, flush=True)
    time.sleep(3600)
migrate_unpack.unpack = unpack_then_wait
Ledger(Path(sys.argv[1])).close()
"""


def test_an_unpacking_killed_midway_leaves_the_packed_schema_whole_and_resumes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ledger.db"
    build_packed(path, 8, extra_runs=600)
    before = snapshot(path)
    proc = subprocess.Popen(
        [sys.executable, "-c", CONVERT, str(path), "500", "250"],
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert proc.stderr is not None
    note = proc.stderr.readline()  # written inside the transaction, before any statement
    assert f"upgrading the ledger from schema 8 to {LEDGER_VERSION}" in note, note
    total = 600 + len(ROWS)
    progress = [proc.stderr.readline().strip() for _ in range(3)]
    assert progress == [f"{path}: {n:,} of {total:,} runs unpacked" for n in (250, 500, total)]
    assert proc.stderr.readline().strip() == "unpacked, not committed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == 8
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert db.execute("SELECT type FROM sqlite_master WHERE name = 'runs'").fetchone() == ("view",)
    db.close()
    assert snapshot(path) == before  # the half-done unpacking left nothing behind
    with Ledger(path) as led:
        assert led.version == LEDGER_VERSION
    assert snapshot(path) == before


def test_a_later_step_adds_a_run_column(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A step after 9 that adds a column (as every step before did) adds it to runs."""
    path = tmp_path / "ledger.db"
    with Ledger(path) as led:
        led.record_run(
            "brief", run_id="before", trigger=Trigger.MANUAL, status=RunStatus.OK, now=NOW
        )
    later = LEDGER_VERSION + 1
    monkeypatch.setitem(ledger_module.STEPS, later, (("note TEXT",), ()))
    monkeypatch.setattr(ledger_module, "LEDGER_VERSION", later)
    with Ledger(path) as led:
        assert led.version == later
        with led.transaction() as db:
            db.execute(
                "INSERT INTO runs (run_id, routine, started_at, status, note) "
                "VALUES ('after', 'brief', ?, 'ok', 'hello')",
                (iso(NOW),),
            )
        got = dict(led._db.execute("SELECT run_id, note FROM runs").fetchall())
        assert got == {"before": None, "after": "hello"}
        assert led.run("before") is not None
