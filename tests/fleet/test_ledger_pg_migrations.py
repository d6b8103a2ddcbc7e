"""The fleet database's named migration steps (routines/ledger/migrate_postgres.py) on a real
PostgreSQL cluster: a database from before named steps upgrades in place, a new one records
every step, one with a step this version lacks is refused."""

from __future__ import annotations

import psycopg
import pytest

from routines.ledger import LedgerError
from routines.ledger.migrate_postgres import PG_LEDGER_VERSION, STEPS
from routines.ledger.postgres import PgLedger
from tests.fleet.pgcluster import Cluster


def names(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        return [r[0] for r in conn.execute("SELECT name FROM ledger_migrations ORDER BY name")]


def meta_version(dsn: str) -> str:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT value FROM ledger_meta WHERE key = 'version'").fetchone()
        assert row is not None
        return str(row[0])


def test_a_new_fleet_database_records_every_step_by_name(pg_dsn: str) -> None:
    assert names(pg_dsn) == sorted(s.name for s in STEPS)
    assert meta_version(pg_dsn) == str(PG_LEDGER_VERSION)


@pytest.mark.parametrize("number", [1, 4, 5])
def test_a_numbered_fleet_database_upgrades_in_place_and_runs_no_step_twice(
    pg_cluster: Cluster, number: int
) -> None:
    """A database from before named steps: the steps up to its number (ledger_meta 'version'),
    no ledger_migrations. Only the later steps run (an ALTER TABLE run twice would fail)."""
    dsn = pg_cluster.dsn(pg_cluster.create_database())
    with psycopg.connect(dsn) as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        cur.execute("CREATE TABLE ledger_meta (key TEXT PRIMARY KEY, value TEXT)")
        for step in STEPS:
            if 0 < step.legacy <= number:  # the named era's steps (legacy 0) came after
                step.apply(cur)
        cur.execute("INSERT INTO ledger_meta VALUES ('version', %s)", (str(number),))
        cur.execute(
            "INSERT INTO runs (run_id, routine, machine, status, started_at, dollars) "
            "VALUES ('r0', 'brief', 'a', 'ok', '2026-12-01T07:00:00.000000Z', 0.5)"
        )
    with PgLedger(dsn, "a") as led:
        [row] = led.history("brief")
        assert (row.run_id, row.status, row.dollars, row.tried_model) == ("r0", "ok", 0.5, None)
    assert names(dsn) == sorted(s.name for s in STEPS)
    assert meta_version(dsn) == str(PG_LEDGER_VERSION)


def test_a_fleet_database_with_a_step_this_version_lacks_is_refused(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn) as conn:
        conn.execute("INSERT INTO ledger_migrations VALUES ('m099_from_the_future', 'then')")
    with pytest.raises(LedgerError, match="steps m099_from_the_future unknown to this one"):
        PgLedger(pg_dsn, "a").run("r0")
