"""`vinos-routine history NAME`: the ledger's rows for a routine, newest first.

Runs older than `[ledger].keep_runs_days`, or beyond a routine's newest `keep_runs_max`, were
compacted into one line per day (the count by status, dollars, tokens); those days follow the
runs, as summary lines.

On a fleet (config.toml [fleet]) the runs are every machine's, with a MACHINE column; an
output stays on the machine that ran it, and the line says where.

What it prints is supervisor/cli/views/history.py, from the read model's run rows
(routines/query/runs.py).
"""

from __future__ import annotations

import argparse
from typing import Any

from supervisor.cli.argtypes import whole_number
from supervisor.cli.commands.common import add_parser, die

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
    p.add_argument(
        "-n",
        type=whole_number("a number of runs", 1, 1_000_000),
        default=20,
        metavar="N",
        help="how many runs (default 20)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument(
        "--thread",
        metavar="RUN_ID",
        help="the conversation RUN_ID belongs to: its first run and every reply (`reply`)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.thread:
        return _thread(args.name, args.thread, args.json)
    from supervisor.cli.views.history import show

    return show(args.name, args.n, args.json)


def _thread(name: str, run_id: str, as_json: bool) -> int:
    """One conversation: the run that began it, then each reply under the run it answers,
    with what the person said and what the run answered."""
    from contextlib import closing

    from routines.query.runs import thread_runs
    from routines.spec.paths import paths
    from supervisor.cli.present import print_json_lines
    from supervisor.cli.views.history import said, thread_json, thread_lines
    from supervisor.fleet.view import cli_ledger

    p = paths()
    with closing(cli_ledger(p)) as ledger:
        items = thread_runs(ledger, name, run_id, said(p))
    if not items:
        return die(f"{name} has no run {run_id} (`vinos-routine history {name}`)")
    if as_json:
        print_json_lines(thread_json(items))
        return 0
    for line in thread_lines(items):
        print(line)
    return 0
