"""The fleet's ledger: claim + run row (one transaction: the unique claim, the cursor's
compare-and-set under a row lock, the run row and its lease) on PostgreSQL over a Unix socket,
against the same claims on SQLite (`Ledger`) in the same run. Then a lease renewal and a
lapsed-lease sweep, the two statements each daemon's heartbeat runs every 15 s. Then three
fleet daemons with 1,000 idle routines each on one database: CPU and RSS (psycopg loaded),
against one single-machine daemon with the same 1,000 routines in the same run.

The cluster is the tests' (tests/fleet/pgcluster.py): initdb + pg_ctl in a temporary directory
with fsync off, so the figure is PostgreSQL's protocol and locking cost, not a disk's; SQLite
runs with its usual synchronous=NORMAL in WAL.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.bench_supervisor import Home, _cpu_seconds, _far_day, _routine
from bench.common import Row, median_seconds
from routines.ledger import Ledger
from routines.ledger.api import LedgerAPI
from routines.ledger.postgres import PgLedger
from routines.runs import RunStatus, Trigger
from tests.fleet.pgcluster import Cluster, bindir

ROUTINES = 20
STEP = timedelta(minutes=5)


def _claims(ledger: LedgerAPI, count: int) -> list[float]:
    base = datetime(2025, 1, 1, tzinfo=UTC)
    times = []
    for i in range(count):
        now = base + i * STEP
        slot = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        t0 = time.perf_counter()
        ledger.claim(f"routine-{i % ROUTINES:02d}", slot, run_id=f"run-{i}",
                     trigger=Trigger.SCHEDULE, status=RunStatus.QUEUED, now=now)  # fmt: skip
        times.append(time.perf_counter() - t0)
    return times


def _p99(times: list[float]) -> float:
    return sorted(times)[int(len(times) * 0.99)]


def run(quick: bool) -> list[Row]:
    count = 2_000 if quick else 20_000
    where = bindir()
    if where is None:
        raise RuntimeError("no PostgreSQL server binaries (initdb): scripts/system-deps.sh")
    cluster = Cluster(where)
    cluster.start()
    try:
        dsn = cluster.dsn(cluster.create_database())
        with tempfile.TemporaryDirectory(prefix="vinos-bench-fleet-") as tmp:
            with Ledger(Path(tmp) / "ledger.db") as sqlite:
                base = _claims(sqlite, count)
            with PgLedger(dsn, "bench", lease_sec=3600) as pg:
                claims = _claims(pg, count)
                # Every claim above left a queued run with a lease (bench's). Another machine
                # holding two, as a daemon running max_concurrent = 2 does, renews them; the
                # sweep looks through all the leases for lapsed ones.
                with PgLedger(dsn, "other", lease_sec=3600) as other:
                    _claims(other, 2)
                    renew = median_seconds(other.renew, 50)
                sweep = median_seconds(lambda: pg.expire_leases(datetime.now(UTC)), 20)
        idle = _idle_fleet(cluster, 10.0 if quick else 60.0)
    finally:
        cluster.destroy()
    med, sq = statistics.median(claims), statistics.median(base)
    return [
        Row(
            name=f"fleet: claim + run row on PostgreSQL (Unix socket), median of {count:,}",
            value=med * 1000,
            unit="ms",
            baseline=f"SQLite Ledger.claim: {sq * 1000:.3f} ms",
            ratio=med / sq,
            target="<= 1 ms median",
            met=med <= 0.001,
        ),
        Row(
            name=f"fleet: claim + run row on PostgreSQL (Unix socket), p99 of {count:,}",
            value=_p99(claims) * 1000,
            unit="ms",
            baseline=f"SQLite Ledger.claim: {_p99(base) * 1000:.3f} ms",
            ratio=_p99(claims) / _p99(base),
        ),
        Row(
            name="fleet: heartbeat (machine row + its 2 leases renewed)",
            value=renew * 1000,
            unit="ms",
        ),
        Row(
            name=f"fleet: lapsed-lease sweep over {count:,} leases (none lapsed)",
            value=sweep * 1000,
            unit="ms",
        ),
        *idle,
    ]


def _idle_fleet(cluster: Cluster, window: float) -> list[Row]:
    """Three fleet daemons (machines a, b, c) and one single-machine daemon, 1,000 routines
    each, none due: CPU share over `window` and peak RSS."""
    import psutil

    dsn = cluster.dsn(cluster.create_database())
    day, month = _far_day()
    texts = [_routine(f"{i % 60} {(i // 60) % 24} {day} {month} *") for i in range(1000)]
    with tempfile.TemporaryDirectory(prefix="vinos-bench-fleet-") as tmp:
        root = Path(tmp)
        homes = {name: Home(root, name, root / "pycache") for name in ("alone", "a", "b", "c")}
        for name, home in homes.items():
            for i, text in enumerate(texts):
                home.write(f"r{i:04d}", text)
            if name != "alone":
                (home.routines / "config.toml").write_text(f'[fleet]\nmachine = "{name}"\n')
                home.env["VINOS_FLEET_DATABASE"] = dsn
        try:
            procs = {name: psutil.Process(home.start()) for name, home in homes.items()}
            time.sleep(3)  # past the start-up tick (each machine publishes 1,000 definitions)
            cpu0 = {name: _cpu_seconds(p) for name, p in procs.items()}
            peak = dict.fromkeys(procs, 0)
            t0 = time.monotonic()
            while time.monotonic() - t0 < window:
                for name, p in procs.items():
                    peak[name] = max(peak[name], p.memory_info().rss)
                time.sleep(min(1.0, window / 10))
            wall = time.monotonic() - t0
            cpu = {n: (_cpu_seconds(p) - cpu0[n]) / wall * 100 for n, p in procs.items()}
        finally:
            for home in homes.values():
                home.stop()
    fleet_cpu = max(cpu[n] for n in "abc")
    fleet_rss = max(peak[n] for n in "abc") / 1e6
    return [
        Row(
            f"fleet: idle CPU, the busiest of 3 daemons x 1,000 routines, {wall:.0f} s",
            fleet_cpu,
            "%",
            baseline=f"one SQLite daemon, 1,000 routines: {cpu['alone']:.3f} %",
            ratio=fleet_cpu / cpu["alone"] if cpu["alone"] > 0 else None,
            target="< 0.1 %",
            met=fleet_cpu < 0.1,
        ),
        Row(
            "fleet: idle RSS (psycopg loaded), the largest of 3 daemons x 1,000 routines",
            fleet_rss,
            "MB",
            baseline=f"one SQLite daemon, 1,000 routines: {peak['alone'] / 1e6:.1f} MB",
            ratio=fleet_rss / (peak["alone"] / 1e6),
            target="< 80 MB",
            met=fleet_rss < 80,
        ),
    ]
