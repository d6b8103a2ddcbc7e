"""`vinos-routine cost [--today|--week|--days N|--month [YYYY-MM]]`: what routines spent.

A table per routine (runs, tokens, dollars, share of the total), the top spenders, and the
period's last seven days as a bar chart. Days are calendar days in this machine's zone.
Periods reaching past `[ledger].keep_runs_days` add the compacted days' sums: the figures
are the same before and after a compaction (integer nanodollars on both sides).
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
    period.add_argument(
        "--days",
        dest="days",
        type=_days,
        metavar="N",
        help="the last N days, today included (e.g. 30)",
    )
    period.add_argument(
        "--month",
        dest="month",
        nargs="?",
        const="month:this",
        type=_month,
        metavar="YYYY-MM",
        help="a calendar month (default this one)",
    )
    p.set_defaults(period="today")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def _days(text: str) -> str:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a number of days >= 1, found {text!r}")
    return f"days:{n}"


def _month(text: str) -> str:
    try:
        date.fromisoformat(f"{text}-01")
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a month as YYYY-MM, found {text!r}") from None
    return f"month:{text}"


def period_days(period: str, today: date) -> tuple[date, date]:
    """The first and last calendar day of `period`: today, week, days:N, month:YYYY-MM."""
    if period == "today":
        return today, today
    if period == "week":
        return today - timedelta(days=6), today
    kind, _, value = period.partition(":")
    if kind == "days":
        return today - timedelta(days=int(value) - 1), today
    first = today.replace(day=1) if value == "this" else date.fromisoformat(f"{value}-01")
    after = (first.replace(day=28) + timedelta(days=4)).replace(day=1)
    return first, after - timedelta(days=1)


def period_label(period: str) -> str:
    if period in ("today", "week"):
        return "today" if period == "today" else "the last 7 days"
    kind, _, value = period.partition(":")
    if kind == "days":
        return f"the last {value} days"
    return "this month" if value == "this" else value


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
    """The figures for `period` (see `period_days`) from the ledger."""
    from contextlib import closing
    from zoneinfo import ZoneInfo

    from routines.ledger import day_bounds
    from routines.paths import paths
    from routines.tz import machine_timezone
    from supervisor.fleetview import cli_ledger
    from supervisor.source import scan

    p = paths()
    zone_name = machine_timezone()
    zone = ZoneInfo(zone_name)
    now = now or datetime.now(UTC)
    today = now.astimezone(zone).date()
    first, last = period_days(period, today)
    start, end = day_bounds(first, zone)[0], day_bounds(last, zone)[1]
    chart = [last - timedelta(days=n) for n in range(CHART_DAYS - 1, -1, -1)]
    with closing(cli_ledger(p)) as ledger:
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

    rep = report(args.days or args.month or args.period)
    if args.json:
        print_json(rep.as_json())
        return 0
    _print(rep)
    return 0


def _print(rep: Report) -> None:
    from supervisor.present import color, money, table, tokens, use_color

    c = use_color()
    label = period_label(rep.period)
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
    today = datetime.now().astimezone().date()
    span = f"last {len(days)} days" if today in days else f"{len(days)} days to {max(days):%d %b}"
    print(f"{span} (total {money(sum(days.values()))})")
    for day, dollars in days.items():
        drawn = bar(dollars, top, CHART_WIDTH, unicode=unicode)
        mark = "  today" if day == today else ""
        print(
            f"  {day.strftime('%a %d')}  {color(drawn.ljust(CHART_WIDTH), 'blue', c)}"
            f"  {money(dollars):>8}{mark}"
        )
