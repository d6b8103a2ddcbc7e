"""The ledger: every run, claim, routine state and compacted day, in one of three stores
that keep one contract (`api.py`; tests/fleet/test_ledger_contract.py runs it on all three):

- `sqlite.py`: `Ledger`, one SQLite file per machine (the default);
- `postgres.py`: `PgLedger`, a fleet's PostgreSQL database (psycopg is imported only there,
  so only a fleet pays for it: import it by its module, never from here);
- `memory.py`: `MemoryLedger`, the in-memory reference store.

Both databases hold the same plain tables and run the same query texts (`sql.py`,
`shared.py`); each keeps its own forward migrations (`migrate_*.py`).

This package imports nothing of routines but the run vocabulary (routines/runs.py), the
paths and config `open_ledger` reads, and safetext's redaction (an import-linter contract in
pyproject.toml holds it).
"""

from routines.ledger.faults import LedgerError, LedgerUnavailable, Unavailable
from routines.ledger.sqlite import (
    ANY,
    LEDGER_VERSION,
    ActiveRun,
    DaySummary,
    LastRun,
    Ledger,
    RoutineState,
    RunRow,
    day_bounds,
    from_iso,
    is_enabled,
    iso,
    last_run_row,
    run_row,
    state_row,
)

__all__ = [
    "ANY",
    "LEDGER_VERSION",
    "ActiveRun",
    "DaySummary",
    "LastRun",
    "Ledger",
    "LedgerError",
    "LedgerUnavailable",
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
