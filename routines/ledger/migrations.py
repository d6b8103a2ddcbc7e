"""Named migration steps, as the `llm` project keeps them: each step a function with a name
that never changes, and a plain table of the names a ledger has applied (`ledger_migrations`:
name, applied_at). Both databases keep their steps so (routines/ledger/migrate_sqlite.py,
migrate_postgres.py); the decisions here are pure.

Before named steps, a ledger kept one schema number (SQLite's PRAGMA user_version 1 to 11,
PostgreSQL's ledger_meta 'version' 1 to 5). Each step names the number it came with
(`legacy`), so such a ledger upgrades in place: the steps up to its number count as applied
(tests/routines/ledger/test_ledger_migrations.py). Ledgers with named steps carry one number
more than the last legacy one, so a release from before refuses them as newer, untouched.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from routines.ledger.model import LedgerError

__all__ = ["TABLE", "Step", "applied_before", "newer_error", "pending"]

# The applied steps' table, the same in both databases.
DB = TypeVar("DB")

TABLE = "CREATE TABLE IF NOT EXISTS ledger_migrations (name TEXT PRIMARY KEY, applied_at TEXT)"


@dataclass(frozen=True, slots=True)
class Step(Generic[DB]):
    """One migration: `apply` runs it on `DB` (a connection or cursor) inside the caller's
    transaction. `legacy`: the schema number a ledger had once this step was in, before
    steps had names (0: a step of the named era)."""

    name: str
    legacy: int
    apply: Callable[[DB], None]


def applied_before(steps: Sequence[Step[DB]], version: int) -> frozenset[str]:
    """The steps a ledger of legacy schema `version` has applied (its number and below)."""
    return frozenset(s.name for s in steps if 0 < s.legacy <= version)


def pending(steps: Sequence[Step[DB]], applied: Collection[str], where: str) -> list[Step[DB]]:
    """The steps still to apply, in order; LedgerError when the ledger has applied a step
    this program does not know (a newer vinos-routine wrote it)."""
    unknown = sorted(set(applied) - {s.name for s in steps})
    if unknown:
        raise newer_error(where, f"steps {', '.join(unknown)}")
    return [s for s in steps if s.name not in applied]


def newer_error(where: str, what: str) -> LedgerError:
    return LedgerError(
        f"{where}: written by a newer vinos-routine ({what} unknown to this one); upgrade "
        "vinos-routine, the ledger was not touched"
    )
