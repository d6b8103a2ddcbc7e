"""The ledger over a year: three every-minute routines, 1.6M run rows written by SQL straight into
the ledger's plain tables (the API would take an hour), against a fresh ledger (the same
routines, one day of runs) in the same run; and a year of one hourly agent routine.

- The unpacking of schema 6 (step 9), timed on the whole packed year (1,576,800 runs) made by
  SQL and schema 6's own statements; the year written by the SQL below (the plain year file
  the rest of the bench uses, not a second copy) must read back row for row, compared in
  SQLite, as the unpacking made it.
- `list`, `status` and `history NAME` as a person runs them (the real CLI, a process each),
  on the year before compaction and after it, each against the fresh ledger (target <= 1.2x).
- Compaction: the daemon's paced loop for a while (its CPU share while catching up), then
  throughput (runs folded per second, unpaced), and one day's new runs in steady state.
- The file before, and after compaction + incremental vacuum with the default retention
  (90 days, keep_runs_max 30,000; target <= 60 MB), and where its bytes are.
- A year of an hourly agent routine (tokens, models, tools) after the same: target <= 5 MB.

VINOS_BENCH_QUICK: 40 days instead of 365, 10 days kept instead of 90.
VINOS_BENCH_UNPACK_DAYS: the days of the packed file the unpacking is timed on (the year's
days: 365, or 40 quick).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.common import Row
from routines.ledger import Ledger, iso, migrate_packed6
from routines.ledger import migrate_sqlite as ledger_module
from routines.ledger.model import RUN_COLUMNS
from routines.spec.config import LedgerSettings
from supervisor.engine import housekeeping
from supervisor.engine.clock import FakeClock

ROUTINES = ("minute-a", "minute-b", "minute-c")
ROUTINE = """[routine]
kind = "command"
description = "every minute"
[schedule]
cron = "* * * * *"
timezone = "UTC"
[command]
run = "date"
"""
NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
OUTCOME = "nothing-to-do"
SUMMARY = "checked the queue: nothing new since the last run"
FAILED = "the command exited with code 1"
TOOLS = '["run_shell"]'
OUT_DIR = "/home/user/.vinos/routines/state/"


def v5_ledger(path: Path) -> sqlite3.Connection:
    """An empty ledger of schema 5 (the layout before the compact one), as the program made
    it: its migrations 1 to 5, in a file with auto_vacuum = INCREMENTAL."""
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


def _fill_v5(path: Path, minutes: int) -> int:
    """`minutes` minutes of runs of each routine up to NOW in a schema-5 ledger, by SQL."""
    db = v5_ledger(path)
    total = _insert(db, minutes)
    db.close()
    return total


def _insert(db: sqlite3.Connection, minutes: int) -> int:
    """`minutes` minutes of runs of each routine up to NOW, by SQL on plain runs and claims:
    rows shaped like the ones the daemon writes (run id, slot, summary, output path, tools,
    tokens, dollars), and 45 days of claims."""
    db.execute("PRAGMA synchronous=OFF")
    start = int((NOW - timedelta(minutes=minutes)).timestamp())
    db.execute("BEGIN")
    for n, routine in enumerate(ROUTINES):
        db.execute(
            f"""
            WITH RECURSIVE m(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM m WHERE i < {minutes - 1}),
            t(i, ts, status) AS (
                SELECT i, {start} + i * 60 + {n},
                       CASE WHEN i % 97 = 0 THEN 'failed' WHEN i % 211 = 0 THEN 'timeout'
                            ELSE 'ok' END FROM m)
            INSERT INTO runs (run_id, routine, slot, trigger, status, outcome, detail,
                started_at, finished_at, duration_sec, route, model, escalated,
                escalated_reason, input_tokens, output_tokens, local_input_tokens,
                local_output_tokens, tool_calls, tools_used, dollars, output_file, owner_pid,
                owner_started, worker_pid)
            SELECT strftime('%Y%m%dT%H%M%S', ts, 'unixepoch') || '-{routine}-'
                       || printf('%06x', i * 7919 % 16777216),
                   '{routine}', strftime('%Y-%m-%dT%H:%M:00Z', ts, 'unixepoch'), 'schedule',
                   status, CASE WHEN status = 'ok' THEN '{OUTCOME}' END,
                   CASE WHEN status = 'ok' THEN '{SUMMARY}' ELSE '{FAILED}' END,
                   strftime('%Y-%m-%dT%H:%M:%S.000000Z', ts, 'unixepoch'),
                   strftime('%Y-%m-%dT%H:%M:%S.000000Z', ts + 2, 'unixepoch'),
                   1.5 + (i % 10) / 10.0, 'command', NULL, 0, '', 0, 0, 0, 0, 1,
                   '{TOOLS}', 0.0,
                   CASE WHEN status = 'ok' THEN '{OUT_DIR}{routine}/'
                        || strftime('%Y-%m-%d-%H%M', ts, 'unixepoch') || '.md' END,
                   4242, 1764000000.25, 5000 + i % 30000
            FROM t
            """
        )
        db.execute(
            "INSERT INTO routine_state (routine, cursor, last_run_id, last_status, "
            "last_started, last_finished) SELECT routine, slot, run_id, status, started_at, "
            "finished_at FROM runs WHERE routine = ? ORDER BY started_at DESC LIMIT 1",
            (routine,),
        )
    # The run fence keeps 45 days of claims.
    db.execute(
        "INSERT INTO claims (routine, slot, claimed_at, run_id) SELECT routine, slot, "
        "started_at, run_id FROM runs WHERE started_at >= ?",
        (iso(NOW - timedelta(days=45)),),
    )
    db.execute("COMMIT")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    total: int = db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    return total


def _pack(path: Path) -> None:
    """The schema-5 file at `path` as schemas 6 to 8 left it (their own statements)."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("BEGIN")
    for statement in migrate_packed6.MIGRATION:
        db.execute(statement)
    for statement in ledger_module.STEPS[7][1]:
        db.execute(statement)
    db.execute("ALTER TABLE run_log ADD COLUMN parent_run_id TEXT")
    for statement in migrate_packed6.views(("parent_run_id",)):
        db.execute(statement)
    db.execute("PRAGMA user_version = 8")
    db.execute("COMMIT")
    db.close()


