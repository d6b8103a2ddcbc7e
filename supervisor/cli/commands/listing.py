"""`vinos-routine list`: every routine, its schedule, next run, last result and today's cost.

Works from the files and the ledger alone, with or without a daemon. What it gathers and
prints is the read model's rows (routines.query), asked of the daemon when one is up, rendered
by supervisor/cli/render/listing.py (supervisor/cli/reads.py).
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["register"]

EXAMPLE = """example:
  vinos-routine list
  vinos-routine list --json | jq '.[] | select(.enabled)'
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "list",
        help="all routines with schedule, next run, last status and today's cost",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from supervisor.cli.reads import request, show_list

    return show_list(args.json, request("list"))
