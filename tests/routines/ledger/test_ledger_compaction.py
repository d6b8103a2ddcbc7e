"""Compaction on real ledger files: runs past the line become one row per routine per day with
the same sums, exactly (counted here by plain SQL and Python, not by the code under test);
a process killed with SIGKILL in the middle of a batch loses and double-counts nothing; money
queries that straddle the line are exact; each routine's last run comes from routine_state.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter, defaultdict
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from routines.ledger import Ledger, day_bounds, iso
from routines.ledger.rundays import compaction_line
from routines.runs import Outcome, RunEnd, RunStatus, Trigger

REPO = Path(__file__).resolve().parents[3]
HOUR = timedelta(hours=1)
ZONE = ZoneInfo("Europe/Paris")  # DST ends on 25 Oct 2026: a 25-hour day in the history
NOW = datetime(2026, 12, 3, 10, 0, tzinfo=UTC)
STATUSES = [RunStatus.OK] * 6 + [
    RunStatus.FAILED,
    RunStatus.TIMEOUT,
    RunStatus.INTERRUPTED,
    RunStatus.SKIPPED,
    RunStatus.MISSED,
    RunStatus.BUDGET,
]
OUTCOMES = [None, Outcome.DONE, Outcome.NOTHING_TO_DO, Outcome.NEEDS_ATTENTION]


def fill(ledger: Ledger, start: datetime, hours: int, seed: int = 1) -> None:
    """Runs of three routines through `hours` hours, every status, odd dollar amounts."""
    rng = random.Random(seed)
    for h in range(hours):
        for n, routine in enumerate(("alpha", "beta", "gamma")):
            t = start + timedelta(hours=h, minutes=7 * n)
            run_id = f"{t:%Y%m%dT%H%M%S}-{routine}-{h:05d}"
            status = rng.choice(STATUSES)
            if status in (RunStatus.SKIPPED, RunStatus.MISSED):
                ledger.claim(
                    routine, iso(t), run_id=run_id, trigger=Trigger.SCHEDULE, status=status, now=t
                )
                continue
            ledger.record_run(
                routine, run_id=run_id, trigger=Trigger.SCHEDULE, status=RunStatus.RUNNING, now=t
            )
            ledger.finish_run(
                run_id,
                now=t + timedelta(seconds=rng.uniform(0.5, 90)),
                end=RunEnd(
                    status=status,
                    outcome=rng.choice(OUTCOMES) if status is RunStatus.OK else None,
                    input_tokens=rng.randrange(5000),
                    output_tokens=rng.randrange(800),
                    local_input_tokens=rng.randrange(3000),
                    local_output_tokens=rng.randrange(300),
                    tool_calls=rng.randrange(6),
                    dollars=round(rng.uniform(0, 0.2), 6),
                ),
            )


def sums(path: Path) -> dict[tuple[str, str], Counter[str]]:
    """Per (routine, day in ZONE): counts and sums over whole runs plus compacted days,
    computed from the file with plain sqlite3."""
    out: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    db = sqlite3.connect(path)
    try:
        for row in db.execute(
            "SELECT routine, started_at, status, outcome, input_tokens, output_tokens, "
            "local_input_tokens, local_output_tokens, tool_calls, dollars, duration_sec "
            "FROM runs WHERE status NOT IN ('queued', 'running')"
        ):
            routine, started, status, outcome, it, ot, lit, lot, tc, dollars, dur = row
            day = datetime.fromisoformat(started.replace("Z", "+00:00")).astimezone(ZONE)
            c = out[(routine, day.date().isoformat())]
            c["runs"] += 1
            c[status] += 1
            if outcome:
                c[outcome.replace("-", "_")] += 1
            c["tokens"] += it + ot
            c["local"] += lit + lot
            c["tool_calls"] += tc
            # Rounded as SQLite's ROUND does it (x + 0.5, truncated): sql.NANO and MS.
            c["nano"] += int(dollars * 1e9 + 0.5)
            c["ms"] += int(dur * 1000 + 0.5)
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
        if "run_days" in tables:
            db.row_factory = sqlite3.Row
            for d in db.execute("SELECT * FROM run_days"):
                c = out[(d["routine"], d["day"])]
                c["runs"] += d["runs"]
                for k in (*set(STATUSES), "done", "nothing_to_do", "needs_attention"):
                    c[k] += d[k]
                c["tokens"] += d["input_tokens"] + d["output_tokens"]
                c["local"] += d["local_input_tokens"] + d["local_output_tokens"]
                c["tool_calls"] += d["tool_calls"]
                c["nano"] += d["nanodollars"]
                c["ms"] += d["duration_ms"]
    finally:
        db.close()
    for c in out.values():
        for k in [k for k, v in c.items() if v == 0]:
            del c[k]
    return dict(out)


def per_routine(by_day: dict[tuple[str, str], Counter[str]]) -> dict[str, Counter[str]]:
    out: dict[str, Counter[str]] = defaultdict(Counter)
    for (routine, _), c in by_day.items():
        out[routine].update(c)
    return dict(out)


def count(path: Path, sql: str) -> int:
    db = sqlite3.connect(path)
    try:
        return int(db.execute(sql).fetchone()[0])
    finally:
        db.close()


@pytest.fixture
def history(tmp_path: Path) -> Path:
    """Hourly runs: ten days around the 90-day line (4 September), a week around the end of
    summer time, and the last two days."""
    path = tmp_path / "ledger.db"
    with Ledger(path) as ledger:
        fill(ledger, datetime(2026, 8, 25, 0, 30, tzinfo=UTC), 24 * 10)
        fill(ledger, datetime(2026, 10, 22, 0, 30, tzinfo=UTC), 24 * 7, seed=2)  # across DST
        fill(ledger, NOW - timedelta(days=2), 30, seed=3)
    return path


def test_compaction_keeps_every_sum_per_routine_and_per_day(history: Path) -> None:
    before = sums(history)
    line = compaction_line(NOW, ZONE, 30)
    assert line == datetime(2026, 11, 3, tzinfo=ZONE)  # a whole day in ZONE
    with Ledger(history) as ledger:
        active = "20260826T000000-alpha-active"
        ledger.record_run(
            "alpha",
            run_id=active,
            trigger=Trigger.MANUAL,
            status=RunStatus.RUNNING,
            now=line - HOUR,
        )
        old_total = count(history, f"SELECT COUNT(*) FROM runs WHERE started_at < '{iso(line)}'")
        folded = [ledger.compact(line, ZONE, 100) for _ in range(200)]
        assert sum(folded) == old_total - 1 and folded[-1] == 0  # resumable, then done
        assert all(n == 100 for n in folded[: (old_total - 1) // 100])
    assert sums(history) == before
    assert per_routine(sums(history)) == per_routine(before)
    # What is left whole: the runs after the line, and the run still going.
    assert count(history, f"SELECT COUNT(*) FROM runs WHERE started_at < '{iso(line)}'") == 1
    assert count(history, "SELECT COUNT(*) FROM run_days WHERE day >= '2026-11-03'") == 0
    # 25 October in Paris lasts 25 hours: its row holds 25 hourly runs per routine.
    sql = "SELECT runs FROM run_days WHERE routine = 'beta' AND day = '2026-10-25'"
    assert count(history, sql) == 25
    db = sqlite3.connect(history)
    first, last, start, end = db.execute(
        "SELECT first_run_id, last_run_id, start_at, end_at FROM run_days "
        "WHERE routine = 'gamma' AND day = '2026-08-26'"
    ).fetchone()
    db.close()
    assert (first, last) == ("20260825T224400-gamma-00022", "20260826T214400-gamma-00045")
    assert (start, end) == tuple(iso(b) for b in day_bounds(date(2026, 8, 26), ZONE))


KILLER = """
import os, sys, time
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo
from routines.ledger import Ledger

