"""The cost and brief pages: money per routine and day, and today's outputs."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from dashboard.charts import Layer, Line, stacked_bars
from dashboard.files import MAX_OUTPUT, read_beneath
from dashboard.render import markdown
from routines.humanize import money
from routines.ledger import day_bounds
from routines.ledger.api import LedgerAPI
from routines.query.costs import caps, cost_rows, routine_days
from routines.query.runs import day_runs
from routines.spec.paths import Paths
from routines.spec.registry import Registry

__all__ = ["BriefItem", "CostPage", "brief_page", "cost_page"]

DAYS = 30
PALETTE = 8  # CSS classes s0 … s7


@dataclass(frozen=True, slots=True)
class RoutineCost:
    routine: str
    css: str
    dollars: float  # over the 30 days
    premium_tokens: int
    local_tokens: int
    runs: int
    cap: float | None
    chart: str  # its own 30 days, with its daily cap drawn


@dataclass(frozen=True, slots=True)
class CostPage:
    days: list[date]
    chart: str  # every routine stacked, one bar per day
    routines: list[RoutineCost]
    month: dict[str, Any]  # month so far: dollars, premium and local tokens, runs
    total: float  # the 30 days
    zone: str


def cost_page(registry: Registry, ledger: LedgerAPI, now: datetime, zone_name: str) -> CostPage:
    """The read model's cost rows (routines.query.costs) as charts: the last DAYS days."""
    zone = ZoneInfo(zone_name)
    today = now.astimezone(zone).date()
    days = [today - timedelta(days=n) for n in range(DAYS - 1, -1, -1)]
    start, end = day_bounds(days[0], zone)[0], day_bounds(today, zone)[1]
    per = routine_days(ledger, days, zone)
    totals = {t.routine: t for t in cost_rows(ledger, start, end)}
    limits = caps(registry)
    names = sorted(
        set(totals) | set(per), key=lambda n: (-(t.dollars if (t := totals.get(n)) else 0), n)
    )
    css = {n: f"s{i % PALETTE}" for i, n in enumerate(names)}
    layers = [Layer(n, css[n], per.get(n, {})) for n in names]
    cap_sum = sum(c for c in limits.values() if c is not None)
    lines = [Line("all daily caps", cap_sum)] if cap_sum else []
    chart = stacked_bars(days, layers, lines, fmt=money, title=f"spend per day, last {DAYS} days")
    routines = []
    for n in names:
        t = totals.get(n)
        cap = limits.get(n)
        routines.append(
            RoutineCost(
                routine=n,
                css=css[n],
                dollars=t.dollars if t else 0.0,
                premium_tokens=t.premium_tokens if t else 0,
                local_tokens=t.local_tokens if t else 0,
                runs=t.runs if t else 0,
                cap=cap,
                chart=stacked_bars(
                    days,
                    [layers[names.index(n)]],
                    [Line("daily cap", cap)] if cap is not None else [],
                    fmt=money,
                    title=f"{n}: spend per day",
                ),
            )
        )
    month_rows = cost_rows(ledger, day_bounds(today.replace(day=1), zone)[0], end)
    month = {
        "dollars": sum(r.dollars for r in month_rows),
        "premium_tokens": sum(r.premium_tokens for r in month_rows),
        "local_tokens": sum(r.local_tokens for r in month_rows),
        "runs": sum(r.runs for r in month_rows),
        "since": today.replace(day=1),
    }
    return CostPage(days, chart, routines, month, sum(r.dollars for r in routines), zone_name)


@dataclass(frozen=True, slots=True)
class BriefItem:
    routine: str
    run_id: str | None
    status: str | None
    outcome: str | None
    started_at: str | None
    name: str
    html: str | None


def brief_page(p: Paths, ledger: LedgerAPI, now: datetime, zone_name: str) -> list[BriefItem]:
    """Today's outputs (calendar day in this machine's zone), newest first, rendered: the
    read model's runs of the day (routines.query.runs)."""
    zone = ZoneInfo(zone_name)
    items = []
    for row in day_runs(ledger, [now.astimezone(zone).date()], zone).runs:
        if not row.output_file:
            continue
        name = Path(row.output_file).name
        data = read_beneath(p.routine_state(row.routine), name, MAX_OUTPUT)
        items.append(
            BriefItem(
                routine=row.routine,
                run_id=row.run_id,
                status=row.status,
                outcome=row.outcome,
                started_at=row.started_at,
                name=name,
                html=markdown(data.decode("utf-8", "replace")) if data is not None else None,
            )
        )
    return items
