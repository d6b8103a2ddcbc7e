"""The fleet's ledger: claim + run row (one transaction: the unique claim, the cursor's
compare-and-set under a row lock, the run row and its lease) on PostgreSQL over a Unix socket,
against the same claims on SQLite (`Ledger`) in the same run. Then a lease renewal and a
lapsed-lease sweep, the two statements each daemon's heartbeat runs every 15 s.

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

from bench.common import Row, median_seconds
from routines.ledger import Ledger
from routines.ledgerapi import LedgerAPI
from routines.pgledger import PgLedger
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
            target="< 5 ms median",
            met=med < 0.005,
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
    ]
