"""Rows of money: what each routine spent over a period, with its share and its daily cap,
and the dollars per calendar day. `cost` and the dashboard's cost page read them here, from
the ledger's own sums (which hold whatever form the ledger keeps older days in: the figures
are the same before and after a compaction).

Reads only, through the ledger's API. Tested as data with the memory ledger:
tests/routines/test_query_costs.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from zoneinfo import ZoneInfo

    from routines.ledger.api import LedgerAPI
    from routines.spec.registry import Registry

__all__ = ["CostRow", "caps", "cost_rows", "routine_days", "spent_by_day"]


class CostRow(NamedTuple):
    """What one routine spent over a period."""

    routine: str
    runs: int
    input_tokens: int
    output_tokens: int
    local_input_tokens: int
    local_output_tokens: int
    dollars: float
    share: float  # of the period's total, to 4 places; 0 when nothing was spent
    cap: float | None = None  # its max_dollars_per_day (None: unlimited, or no file)

    @property
    def premium_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def local_tokens(self) -> int:
        return self.local_input_tokens + self.local_output_tokens

    def as_json(self) -> dict[str, Any]:
        """`cost --json`'s object for the routine (its keys are the CLI's interface)."""
        return {**self._asdict(), "dollars": round(self.dollars, 6)}


def caps(registry: Registry) -> dict[str, float | None]:
    """Each valid routine's daily budget (None: unlimited)."""
    return {
        name: e.routine.budget.max_dollars_per_day
        for name, e in registry.entries.items()
        if e.routine is not None
    }


def cost_rows(
    ledger: LedgerAPI, start: datetime, end: datetime, registry: Registry | None = None
) -> list[CostRow]:
    """A row per routine that ran in [start, end), biggest spender first; with `registry`,
    each one's daily cap."""
    totals = ledger.totals(start, end)
    total = sum(t["dollars"] for t in totals)
    limits = caps(registry) if registry is not None else {}
    return [
        CostRow(
            routine=t["routine"],
            runs=int(t["runs"]),
            input_tokens=int(t["input_tokens"]),
            output_tokens=int(t["output_tokens"]),
            local_input_tokens=int(t["local_input_tokens"]),
            local_output_tokens=int(t["local_output_tokens"]),
            dollars=float(t["dollars"]),
            share=round(t["dollars"] / total, 4) if total > 0 else 0.0,
            cap=limits.get(t["routine"]),
        )
        for t in totals
    ]


def spent_by_day(ledger: LedgerAPI, days: Sequence[date], zone: ZoneInfo) -> dict[date, float]:
    """Every routine's dollars on each of `days` (calendar days in `zone`), in their order."""
    return ledger.dollars_by_day(days, zone)


def routine_days(
    ledger: LedgerAPI, days: Sequence[date], zone: ZoneInfo
) -> dict[str, dict[date, float]]:
    """Each routine's dollars on each of `days` it spent anything (one small indexed sum a
    day rather than every run row)."""
    from routines.ledger import day_bounds

    per: dict[str, dict[date, float]] = {}
    for day in days:
        for t in ledger.totals(*day_bounds(day, zone)):
            if t["dollars"]:
                per.setdefault(t["routine"], {})[day] = float(t["dollars"])
    return per
