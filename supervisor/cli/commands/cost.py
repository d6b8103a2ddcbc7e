"""`vinos-routine cost [--today|--week|--days N|--month [YYYY-MM]]`: what routines spent.

A table per routine (runs, tokens, dollars, share of the total), the top spenders, and the
period's last seven days as a bar chart. Days are calendar days in this machine's zone.
Periods reaching past `[ledger].keep_runs_days` add the compacted days' sums: the figures
are the same before and after a compaction (integer nanodollars on both sides).
"""

from __future__ import annotations

import argparse
from typing import Any

from supervisor.cli.commands.common import add_parser
from supervisor.cli.views.cost import days_arg, month_arg

__all__ = ["register"]


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
        type=days_arg,
        metavar="N",
        help="the last N days, today included (e.g. 30)",
    )
    period.add_argument(
        "--month",
        dest="month",
        nargs="?",
        const="month:this",
        type=month_arg,
        metavar="YYYY-MM",
        help="a calendar month (default this one)",
    )
    p.set_defaults(period="today")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from supervisor.cli.views.cost import show

    return show(args.days or args.month or args.period, args.json)