def _fill(path: Path, minutes: int) -> int:
    """The same rows as `_fill_v5`, in a ledger of the current schema, with the claims the
    daemon's daily prune_claims leaves (45 days, at most keep_runs_max a routine)."""
    Ledger(path).close()  # the schema, as the program creates it
    db = sqlite3.connect(path, isolation_level=None)
    total = _insert(db, minutes)
    db.close()
    with Ledger(path) as ledger:
        ledger.prune_claims(NOW, LedgerSettings().keep_runs_max)
    return total


def _home(root: Path, name: str) -> dict[str, str]:
    home = root / name
    (home / "routines" / "state").mkdir(parents=True)
    for routine in ROUTINES:
        (home / "routines" / f"{routine}.toml").write_text(ROUTINE)
    (root / f"{name}-run").mkdir(mode=0o700)
    return {
        **os.environ,
        "VINOS_HOME": str(home),
        "VINOS_SYSTEM_DIR": str(root / "no-system"),
        "XDG_RUNTIME_DIR": str(root / f"{name}-run"),
        "TZ": "UTC",
    }


def _cli(env: dict[str, str], args: list[str], repeat: int) -> float:
    argv = [sys.executable, "-m", "supervisor", *args]
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(
            argv, check=False, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _commands(fresh: dict[str, str], year: dict[str, str], repeat: int, when: str) -> list[Row]:
    rows = []
    for args in (["list"], ["status"], ["status", "--waybar"], ["history", "minute-b"]):
        # Interleaved, so load on the machine hits both alike.
        f, y = [], []
        for _ in range(repeat):
            f.append(_cli(fresh, args, 1))
            y.append(_cli(year, args, 1))
        fm, ym = statistics.median(f), statistics.median(y)
        rows.append(
            Row(
                name=f"ledger year: `{' '.join(args)}`, {when}",
                value=ym * 1000,
                unit="ms",
                baseline=f"fresh ledger (1 day): {fm * 1000:.0f} ms",
                ratio=ym / fm,
                target="<= 1.2x",
                met=ym / fm <= 1.2,
            )
        )
    return rows


def _parts(db: sqlite3.Connection) -> dict[str, float]:
    """Where the bytes are (the dbstat table, when SQLite has it)."""
    groups = {
        "whole runs (runs and its indexes)": "name LIKE 'runs%'",
        "claims (the run fence)": "name LIKE '%claims%'",
        "compacted days": "name LIKE '%run_days%'",
    }
    try:
        return {
            part: db.execute(f"SELECT SUM(pgsize) FROM dbstat WHERE {where}").fetchone()[0]
            / (1024 * 1024)
            for part, where in groups.items()
        }
    except sqlite3.OperationalError:
        return {}


def _per_run(db: sqlite3.Connection) -> dict[str, float]:
    """Bytes per run of each table and index (dbstat), after a VACUUM."""
    db.execute("VACUUM")
    runs: int = db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    return {
        name: size / runs
        for name, size in db.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name")
        if size > 16384
    }


_COMPARED = tuple(c for c in RUN_COLUMNS if c not in ("owner_pid", "owner_started", "worker_pid"))


def _same_runs(unpacked: Path, direct: Path) -> bool:
    """Whether two ledgers hold the same runs (but their ids, and the owners schema 6 forgot
    once a run ended), compared in SQLite: a year's 1.6M rows never come into Python."""
    db = sqlite3.connect(unpacked)
    try:
        db.execute("ATTACH DATABASE ? AS direct", (f"{direct.resolve().as_uri()}?mode=ro",))
        cols = ", ".join(_COMPARED)
        counts = db.execute(
            "SELECT (SELECT COUNT(*) FROM main.runs), (SELECT COUNT(*) FROM direct.runs)"
        ).fetchone()
        differ = db.execute(
            f"SELECT EXISTS (SELECT {cols} FROM main.runs EXCEPT SELECT {cols} FROM direct.runs)"
            f" OR EXISTS (SELECT {cols} FROM direct.runs EXCEPT SELECT {cols} FROM main.runs)"
        ).fetchone()[0]
        return bool(counts[0] == counts[1] and not differ)
    finally:
        db.close()


def _migration(root: Path, days: int, year: tuple[Path, int, int]) -> list[Row]:
    """Step 9 on a packed file of `days` days: its time, and the bytes a run takes before
    (packed) and after (plain). `year` is the plain year file the bench made, its days and
    its runs: when `days` are the year's, the unpacked rows are compared with it (the same
    SQL made both) instead of with a second copy."""
    year_db, year_days, year_runs = year
    path = root / "packed" / "ledger.db"
    runs = _fill_v5(path, days * 24 * 60)
    _pack(path)
    db = sqlite3.connect(path, isolation_level=None)
    try:
        before = _per_run(db)
    except sqlite3.OperationalError:  # no dbstat in this SQLite
        before = {}
    db.close()
    t0 = time.perf_counter()
    Ledger(path).close()
    spent = time.perf_counter() - t0
    db = sqlite3.connect(path, isolation_level=None)
    after = _per_run(db) if before else {}
    db.close()
    # The year is written straight into the plain tables: what the unpacking makes.
    direct = year_db
    if days != year_days:
        direct = root / "plain" / "ledger.db"
        _fill(direct, days * 24 * 60)
    if not _same_runs(path, direct):
        raise AssertionError("bench_ledger_year: _fill's rows differ from the unpacking's")
    whole = days == year_days
    rows = [
        Row(
            name=f"ledger year: unpacking schema 8 (step 9), {runs:,} runs ({days} days)",
            value=spent,
            unit="s",
            baseline=f"{spent / runs * 1e6:.0f} us a run, once, with progress on stderr"
            + ("" if whole else f"; a year's {year_runs:,}: ~{spent / runs * year_runs:.0f} s"),
            target="<= 40 s" if whole else "",
            met=spent <= 40 if whole else None,
        )
    ]
    for label, parts in (("packed (schema 8)", before), ("plain (schema 9)", after)):
        if parts:
            detail = ", ".join(
                f"{k} {v:.0f}" for k, v in sorted(parts.items(), key=lambda x: -x[1])
            )
            rows.append(
                Row(
                    name=f"ledger year: bytes a run, {label} (claims 1:1 here)",
                    value=sum(parts.values()),
                    unit="B",
                    baseline=detail,
                )
            )
    return rows


def _agent_year(root: Path, keep: int) -> Row:
    """A year of one hourly agent routine (tokens, a model, tools, a summary) by SQL, then
    compacted and vacuumed as the daemon does with `keep` days kept."""
    path = root / "agent" / "ledger.db"
    Ledger(path).close()
    db = sqlite3.connect(path, isolation_level=None)
    hours = 365 * 24
    start = int((NOW - timedelta(hours=hours)).timestamp())
    db.execute(
        f"""WITH RECURSIVE m(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM m WHERE i < {hours - 1})
        INSERT INTO runs (run_id, routine, slot, trigger, status, outcome, detail, started_at,
            finished_at, duration_sec, route, model, escalated, input_tokens, output_tokens,
            local_input_tokens, local_output_tokens, tool_calls, tools_used, dollars,
            output_file)
        SELECT strftime('%Y%m%dT%H%M%S', {start} + i * 3600, 'unixepoch') || '-inbox-'
                   || printf('%06x', i * 7919 % 16777216), 'inbox',
               strftime('%Y-%m-%dT%H:00:00Z', {start} + i * 3600, 'unixepoch'), 'schedule',
               'ok', CASE WHEN i % 5 = 0 THEN 'needs-attention' ELSE 'done' END,
               'triaged ' || (i % 17) || ' new mails: ' || (i % 3) || ' need a reply today',
               strftime('%Y-%m-%dT%H:%M:05.000000Z', {start} + i * 3600, 'unixepoch'),
               strftime('%Y-%m-%dT%H:%M:48.000000Z', {start} + i * 3600, 'unixepoch'),
               43.0, 'cloud', 'claude-sonnet-4-5', 0, 9000 + i % 4000, 700 + i % 300, 0, 0,
               6, '["read_files","run_shell","write_output"]', 0.0412,
               '/home/user/.vinos/routines/state/inbox/'
                   || strftime('%Y-%m-%d-%H%M', {start} + i * 3600, 'unixepoch') || '.md'
        FROM m"""
    )
    db.close()
    settings = LedgerSettings(keep_runs_days=keep, keep_outputs_days=keep)
    with Ledger(path) as ledger:
        keeper = housekeeping.Housekeeper(ledger, str(path.parent), settings, FakeClock(NOW))
        while keeper.step().more:
            pass
        ledger._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        whole = ledger._db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    size = _size(path)
    return Row(
        name=f"ledger year: an hourly agent routine ({hours:,} runs), {keep} days kept",
        value=size,
        unit="MB",
        baseline=f"{whole:,} whole runs, the rest in day rows",
        target="<= 5 MB",
        met=size <= 5,
    )


def _size(path: Path) -> float:
    return sum(
        p.stat().st_size for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")) if p.exists()
    ) / (1024 * 1024)


def run(quick: bool) -> list[Row]:
    days, keep = (40, 10) if quick else (365, 90)
    repeat = 5
    window = 5.0 if quick else 15.0
    out: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="vinos-bench-year-") as tmp:
        root = Path(tmp)
        fresh, year = _home(root, "fresh"), _home(root, "year")
        fresh_db = Path(fresh["VINOS_HOME"]) / "routines" / "state" / "ledger.db"
        year_db = Path(year["VINOS_HOME"]) / "routines" / "state" / "ledger.db"
        _fill(fresh_db, 24 * 60)
        t0 = time.perf_counter()
        total = _fill(year_db, days * 24 * 60)
        made = time.perf_counter() - t0
        raw = _size(year_db)
        out.append(
            Row(
                name=f"ledger year: file with {total:,} runs ({days} days), before compaction",
                value=raw,
                unit="MB",
                baseline=f"{raw * 1024 * 1024 / total:.0f} bytes a run; generated in {made:.0f} s",
            )
        )
        unpack_days = int(os.environ.get("VINOS_BENCH_UNPACK_DAYS", str(days)))
        out.extend(_migration(root, unpack_days, (year_db, days, total)))
        out.append(_agent_year(root, keep))
        out.extend(_commands(fresh, year, repeat, f"{total / 1e6:.1f}M rows, not compacted"))

        settings = LedgerSettings(keep_runs_days=keep, keep_outputs_days=keep)
        with Ledger(year_db) as ledger:
            keeper = housekeeping.Housekeeper(ledger, str(year_db.parent), settings, FakeClock(NOW))
            # The daemon's own paced loop for a while: its CPU share while it catches up.
            housekeeping.START_DELAY_SEC = 0.0
            before = ledger._db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
            c0, w0 = time.process_time(), time.perf_counter()

            async def paced() -> None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(keeper.run(), window)

            asyncio.run(paced())
            cpu, wall = time.process_time() - c0, time.perf_counter() - w0
            paced_rows = before - ledger._db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
            out.append(
                Row(
                    name=f"ledger year: compaction CPU share while catching up ({wall:.0f} s)",
                    value=cpu / wall * 100,
                    unit="%",
                    baseline=f"{paced_rows:,} runs folded meanwhile",
                    target=f"<= {housekeeping.CATCH_UP_CPU_SHARE * 100:.0f}% of one CPU",
                    met=cpu / wall <= housekeeping.CATCH_UP_CPU_SHARE * 1.5,
                )
            )
            # Then flat out: throughput.
            compacted, c0, w0 = 0, time.process_time(), time.perf_counter()
            while True:
                step = keeper.step()
                compacted += step.compacted
                if not step.more:
                    break
            cpu, wall = time.process_time() - c0, time.perf_counter() - w0
            out.append(
                Row(
                    name=f"ledger year: compaction + vacuum throughput ({compacted:,} runs)",
                    value=compacted / wall,
                    unit="runs/s",
                    baseline=f"{compacted / max(cpu, 1e-9):,.0f} runs per CPU second",
                )
            )
            ledger._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            # Steady state: a day later, that day's runs (3 x 1,440) in one pass.
            keeper = housekeeping.Housekeeper(
                ledger, str(year_db.parent), settings, FakeClock(NOW + timedelta(days=1))
            )
            c0 = time.process_time()
            while keeper.step().more:
                pass
            day_cpu = time.process_time() - c0
            out.append(
                Row(
                    name="ledger year: compaction of one day's runs, steady state",
                    value=day_cpu * 1000,
                    unit="ms CPU",
                    baseline=f"{day_cpu / 86400 * 100:.5f}% of a CPU over the day",
                    target="< 0.1% idle CPU",
                    met=day_cpu / 86400 < 0.001,
                )
            )
            ledger._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            whole = ledger._db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
            day_rows = ledger._db.execute("SELECT COUNT(*) FROM run_days").fetchone()[0]
            parts = _parts(ledger._db)
        size = _size(year_db)
        out.append(
            Row(
                name=f"ledger year: file after compaction + vacuum, {keep} days kept",
                value=size,
                unit="MB",
                baseline=f"{raw:.0f} MB before; {whole:,} whole runs + {day_rows:,} day rows",
                ratio=size / raw,
                target="<= 60 MB" if not quick else "",
                met=size <= 60 if not quick else None,
            )
        )
        for part, mb in parts.items():
            out.append(Row(name=f"ledger year: of which {part}", value=mb, unit="MB"))
        out.extend(_commands(fresh, year, repeat, f"compacted to {keep} days"))
    return out