path, marker, line = Path(sys.argv[1]), Path(sys.argv[2]), datetime.fromisoformat(sys.argv[3])
ledger = Ledger(path)
db = ledger._db  # the real connection, to stop inside SQLite itself
for _ in range(2):
    assert ledger.compact(line, ZoneInfo("Europe/Paris"), 200) == 200
base = db.total_changes

def stop_mid_batch() -> int:
    # Called by SQLite every 100 VM steps: once this batch has written a day row (its runs
    # are deleted by one statement after), with nothing committed, say so and wait for
    # SIGKILL.
    if db.in_transaction and db.total_changes - base > 0:
        tmp = marker.with_suffix(".tmp")  # renamed in whole: the test never reads half of it
        tmp.write_text(str(db.total_changes - base))
        os.replace(tmp, marker)
        time.sleep(600)
    return 0

db.set_progress_handler(stop_mid_batch, 100)
ledger.compact(line, ZoneInfo("Europe/Paris"), 200)
"""


def test_kill_9_in_the_middle_of_a_batch_loses_and_double_counts_nothing(
    history: Path, tmp_path: Path
) -> None:
    before = sums(history)
    line = compaction_line(NOW, ZONE, 90)
    marker = tmp_path / "mid-batch"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLER, str(history), str(marker), line.isoformat()], env=env
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert proc.poll() is None, "the compacting process ended before the batch"
            assert time.monotonic() < deadline, "the batch never started"
            time.sleep(0.02)
        assert int(marker.read_text()) > 0  # a day row written, not committed
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    # Restart: exactly the two committed batches are folded, the third left no trace.
    with Ledger(history) as ledger:
        assert count(history, "SELECT SUM(runs) FROM run_days") == 400
        assert sums(history) == before
        while ledger.compact(line, ZONE, 200):
            pass
    assert sums(history) == before
    assert per_routine(sums(history)) == per_routine(before)


def test_money_across_the_compaction_line_is_exact(history: Path) -> None:
    line = compaction_line(NOW, ZONE, 90)
    # September 2026 in ZONE straddles the line (4 September); so do the 30 days to 10 Sept.
    month = (day_bounds(date(2026, 9, 1), ZONE)[0], day_bounds(date(2026, 9, 30), ZONE)[1])
    thirty = (day_bounds(date(2026, 8, 12), ZONE)[0], day_bounds(date(2026, 9, 10), ZONE)[1])
    days = [date(2026, 8, 20) + timedelta(days=n) for n in range(20)]
    with Ledger(history) as ledger:
        figures: list[Any] = [
            ledger.totals(*month),
            ledger.totals(*thirty),
            ledger.dollars_by_day(days, ZONE),
        ]
        assert [r["routine"] for r in figures[0]]  # there is money on both sides
        while ledger.compact(line, ZONE, 150):
            pass
        assert ledger.totals(*month) == figures[0]
        assert ledger.totals(*thirty) == figures[1]
        assert ledger.dollars_by_day(days, ZONE) == figures[2]
    # And they are the runs' own sums (skipped and missed rows are not runs).
    nano: Counter[str] = Counter()
    runs: Counter[str] = Counter()
    for (routine, day), c in sums(history).items():
        if "2026-08-12" <= day <= "2026-09-10":
            nano[routine] += c["nano"]
            runs[routine] += c["runs"] - c["skipped"] - c["missed"]
    assert {r["routine"]: (r["runs"], r["dollars"]) for r in figures[1]} == {
        k: (runs[k], nano[k] / 1e9) for k in nano
    }


def test_last_runs_come_from_routine_state_and_survive_compaction(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    t = datetime(2026, 6, 1, 6, 0, tzinfo=UTC)
    with Ledger(path) as ledger:
        fill(ledger, t, 5)
        ledger.claim(
            "alpha",
            "late",
            run_id="skip",
            trigger=Trigger.SCHEDULE,
            status=RunStatus.SKIPPED,
            now=NOW,
        )
        ledger.record_run(
            "beta", run_id="still", trigger=Trigger.MANUAL, status=RunStatus.RUNNING, now=NOW
        )
        # A run that started earlier but finishes last does not replace the newer last run.
        ledger.record_run(
            "gamma", run_id="g-new", trigger=Trigger.MANUAL, status=RunStatus.RUNNING, now=NOW
        )
        ledger.record_run(
            "gamma",
            run_id="g-old",
            trigger=Trigger.MANUAL,
            status=RunStatus.RUNNING,
            now=NOW - timedelta(1),
        )
        ledger.finish_run("g-new", now=NOW, end=RunEnd(status=RunStatus.OK, outcome=Outcome.DONE))
        ledger.finish_run("g-old", now=NOW, end=RunEnd(status=RunStatus.FAILED))
        expected = {
            name: max(
                (
                    r
                    for r in ledger.history(name, 100)
                    if r.status not in (RunStatus.SKIPPED, RunStatus.RUNNING)
                ),
                key=lambda r: r.started_at or "",
            )
            for name in ("alpha", "beta", "gamma")
        }
        last = ledger.last_runs()
        assert {k: (v.run_id, v.status) for k, v in last.items()} == {
            k: (r.run_id, r.status) for k, r in expected.items()
        }
        assert last["gamma"].outcome is Outcome.DONE
        while ledger.compact(NOW - timedelta(days=1, hours=1), ZONE, 100):
            pass
        assert [r.run_id for r in ledger.history("alpha")] == ["skip"]  # after the line
        assert ledger.last_runs() == last
