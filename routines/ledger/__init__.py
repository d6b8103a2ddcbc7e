"""The ledger: every run, claim, routine state and compacted day, in one of three stores
that keep one contract (`api.py`; tests/fleet/test_ledger_contract.py runs it on all three):

- `sqlite.py`: `Ledger`, one SQLite file per machine (the default);
- `postgres.py`: `PgLedger`, a fleet's PostgreSQL database (psycopg is imported only there,
  so only a fleet pays for it: import it by its module, never from here);
- `memory.py`: `MemoryLedger`, the in-memory reference store.

The two databases are one class, `sqlstore.py`'s `SqlLedger`: the same plain tables, the same
queries (`sql.py`, over a `Dialect`) and the same rules (`shared.py`, which the memory store
follows too); each keeps its own named migration steps (`migrate_*.py`).

This package imports nothing of routines but the run vocabulary (routines/runs.py) and
safetext's redaction (an import-linter contract in pyproject.toml holds it); the config it
needs comes in as a protocol (`api.FleetAddress`).
"""

from routines.ledger.migrate_sqlite import LEDGER_VERSION
from routines.ledger.model import (
    ANY,
    ActiveRun,
    LastRun,
    LedgerError,
    LedgerUnavailable,
    MachineInUse,
    RoutineState,
    RunRow,
    Unavailable,
    day_bounds,
    is_enabled,
    last_run_row,
    run_row,
    state_row,
)
from routines.ledger.rundays import DaySummary
from routines.ledger.shared import from_iso, iso
from routines.ledger.sqlite import Ledger

__all__ = [
    "ANY",
    "LEDGER_VERSION",
    "ActiveRun",
    "DaySummary",
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
