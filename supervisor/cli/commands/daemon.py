"""`vinos-routine daemon`: run the supervisor in the foreground (what the systemd unit runs)."""

from __future__ import annotations

import argparse
from typing import Any

from supervisor.cli.commands.common import add_parser

__all__ = ["register"]


def register(sub: Any) -> None:
    p = add_parser(
        sub,
        "daemon",
        "run the scheduler in the foreground until SIGTERM or Ctrl-C",
        "  systemctl --user enable --now vinos-routined   # the usual way\n"
        "  vinos-routine daemon                             # by hand, to watch it\n",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from supervisor.daemon import main

    return main()
