"""`vinos-routine status`: is the daemon up, what runs, what waits, what comes next.

The daemon's status reply (or the files' without one), rendered by
supervisor/cli/render/status.py (supervisor/cli/reads.py)."""

from __future__ import annotations

import argparse
from typing import Any

from supervisor.cli.commands.common import add_parser

__all__ = ["register"]


def register(sub: Any) -> None:
    p = add_parser(
        sub,
        "status",
        "daemon state, running and queued runs, and what is due next",
        "  vinos-routine status\n"
        "  vinos-routine status --json\n"
        "  vinos-routine status --waybar   # for waybar's custom module (packaging/waybar/)\n",
    )
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print JSON")
    out.add_argument(
        "--waybar",
        action="store_true",
        help="print waybar's custom-module JSON (text, tooltip, class); reads only files",
    )
    p.add_argument(
        "--follow",
        action="store_true",
        help="with --waybar: keep running, a line each time it changes (pushed by the daemon)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if getattr(args, "follow", False):
        from supervisor.cli.commands.common import die
        from supervisor.cli.waybarfollow import follow

        return follow() if args.waybar else die("--follow goes with --waybar", 2)
    from supervisor.cli import reads

    return reads.waybar() if args.waybar else reads.show_status(args.json, reads.request("status"))
