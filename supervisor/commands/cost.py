"""`vinos-routine cost [--today|--week]`: what routines spent, from the ledger.

A table per routine (runs, tokens, dollars, share of the total), the top spenders, and the
last seven days as a bar chart. Days are calendar days in this machine's zone.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from supervisor.commands.common import add_parser

__all__ = ["Report", "register", "report"]

CHART_DAYS = 7
CHART_WIDTH = 30


def register(sub: Any) -> None:
    p = add_parser(
        sub,
        "cost",
        "what routines spent: per routine, top spenders, the last 7 days",
        "  vinos-routine cost            # today\n"
        "  vinos-routine cost --week\n"
        "  vinos-routine cost --week --json | jq '.routines[0]'\n",
    )
    period = p.add_mutually_exclusive_group()
    period.add_argument(
        "--today", dest="period", action="store_const", const="today", help="today (the default)"
    )
    period.add_argument(
        "--week", dest="period", action="store_const", const="week", help="the last 7 days"
    )
    p.set_defaults(period="today")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


@dataclass(frozen=True, slots=True)
class Report:
    period: str
    zone: str
    start: datetime
    end: datetime
    routines: list[dict[str, Any]]  # ledger totals, biggest spender first, with "share"
    days: dict[date, float]  # the chart: the last CHART_DAYS days, oldest first
    caps: dict[str, float | None]  # each routine's max_dollars_per_day

    @property
    def total(self) -> float:
        return float(sum(r["dollars"] for r in self.routines))

    def as_json(self) -> dict[str, Any]:
        return {
            "period": self.period,
            "zone": self.zone,
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "total_dollars": round(self.total, 6),
            "routines": [
                {**r, "dollars": round(r["dollars"], 6), "cap": self.caps.get(r["routine"])}
                for r in self.routines
            ],
            "days": [{"date": d.isoformat(), "dollars": round(v, 6)} for d, v in self.days.items()],
        }


def report(period: str, now: datetime | None = None) -> Report:
    """The figures for `period` ("today" or "week") from the ledger."""
    from zoneinfo import ZoneInfo

    from routines.ledger import Ledger, day_bounds
    from routines.paths import paths
    from routines.registry import scan
    from routines.tz import machine_timezone

    p = paths()
    zone_name = machine_timezone()
    zone = ZoneInfo(zone_name)
    now = now or datetime.now(UTC)
    today = now.astimezone(zone).date()
    first = today if period == "today" else today - timedelta(days=6)
    start, end = day_bounds(first, zone)[0], day_bounds(today, zone)[1]
    chart = [today - timedelta(days=n) for n in range(CHART_DAYS - 1, -1, -1)]
    with Ledger(p.ledger) as ledger:
        rows = ledger.totals(start, end)
        days = ledger.dollars_by_day(chart, zone)
    total = sum(r["dollars"] for r in rows)
    for r in rows:
        r["share"] = round(r["dollars"] / total, 4) if total > 0 else 0.0
    caps = {
        name: e.routine.budget.max_dollars_per_day
        for name, e in scan(p).entries.items()
        if e.routine is not None
    }
    return Report(period, zone_name, start, end, rows, days, caps)


def run(args: argparse.Namespace) -> int:
    from supervisor.present import print_json

    rep = report(args.period)
    if args.json:
        print_json(rep.as_json())
        return 0
    _print(rep)
    return 0


def _print(rep: Report) -> None:
    from supervisor.present import color, money, table, tokens, use_color

    c = use_color()
    label = "today" if rep.period == "today" else "the last 7 days"
    print(color(f"Spent {label}: {money(rep.total)}", "bold", c))
    if rep.routines:
        rows = []
        for r in rep.routines:
            premium = r["input_tokens"] + r["output_tokens"]
            local = r["local_input_tokens"] + r["local_output_tokens"]
            row = [
                r["routine"],
                str(r["runs"]),
                tokens(premium),
                tokens(local) if local else "—",
                money(r["dollars"]),
                f"{r['share'] * 100:.0f}%" if rep.total > 0 else "—",
            ]
            if rep.period == "today":
                cap = rep.caps.get(r["routine"])
                row.append(money(cap) if cap is not None else "—")
            rows.append(row)
        headers = ["ROUTINE", "RUNS", "TOKENS", "LOCAL", "DOLLARS", "SHARE"]
        if rep.period == "today":
            headers.append("DAILY CAP")
        print()
        table(headers, rows, right={1, 2, 3, 4, 5, 6})
        spenders = [r for r in rep.routines if r["dollars"] > 0][:3]
        if spenders:
            top = ", ".join(
                f"{r['routine']} {money(r['dollars'])} ({r['share'] * 100:.0f}%)" for r in spenders
            )
            print(f"\ntop spenders: {top}")
    else:
        print("no runs in this period")
    print()
    _chart(rep.days, c)


def _chart(days: dict[date, float], c: bool) -> None:
    from supervisor.present import bar, color, money

    encoding = (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "")
    unicode = encoding.startswith("utf")
    top = max(days.values(), default=0.0)
    print(f"last {len(days)} days (total {money(sum(days.values()))})")
    today = max(days) if days else None
    for day, dollars in days.items():
        drawn = bar(dollars, top, CHART_WIDTH, unicode=unicode)
        mark = "  today" if day == today else ""
        print(
            f"  {day.strftime('%a %d')}  {color(drawn.ljust(CHART_WIDTH), 'blue', c)}"
            f"  {money(dollars):>8}{mark}"
        )
