"""`vinos-routine cost [--today|--week|--days N|--month [YYYY-MM]]`: what routines spent.

A table per routine (runs, tokens, dollars, share of the total), the top spenders, and the
period's last seven days as a bar chart. Days are calendar days in this machine's zone.
Periods reaching past `[ledger].keep_runs_days` add the compacted days' sums: the figures
are the same before and after a compaction (integer nanodollars on both sides).

`report` reads the read model's cost rows (routines.query.costs); `cells` and `render`
build the table and the chart from the Report alone (tests/supervisor/test_views.py).
`show` is the command's flow, run by the CLI.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

    from routines.query.costs import CostRow

__all__ = [
    "CHART_DAYS",
    "CHART_WIDTH",
    "Report",
    "cells",
    "days_arg",
    "month_arg",
    "period_days",
    "period_label",
    "render",
    "report",
    "show",
]

CHART_DAYS = 7
CHART_WIDTH = 30


MAX_DAYS = 36_600  # a century: more is a typo, and beyond date arithmetic's range soon after


def days_arg(text: str) -> str:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= MAX_DAYS:
        from routines.safetext import shortened

        raise argparse.ArgumentTypeError(
            f"expected a number of days from 1 to {MAX_DAYS}, found {shortened(text)!r}"
        )
    return f"days:{n}"


def month_arg(text: str) -> str:
    try:
        date.fromisoformat(f"{text}-01")
    except ValueError:
        from routines.safetext import shortened

        raise argparse.ArgumentTypeError(
            f"expected a month as YYYY-MM, found {shortened(text)!r}"
        ) from None
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
    routines: Sequence[CostRow]  # the read model's, biggest spender first, with its cap
    days: dict[date, float]  # the chart: the last CHART_DAYS days, oldest first

    @property
    def total(self) -> float:
        return float(sum(r.dollars for r in self.routines))

    def as_json(self) -> dict[str, Any]:
        return {
            "period": self.period,
            "zone": self.zone,
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "total_dollars": round(self.total, 6),
            "routines": [r.as_json() for r in self.routines],
            "days": [{"date": d.isoformat(), "dollars": round(v, 6)} for d, v in self.days.items()],
        }


def report(period: str, now: datetime | None = None) -> Report:
    """The figures for `period` (see `period_days`): the read model's cost rows."""
    from contextlib import closing
    from zoneinfo import ZoneInfo

    from routines.ledger import day_bounds
    from routines.query.costs import cost_rows, spent_by_day
    from routines.schedule.tz import machine_timezone
    from routines.spec.paths import paths
    from routines.spec.registry import scan
    from supervisor.fleet.view import cli_ledger

    p = paths()
    zone_name = machine_timezone()
    zone = ZoneInfo(zone_name)
    now = now or datetime.now(UTC)
    today = now.astimezone(zone).date()
    first, last = period_days(period, today)
    start, end = day_bounds(first, zone)[0], day_bounds(last, zone)[1]
    chart = [last - timedelta(days=n) for n in range(CHART_DAYS - 1, -1, -1)]
    with closing(cli_ledger(p)) as ledger:
        rows = cost_rows(ledger, start, end, scan(p))
        days = spent_by_day(ledger, chart, zone)
    return Report(period, zone_name, start, end, rows, days)


def show(period: str, as_json: bool) -> int:
    """`cost [--today | --week | --days N | --month M] [--json]`: gather, then print."""
    from supervisor.cli.present import print_json, use_color

    rep = report(period)
    if as_json:
        print_json(rep.as_json())
        return 0
    encoding = (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "")
    today = datetime.now().astimezone().date()
    print(render(rep, use_color(), encoding.startswith("utf"), today), end="")
    return 0


def cells(rep: Report) -> tuple[list[str], list[list[str]]]:
    """The per-routine table: its headers (DAILY CAP for today only) and rows."""
    from supervisor.cli.present import money, tokens

    rows = []
    for r in rep.routines:
        row = [
            r.routine,
            str(r.runs),
            tokens(r.premium_tokens),
            tokens(r.local_tokens) if r.local_tokens else "—",
            money(r.dollars),
            f"{r.share * 100:.0f}%" if rep.total > 0 else "—",
        ]
        if rep.period == "today":
            row.append(money(r.cap) if r.cap is not None else "—")
        rows.append(row)
    headers = ["ROUTINE", "RUNS", "TOKENS", "LOCAL", "DOLLARS", "SHARE"]
    if rep.period == "today":
        headers.append("DAILY CAP")
    return headers, rows


def render(rep: Report, c: bool, unicode: bool, today: date) -> str:
    """The text of `cost`: the total, the table and the top spenders, then the chart;
    `unicode`: bars in eighths of a cell (else #), `today`: the local date marked."""
    import io

    from supervisor.cli.present import color, money, table

    out = io.StringIO()
    out.write(color(f"Spent {period_label(rep.period)}: {money(rep.total)}", "bold", c) + "\n")
    if rep.routines:
        headers, rows = cells(rep)
        out.write("\n")
        table(headers, rows, out, right={1, 2, 3, 4, 5, 6})
        spenders = [r for r in rep.routines if r.dollars > 0][:3]
        if spenders:
            top = ", ".join(
                f"{r.routine} {money(r.dollars)} ({r.share * 100:.0f}%)" for r in spenders
            )
            out.write(f"\ntop spenders: {top}\n")
    else:
        out.write("no runs in this period\n")
    out.write("\n")
    return out.getvalue() + "".join(line + "\n" for line in _chart(rep.days, c, unicode, today))


def _chart(days: dict[date, float], c: bool, unicode: bool, today: date) -> list[str]:
    from supervisor.cli.present import bar, color, money

    top = max(days.values(), default=0.0)
    span = f"last {len(days)} days" if today in days else f"{len(days)} days to {max(days):%d %b}"
    out = [f"{span} (total {money(sum(days.values()))})"]
    for day, dollars in days.items():
        drawn = bar(dollars, top, CHART_WIDTH, unicode=unicode)
        mark = "  today" if day == today else ""
        out.append(
            f"  {day.strftime('%a %d')}  {color(drawn.ljust(CHART_WIDTH), 'blue', c)}"
            f"  {money(dollars):>8}{mark}"
        )
    return out
