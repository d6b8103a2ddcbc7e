"""`vinos-routine fire NAME [--input TEXT|-]`: start a routine that has `fire = true` in its
[trigger] table, through the daemon, handing it an input.

The input is capped (refused past the cap, never cut) and reaches the model marked as untrusted
data. A fire call while the routine runs is held and coalesced with any other event into one
run when it ends.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from supervisor.cli.commands.common import NoSuchRoutine, add_parser, die, find_entry

__all__ = ["register"]


def register(sub: Any) -> None:
    p = add_parser(
        sub,
        "fire",
        "start a routine that takes fire calls ([trigger] fire = true), with an input",
        "  vinos-routine fire summarize --input 'the notes from the call'\n"
        "  xclip -o | vinos-routine fire summarize --input -   # the input from stdin\n",
    )
    p.add_argument("name", help="routine name")
    p.add_argument(
        "--input", metavar="TEXT", help="text handed to the run as untrusted input ('-': stdin)"
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from routines.spec.paths import paths
    from routines.spec.trigger import INPUT_CAP
    from supervisor.cli.client import DaemonError, DaemonNotRunning, connect
    from supervisor.cli.present import print_json

    # A name no file has is said here, daemon or not (the daemon stays the judge of the rest:
    # whether the routine is on and takes fire calls): tests/cli/test_cli_bad_input.py.
    try:
        find_entry(args.name, paths())
    except NoSuchRoutine as exc:
        return die(str(exc))
    text: str | None = args.input
    if text == "-":
        data = sys.stdin.buffer.read(INPUT_CAP + 1)
        if len(data) > INPUT_CAP:
            return die(f"the input on stdin passes {INPUT_CAP:,} bytes, the most a fire call takes")
        text = data.decode("utf-8", errors="replace")
    if text is not None and len(text.encode()) > INPUT_CAP:
        return die(
            f"the input is {len(text.encode()):,} bytes; a fire call takes at most {INPUT_CAP:,}"
        )
    try:
        with connect(paths().control_socket) as client:
            result = client.request("fire", {"name": args.name, "input": text})
    except DaemonNotRunning as exc:
        return die(f"{exc} (a fire call goes through the daemon)")
    except DaemonError as exc:
        return die(str(exc))
    if args.json:
        print_json(result)
    elif result["state"] == "started":
        print(f"fired: {result['run_id']} (follow it: vinos-routine logs {args.name} --follow)")
    else:
        print(f"fired: {args.name} is running; this call runs when that run ends")
    return 0
