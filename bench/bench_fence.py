"""The fleet's fencing and its database deadlines, each against a baseline from this run:

- Control-socket `ping` p99 while the fleet's database is hung (SIGSTOP of the postmaster and
  every backend, tests/fleet/pgcluster.py `hang`), against `ping` with the database healthy.
  Target: at most 1 s (the loop's calls wait at most supervisor/fleet/member.py LOOP_DEADLINE_SEC).
- Due → worker spawned p99 with three fleet daemons on one database (whoever ticks first
  claims; the delay is the run row's started_at minus the slot), against one single-machine
  daemon measured the same way. Target: under 250 ms.

Runs as an unprivileged user (the daemon and PostgreSQL refuse root).
"""

from __future__ import annotations

import os
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.bench_supervisor import Home, _routine
from bench.common import Row, debug_timings, p50_p99
from routines.ledger.postgres import PgLedger
from tests.fleet.pgcluster import Cluster, bindir

TARGET_PING_MS = 1000.0
TARGET_DUE_MS = 250.0


def _step_to_next_minute(clock: Path, offset: float) -> tuple[float, datetime]:
    """Move the shared clock to 1.2 s before the next minute; the new offset and the slot."""
    now = datetime.now(UTC) + timedelta(seconds=offset)
    slot = datetime.fromtimestamp((int(now.timestamp()) // 60 + 1) * 60, UTC)
    offset += (slot - now).total_seconds() - 1.2
    tmp = clock.with_suffix(".tmp")
    tmp.write_text(repr(offset))
    tmp.replace(clock)
    return offset, slot


def _delays(clock: Path, runs: int, started: Any) -> list[float]:
    """How late each of `runs` minutely slots started: `started(slot_id)` → its started_at
    once the run ended ok, None before."""
    out: list[float] = []
    offset = 0.0
    for i in range(runs):
        offset, slot = _step_to_next_minute(clock, offset)
        slot_id = slot.strftime("%Y-%m-%dT%H:%M:%SZ")
        deadline = time.monotonic() + 60
        while (at := started(slot_id)) is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"run {i} for slot {slot_id} did not finish")
            time.sleep(0.02)
        out.append((datetime.fromisoformat(at.replace("Z", "+00:00")) - slot).total_seconds())
    return out


def _single(root: Path, pycache: Path, runs: int) -> list[float]:
    from routines.ledger import Ledger

    home = Home(root, "alone", pycache)
    home.write("tick", _routine("* * * * *"))
    home.start(
        VINOS_DEBUG_TIMINGS=debug_timings(clock_offset_file=home.clock_file, tick_max_sec=0.5)
    )
    try:
        with Ledger(home.routines / "state" / "ledger.db") as ledger:

            def started(slot: str) -> str | None:
                row = ledger._db.execute(
                    "SELECT status, started_at FROM runs WHERE routine = 'tick' AND slot = ?",
                    (slot,),
                ).fetchone()
                if row is None or row["status"] in ("queued", "running"):
                    return None
                return str(row["started_at"])

            return _delays(home.clock_file, runs, started)
    finally:
        home.stop()


def _fleet(root: Path, pycache: Path, dsn: str, count: int) -> tuple[list[Home], Path]:
    clock = root / "fleet-clock"
    clock.write_text("0")
    homes = []
    for i in range(count):
        home = Home(root, f"m{i}", pycache)
        (home.routines / "config.toml").write_text(f'[fleet]\nmachine = "m{i}"\n')
        home.write("tick", _routine("* * * * *"))
        home.start(
            VINOS_DEBUG_TIMINGS=debug_timings(
                clock_offset_file=clock, tick_max_sec=0.5, housekeeping_delay_sec=3600
            ),
            VINOS_FLEET_DATABASE=dsn,
        )
        homes.append(home)
    return homes, clock


def _pings(home: Home, seconds: float) -> list[float]:
    from supervisor.cli.client import connect

    out = []
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        t0 = time.perf_counter()
        with connect(home.socket, timeout=30) as c:
            c.request("ping")
        out.append(time.perf_counter() - t0)
        time.sleep(0.02)
    return out


def run(quick: bool) -> list[Row]:
    if os.geteuid() == 0:
        raise RuntimeError("the daemon refuses root: run the benchmark as an unprivileged user")
    where = bindir()
    if where is None:
        raise RuntimeError("no PostgreSQL server binaries (initdb): scripts/system-deps.sh")
    runs = 8 if quick else 30
    window = 6.0 if quick else 20.0
    cluster = Cluster(where)
    cluster.start()
    homes: list[Home] = []
    try:
        dsn = cluster.dsn(cluster.create_database())
        PgLedger(dsn, "bench").close()  # the schema, before three daemons race to make it
        with tempfile.TemporaryDirectory(prefix="vinos-bench-fence-") as tmp:
            root = Path(tmp)
            pycache = root / "pycache"
            alone = _single(root, pycache, runs)
            homes, clock = _fleet(root, pycache, dsn, 3)
            with PgLedger(dsn, "observer") as observer:

                def started(slot: str) -> str | None:
                    rows = observer._read(
                        "SELECT status, started_at FROM runs WHERE routine = 'tick' AND slot = %s",
                        (slot,),
                    )
                    if not rows or rows[0]["status"] in ("queued", "running"):
                        return None
                    return str(rows[0]["started_at"])

                fleet = _delays(clock, runs, started)
            healthy = _pings(homes[0], window / 2)
            pids = cluster.hang()
            try:
                hung = _pings(homes[0], window)
            finally:
                cluster.unhang(pids)
    finally:
        for h in homes:
            h.stop()
        cluster.destroy()
    a50, a99 = p50_p99([d * 1000 for d in alone])
    f50, f99 = p50_p99([d * 1000 for d in fleet])
    _, h99 = p50_p99([p * 1000 for p in healthy])
    g50, g99 = p50_p99([p * 1000 for p in hung])
    return [
        Row(
            f"fleet: ping p99 while the database is hung ({len(hung)} pings, p50 {g50:.1f} ms)",
            g99,
            "ms",
            baseline=f"database healthy: {h99:.1f} ms",
            ratio=g99 / h99 if h99 > 0 else None,
            target=f"<= {TARGET_PING_MS:.0f} ms",
            met=g99 <= TARGET_PING_MS,
        ),
        Row(
            f"fleet: due → spawned p99, 3 daemons ({runs} runs, p50 {f50:.1f} ms)",
            f99,
            "ms",
            baseline=f"one machine: p99 {a99:.1f} ms (p50 {a50:.1f})",
            ratio=f99 / a99 if a99 > 0 else None,
            target=f"< {TARGET_DUE_MS:.0f} ms",
            met=f99 < TARGET_DUE_MS,
        ),
    ]
