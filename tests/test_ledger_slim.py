"""The compact run layout (ledger schema 6, routines/runlog.py) on real SQLite files.

A schema-5 ledger, laid out by the v1-v5 migrations themselves and filled by plain SQL with
every shape of row older versions and the daemon wrote, converts with every run, sum, claim
and cursor exactly as it was (read back through the `runs` and `claims` views, which show the
schema-5 columns). A process killed with SIGKILL in the middle of that conversion leaves the
schema-5 file whole, and the next open converts it. A run costs a bounded number of bytes.
`keep_runs_max` folds whole days beyond a routine's newest N runs, and prunes claims the same
way, with every sum exact.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from routines import ledger as ledger_module
from routines.ledger import LEDGER_VERSION, Ledger, iso
from routines.runs import Outcome, RunEnd, RunStatus

REPO = Path(__file__).resolve().parent.parent
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
    db.execute(ledger_module._V1)
    for step in range(2, 6):
        columns, statements = ledger_module._STEPS[step]
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
        state = db.execute("SELECT * FROM routine_state ORDER BY routine").fetchall()
        days = db.execute("SELECT * FROM run_days ORDER BY routine, day").fetchall()
        return {"runs": runs, "sums": sums, "claims": claims, "state": state, "days": days}
    finally:
        db.close()


def test_a_v5_ledger_converts_with_every_run_sum_claim_and_cursor_exact(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    build_v5(path, extra_runs=3000)
    before = snapshot(path)
    with Ledger(path) as led:
        assert led.version == LEDGER_VERSION
        assert led._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        # The daemon's run ids are the row ids now; the others keep their text.
        ids = dict(led._db.execute("SELECT run_id, id FROM runs WHERE run_id IS NOT NULL"))
        assert ids["20261201T060012-day-brief-3f9a1c"] >= 1 << 40
        # Two runs whose ids name the same second: in the order they were written.
        assert (
            1 << 40
            <= ids["20261202T060003-day-brief-000001"]
            < ids["20261202T060003-triage-000001"]
        )
        assert ids["r13"] == 13
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
    after = snapshot(path)
    assert after == before
    # Stored compactly: no ISO text left where the integer says the same.
    db = sqlite3.connect(path)
    assert db.execute("SELECT COUNT(*) FROM run_log WHERE raw IS NOT NULL").fetchone()[0] == 3
    assert db.execute("SELECT COUNT(DISTINCT detail) FROM run_log").fetchone()[0] == 6
    db.close()


def test_what_the_views_take_reads_back_the_same(tmp_path: Path) -> None:
    """Rows written through the `runs` view (as older tools and the tests' SQL do) and
    through the API decode to exactly what was written."""
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
        assert led.claim("api", "2026-12-03T06:00:00Z", run_id=rid, trigger="schedule",
                         status="queued", now=t, owner=(1, 2.5))  # fmt: skip
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
        assert (
            led._db.execute("SELECT owner_pid FROM run_log WHERE id = ?", (run.id,)).fetchone()[0]
            is None
        )


# The upgrade in a process of its own, with two test seams: the note's threshold lowered
# (argv[2]) so a small ledger prints it, and a wait after the whole conversion has run and
# before it commits, where the test kills it. Killed there, it is killed midway on any
# machine, fast or loaded (it took a 60,000-run ledger, and up to 120 s under load, to make
# that likely by size alone).
CONVERT = """
import sys, time
from pathlib import Path
import routines.ledger as ledger_mod
from routines import runlog
ledger_mod.SLOW_UPGRADE_ROWS = int(sys.argv[2])
views = runlog.views
def views_then_wait(*args):
    out = views(*args)
    print("converted, not committed", file=sys.stderr, flush=True)
    time.sleep(3600)
    return out
runlog.views = views_then_wait
ledger_mod.Ledger(Path(sys.argv[1])).close()
"""


def test_a_conversion_killed_midway_leaves_schema_5_whole_and_resumes(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    build_v5(path, extra_runs=600)
    before = snapshot(path)
    proc = subprocess.Popen(
        [sys.executable, "-c", CONVERT, str(path), "500"],
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert proc.stderr is not None
    note = proc.stderr.readline()  # written inside the transaction, before any statement
    assert "upgrading the ledger from schema 5" in note, note
    assert proc.stderr.readline().strip() == "converted, not committed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == 5
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    db.close()
    assert snapshot(path) == before  # the half-done conversion left nothing behind
    with Ledger(path) as led:
        assert led.version == LEDGER_VERSION
    assert snapshot(path) == before


def _file_bytes(path: Path) -> int:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("VACUUM")
    size: int = (
        db.execute("PRAGMA page_count").fetchone()[0] * db.execute("PRAGMA page_size").fetchone()[0]
    )
    db.close()
    return size


def test_a_run_costs_a_bounded_number_of_bytes(tmp_path: Path) -> None:
    """N minutely runs through the API, each with its claim: the file grows by at most
    150 bytes a run (schema 5 took ~600; bench_ledger_year.py reports the breakdown)."""
    path = tmp_path / "ledger.db"
    Ledger(path).close()
    empty = _file_bytes(path)
    n = 3000
    with Ledger(path) as led:
        for i in range(n):
            t = NOW + timedelta(minutes=i)
            rid = f"{t:%Y%m%dT%H%M%S}-minutely-{i * 7919 % 16777216:06x}"
            slot = t.strftime("%Y-%m-%dT%H:%M:%SZ")
            led.claim("minutely", slot, run_id=rid, trigger="schedule", status="running", now=t)
            end = RunEnd(
                RunStatus.OK,
                outcome=Outcome.NOTHING_TO_DO,
                detail="checked the queue: nothing new since the last run",
                route="command",
                tools_used=("run_shell",),
                tool_calls=1,
                output_file=f"/home/u/.vinos/routines/state/minutely/{t:%Y-%m-%d-%H%M}.md",
            )
            assert led.finish_run(rid, end, now=t + timedelta(seconds=2, microseconds=i))
    per_run = (_file_bytes(path) - empty) / n
    assert per_run <= 150, per_run


def test_keep_runs_max_folds_whole_days_beyond_the_newest_runs(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    build_v5(path, extra_runs=4 * 1440)  # four days of a minutely routine
    zone = ZoneInfo("UTC")
    with Ledger(path) as led:
        totals = led.totals(NOW - timedelta(days=30), NOW + timedelta(days=1))
        by_day = led.dollars_by_day([(NOW - timedelta(days=d)).date() for d in range(5)], zone)
        texts = led._db.execute("SELECT COUNT(*) FROM texts").fetchone()[0]
        folded = 0
        while n := led.compact(NOW - timedelta(days=3650), zone, 500, keep_max=2000):
            folded += n
        whole = [r[0] for r in led._db.execute("SELECT started_at FROM runs WHERE "
                 "routine = 'minutely' ORDER BY started_at")]  # fmt: skip
        # The 2,000th newest run started on the 2nd of December: that day and after stay
        # whole, every run before it is in a day row.
        assert len(whole) >= 2000 and whole[0] == "2026-12-02T00:00:00.000000Z"
        assert folded == 4 * 1440 - len(whole)
        assert [d.day for d in led.days("minutely")] == ["2026-12-01", "2026-11-30", "2026-11-29"]
        assert led.totals(NOW - timedelta(days=30), NOW + timedelta(days=1)) == totals
        days = [(NOW - timedelta(days=d)).date() for d in range(5)]
        assert led.dollars_by_day(days, zone) == by_day
        # Other routines, far below 2,000 runs, keep theirs; texts only folded runs used go.
        assert led._db.execute("SELECT COUNT(*) FROM runs WHERE routine != 'minutely'").fetchone()[
            0
        ] == len(ROWS)
        # The summaries of the first two of the four days were only in folded runs.
        assert led._db.execute("SELECT COUNT(*) FROM texts").fetchone()[0] == texts - 2


def test_claims_beyond_the_newest_n_are_pruned_behind_the_cursor(tmp_path: Path) -> None:
    """Bounding a routine's claims by count keeps "never a slot twice": the scheduler plans
    only slots after the cursor, which a claim moves forward in its own transaction (the CAS
    `expect_cursor`) and never back; a pruned claim is older than the N newest, so older
    than the cursor, and no plan reaches it again."""
    with Ledger(tmp_path / "ledger.db") as led:
        slots = [NOW + timedelta(minutes=i) for i in range(300)]
        cursor = None
        for t in slots:
            slot = t.strftime("%Y-%m-%dT%H:%M:%SZ")
            assert led.claim("minutely", slot, run_id=f"r{t:%H%M}", trigger="schedule",
                             status="skipped", now=t, expect_cursor=cursor)  # fmt: skip
            cursor = slot
        assert led.prune_claims(slots[-1], keep_max=100) == 200
        fence = [r[0] for r in led._db.execute("SELECT slot FROM claims ORDER BY slot")]
        assert fence == [t.strftime("%Y-%m-%dT%H:%M:%SZ") for t in slots[200:]]
        pruned_newest = slots[199].strftime("%Y-%m-%dT%H:%M:%SZ")
        assert (
            led.state("minutely").cursor == cursor and cursor is not None and cursor > pruned_newest
        )
        # A stale plan from before the prune loses its CAS instead of re-claiming the slot.
        assert not led.claim("minutely", pruned_newest, run_id="again", trigger="schedule",
                             status="queued", now=NOW, expect_cursor=pruned_newest)  # fmt: skip


def test_a_later_step_adds_a_run_column_the_views_show(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step after 6 that adds a column (as every step before did) adds it to run_log; the
    `runs` view and its triggers are made again with it."""
    path = tmp_path / "ledger.db"
    with Ledger(path) as led:
        led.record_run("brief", run_id="before", trigger="manual", status="ok", now=NOW)
    later = LEDGER_VERSION + 1
    monkeypatch.setitem(ledger_module._STEPS, later, (("note TEXT",), ()))
    monkeypatch.setattr(ledger_module, "LEDGER_VERSION", later)
    monkeypatch.setattr(ledger_module, "_LATER_COLUMNS", (*ledger_module._LATER_COLUMNS, "note"))
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
