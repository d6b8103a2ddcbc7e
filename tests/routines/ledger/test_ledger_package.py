"""What routines/ledger/__init__.py exports, and what importing it costs: the names other
packages import from `routines.ledger`, and no psycopg unless a fleet's store is asked for
(its module is imported by name, only for a fleet: routines/ledger/api.py `open_ledger`)."""

from __future__ import annotations

import subprocess
import sys

import routines.ledger


def test_the_package_exports_the_names_the_rest_of_the_tree_uses() -> None:
    assert sorted(routines.ledger.__all__) == [
        "ANY",
        "ActiveRun",
        "DaySummary",
        "LEDGER_VERSION",
        "LastRun",
        "Ledger",
        "LedgerError",
        "LedgerUnavailable",
        "MachineInUse",
        "RoutineState",
        "RunRow",
        "Unavailable",
        "day_bounds",
        "from_iso",
        "is_enabled",
        "iso",
        "last_run_row",
        "run_row",
        "state_row",
    ]
    for name in routines.ledger.__all__:
        assert getattr(routines.ledger, name) is not None


def test_importing_the_ledger_imports_no_psycopg_until_a_fleet_store_is() -> None:
    probe = (
        "import sys, routines.ledger, routines.ledger.api; "
        "print('psycopg' in sys.modules); "
        "import routines.ledger.postgres; print('psycopg' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["False", "True"]
