"""The routines' health, decided from their rows: critical, warning or ok, with a line for
each reason, worst first. The bar (supervisor/cli/render/waybar.py) shows it; any reader of
the rows gets the same verdict here. Pure: rows in, a row out (tests/routines/
test_query_health.py).

critical  a routine's last run failed or timed out, or a routine was turned off
          automatically (three failures in a row)
warning   a routine is at >= 80% of its daily budget, its last outcome is needs-attention,
          or its file is invalid
ok        otherwise
Only routines that are on count, except those turned off automatically (off because of it).
The daemon's own health (its ledger away, a full disk) is ipc.Health, in `status`.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import NamedTuple

from routines.query.routines import RoutineRow
from routines.runs import Outcome, counts_as_strike

__all__ = ["WARN_SHARE", "HealthState", "RoutinesHealth", "budget_share", "routines_health"]

WARN_SHARE = 0.8  # of a daily budget spent: warning


class HealthState(StrEnum):
    OK = "ok"
    WARNING = "warning"
    CRITICAL = "critical"


class RoutinesHealth(NamedTuple):
    state: HealthState
    reasons: tuple[str, ...]  # worst first, one line each
    needs_you: tuple[str, ...]  # the routines whose run waits for a person
    budget_share: float  # the largest share of its daily budget a routine that is on spent


def budget_share(row: RoutineRow) -> float | None:
    """What the routine spent today of its daily budget; None when it has none."""
    cap = row.max_dollars_per_day
    if cap is None or cap <= 0:
        return None
    return row.today_dollars / cap


def routines_health(rows: Iterable[RoutineRow]) -> RoutinesHealth:
    critical: list[str] = []
    warning: list[str] = []
    shares: list[float] = []
    rows = list(rows)
    for r in rows:
        if r.disabled_reason:
            critical.append(f"{r.name} was turned off: {r.disabled_reason}")
            continue
        if r.errors:
            warning.append(f"{r.name}: file invalid ({len(r.errors)} error(s))")
        if not r.enabled:
            continue
        if counts_as_strike(r.last_status):
            critical.append(f"{r.name}: last run {r.last_status}")
        share = budget_share(r)
        if share is not None:
            shares.append(share)
            # 1e-9: $0.16 of $0.20 is 80%, though 0.16 / 0.2 is 0.7999… in floating point.
            if share >= WARN_SHARE - 1e-9:
                warning.append(f"{r.name}: {share * 100:.0f}% of its daily budget spent")
        if r.last_outcome == Outcome.NEEDS_ATTENTION:
            warning.append(f"{r.name}: needs your attention")
    needs = tuple(r.name for r in rows if r.needs_you)
    top = max(shares, default=0.0)
    if critical:
        return RoutinesHealth(HealthState.CRITICAL, tuple(critical + warning), needs, top)
    if warning:
        return RoutinesHealth(HealthState.WARNING, tuple(warning), needs, top)
    return RoutinesHealth(HealthState.OK, (), needs, top)
