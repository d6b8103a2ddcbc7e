"""Fixtures for the fleet: one real PostgreSQL cluster per session, a fresh database per test
(cloned from a template that already has the schema)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from routines.ledger.postgres import PgLedger
from tests.fleet.fleetkit import RUNTIMES
from tests.fleet.pgcluster import Cluster, bindir
from tests.supervisor.daemonkit import reap_daemons


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    if os.geteuid() == 0:
        pytest.fail("the fleet tests start PostgreSQL, which refuses root: scripts/dev-pytest.sh")
    where = bindir()
    if where is None:
        pytest.fail("no PostgreSQL server binaries (initdb): run scripts/system-deps.sh as root")
    cluster = Cluster(where)
    cluster.start()
    try:
        template = cluster.create_database()
        PgLedger(cluster.dsn(template), "template").close()  # the schema, once
        cluster.template = template  # type: ignore[attr-defined]
        yield cluster
    finally:
        cluster.destroy()


@pytest.fixture(autouse=True)
def machine_runtime_dirs() -> Iterator[None]:
    """The machines' short runtime dirs under /tmp go with their test."""
    yield
    reap_daemons()  # first: their sockets live there
    while RUNTIMES:
        shutil.rmtree(RUNTIMES.pop(), ignore_errors=True)


@pytest.fixture
def pg_dsn(pg_cluster: Cluster) -> str:
    """A fresh database with the fleet schema."""
    return pg_cluster.dsn(pg_cluster.create_database(template=pg_cluster.template))  # type: ignore[attr-defined]
