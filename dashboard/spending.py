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
    zone = ZoneInfo(zone_name)
    today = now.astimezone(zone).date()
    days = [today - timedelta(days=n) for n in range(DAYS - 1, -1, -1)]
    start, end = day_bounds(days[0], zone)[0], day_bounds(today, zone)[1]
    # Per day through the ledger's own sums (one small indexed query a day), which hold
    # whatever form the ledger keeps older days in, rather than every run row.
    per: dict[str, dict[date, float]] = {}
    for day in days:
        for t in ledger.totals(*day_bounds(day, zone)):
            if t["dollars"]:
                per.setdefault(t["routine"], {})[day] = float(t["dollars"])
    totals = {t["routine"]: t for t in ledger.totals(start, end)}
    caps = {
        n: e.routine.budget.max_dollars_per_day
        for n, e in registry.entries.items()
        if e.routine is not None
    }
    names = sorted(
        set(totals) | set(per), key=lambda n: (-(totals.get(n, {}).get("dollars") or 0), n)
    )
    css = {n: f"s{i % PALETTE}" for i, n in enumerate(names)}
    layers = [Layer(n, css[n], per.get(n, {})) for n in names]
    cap_sum = sum(c for c in caps.values() if c is not None)
    lines = [Line("all daily caps", cap_sum)] if cap_sum else []
    chart = stacked_bars(days, layers, lines, fmt=money, title=f"spend per day, last {DAYS} days")
    routines = []
    for n in names:
        t = totals.get(n, {})
        cap = caps.get(n)
        routines.append(
            RoutineCost(
                routine=n,
                css=css[n],
                dollars=float(t.get("dollars") or 0.0),
                premium_tokens=int((t.get("input_tokens") or 0) + (t.get("output_tokens") or 0)),
                local_tokens=int(
                    (t.get("local_input_tokens") or 0) + (t.get("local_output_tokens") or 0)
                ),
                runs=int(t.get("runs") or 0),
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
    month_start = day_bounds(today.replace(day=1), zone)[0]
    month_rows = ledger.totals(month_start, end)
    month = {
        "dollars": sum(float(r["dollars"]) for r in month_rows),
        "premium_tokens": sum(int(r["input_tokens"]) + int(r["output_tokens"]) for r in month_rows),
        "local_tokens": sum(
            int(r["local_input_tokens"]) + int(r["local_output_tokens"]) for r in month_rows
        ),
        "runs": sum(int(r["runs"]) for r in month_rows),
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
    """Today's outputs (calendar day in this machine's zone), newest first, rendered."""
    zone = ZoneInfo(zone_name)
    start, end = day_bounds(now.astimezone(zone).date(), zone)
    items = []
    for row in ledger.runs_between(start, end):
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
