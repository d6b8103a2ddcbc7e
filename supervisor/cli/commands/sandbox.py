"""`vinos-routine sandbox NAME [--argv] -- CMD`: run CMD as routine NAME's shell tool would.

The supervisor package never imports sandbox/ or worker/ (the daemon stays small), so this
command execs `python -m worker.sandboxcli`, which does the work: the terminal and the exit
status pass straight through. The exact form `NAME [--argv] -- CMD` is exec'd by the thin
client before this parser is built (supervisor/cli/sandboxexec.py); the others come here.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["register"]

EXAMPLE = """example:
  vinos-routine sandbox day-brief -- 'gh api /notifications | head -c 200'
  vinos-routine sandbox day-brief -- ls -la ~          # words are joined with spaces
  vinos-routine sandbox day-brief --argv -- true       # print the bwrap argv instead
  VINOS_ROUTINE_DEBUG=1 vinos-routine sandbox day-brief -- id   # print it, then run
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "sandbox",
        help="run a command in a routine's shell sandbox (for debugging a whitelist)",
        description=(
            "Run CMD exactly as routine NAME's shell tool would: same bwrap sandbox, network, "
            "declared home paths, workspace, limits, caps and timeout. The whitelist is not "
            "checked. Exits with CMD's status (124 when killed at the timeout)."
        ),
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("name", metavar="NAME", help="the routine whose sandbox to use")
    p.add_argument("--argv", action="store_true", help="print the bwrap argv instead of running")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD", help="the command")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # argparse hands over everything after NAME, so an --argv given there arrives here.
    words = list(args.command)
    show_argv = bool(args.argv)
    if words and words[0] == "--argv":
        show_argv, words = True, words[1:]
    if words and words[0] == "--":
        words = words[1:]
    if not words:
        print("vinos-routine: give the command after --, e.g. -- 'df -h'", file=sys.stderr)
        return 2
    from supervisor.cli.sandboxexec import exec_sandboxcli

    exec_sandboxcli(args.name, show_argv, words)
    return 1  # not reached: exec_sandboxcli replaces this process
