"""A thousand routines due in the same minute, with max_concurrent = 4: how late the first four
start. The daemon claims in batches that yield to its loop (supervisor/engine/scheduler.py `due`'s
limit), so the first runs start while the rest are still being claimed; claiming all 1,000
first held the loop for about 10 s.

Measured: the slot → the 4th worker spawned (the ledger's started_at of the four earliest
runs, set when each worker process was spawned), against a baseline from the same run: a
daemon with the same 1,000 routine files of which one is due. Target: under 250 ms.

Runs as an unprivileged user (the daemon refuses root): `make bench` arranges that.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.bench_supervisor import Home, _routine
from bench.common import Row, debug_timings

ROUTINES = 1000
FIRST = 4
TARGET_MS = 250.0


def _first_starts(home: Home, due: int) -> float:
    """Seconds from the slot to the FIRST-th worker spawned, with `due` of ROUTINES due."""
    for i in range(ROUTINES):
        cron = "* * * * *" if i < due else "0 6 1 1 *"
        home.write(f"r{i:04d}", _routine(cron))
    (home.routines / "config.toml").write_text(f"max_concurrent = {FIRST}\n")
    home.start(
        VINOS_DEBUG_TIMINGS=debug_timings(clock_offset_file=home.clock_file, tick_max_sec=0.5)
    )
    ledger_path = Path(home.env["VINOS_HOME"]) / "routines" / "state" / "ledger.db"
    now = datetime.now(UTC)
    slot = datetime.fromtimestamp((int(now.timestamp()) // 60 + 1) * 60, UTC)
    offset = (slot - now).total_seconds() - 1.2  # the slot comes due in 1.2 s
    tmp = home.clock_file.with_suffix(".tmp")
    tmp.write_text(repr(offset))
    tmp.replace(home.clock_file)
    slot_id = slot.strftime("%Y-%m-%dT%H:%M:%SZ")
    want = min(FIRST, due)
    deadline = time.monotonic() + 120
    db = sqlite3.connect(f"{ledger_path.as_uri()}?mode=ro", uri=True, timeout=10)
    try:
        while True:
            rows = db.execute(
                "SELECT started_at FROM runs WHERE slot = ? AND status NOT IN ('queued') "
                "AND started_at IS NOT NULL ORDER BY started_at LIMIT ?",
                (slot_id, want),
            ).fetchall()
            if len(rows) == want:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{want} runs of slot {slot_id} did not start in 120 s")
            time.sleep(0.05)
    finally:
        db.close()
    last = datetime.fromisoformat(rows[-1][0].replace("Z", "+00:00"))
    return (last - slot).total_seconds()


def run(quick: bool) -> list[Row]:
    if os.geteuid() == 0:
        raise RuntimeError("the daemon refuses root: run the benchmark as an unprivileged user")
    with tempfile.TemporaryDirectory(prefix="vinos-bench-flood-") as tmp:
        root = Path(tmp)
        pycache = root / "pycache"
        figures = {}
        for name, due in (("one", 1), ("all", ROUTINES)):
            home = Home(root, name, pycache)
            try:
                figures[name] = _first_starts(home, due) * 1000
            finally:
                home.stop()
    base, flood = figures["one"], figures["all"]
    return [
        Row(
            f"{ROUTINES} due at once, max_concurrent {FIRST}: slot → {FIRST}th worker spawned",
            flood,
            "ms",
            baseline=f"1 of {ROUTINES} due: {base:.1f} ms",
            ratio=flood / base if base > 0 else None,
            target=f"< {TARGET_MS:.0f} ms",
            met=flood < TARGET_MS,
        )
    ]
