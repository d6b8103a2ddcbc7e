"""`vinos-routine history NAME`: the ledger's rows for a routine, newest first."""

from __future__ import annotations

import argparse
from typing import Any

from supervisor.commands.common import NoSuchRoutine, add_parser, die, find_entry

__all__ = ["register"]


def register(sub: Any) -> None:
    p = add_parser(
        sub,
        "history",
        "a routine's runs from the ledger, newest first",
        "  vinos-routine history day-brief -n 5\n"
        "  vinos-routine history day-brief --json | jq .dollars\n",
    )
    p.add_argument("name", help="routine name")
    p.add_argument("-n", type=int, default=20, metavar="N", help="how many runs (default 20)")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from routines.ledger import Ledger
    from routines.paths import paths
    from routines.safetext import one_line
    from supervisor.present import color, print_json_lines, table, use_color

    p = paths()
    with Ledger(p.ledger) as ledger:
        rows = ledger.history(args.name, max(1, args.n))
    if not rows:
        try:
            find_entry(args.name, p)
        except NoSuchRoutine as exc:
            return die(str(exc))
    if args.json:
        print_json_lines([r.as_json() for r in rows])
        return 0
    if not rows:
        print(f"{args.name} has not run yet")
        return 0
    c = use_color()
    out = []
    for r in rows:
        status = r.status or "?"
        if status in ("failed", "timeout"):
            status = color(status, "red", c)
        elif status == "ok":
            status = color(status, "green", c)
        tokens = (r.input_tokens or 0) + (r.output_tokens or 0)
        local = (r.local_input_tokens or 0) + (r.local_output_tokens or 0)
        out.append(
            [
                (r.started_at or "")[:19].replace("T", " "),
                r.trigger or "",
                status,
                r.outcome or "",
                r.route or "",
                f"{tokens}" + (f" (+{local} local)" if local else ""),
                f"${r.dollars or 0:.4f}",
                f"{r.duration_sec:.1f}s" if r.duration_sec is not None else "",
                one_line((r.detail or "")[:60]),  # a command's stderr can be in it
            ]
        )
    table(
        [
            "STARTED (UTC)",
            "TRIGGER",
            "STATUS",
            "OUTCOME",
            "ROUTE",
            "TOKENS",
            "COST",
            "TIME",
            "DETAIL",
        ],
        out,
    )
    return 0
