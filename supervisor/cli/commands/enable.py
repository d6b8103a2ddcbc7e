"""`vinos-routine enable NAME` / `disable NAME`: turn a routine on or off (its file is kept).

The choice is stored in the ledger (system routines live in /etc, which is not yours to edit),
and it wins until the file's own `enabled` is changed afterwards. `enable` also clears the
failure streak and owes nothing from before: the first run is the next slot.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from supervisor.cli.commands.common import NoSuchRoutine, add_parser, die, find_routine

if TYPE_CHECKING:
    from routines.spec import Routine

__all__ = ["register"]


def register(sub: Any) -> None:
    p = add_parser(sub, "enable", "turn a routine on", "  vinos-routine enable day-brief\n")
    p.add_argument("name", help="routine name")
    p.set_defaults(func=run, on=True)
    p = add_parser(
        sub, "disable", "turn a routine off (keeps its file)", "  vinos-routine disable day-brief\n"
    )
    p.add_argument("name", help="routine name")
    p.set_defaults(func=run, on=False)


def run(args: argparse.Namespace) -> int:
    from contextlib import closing

    from routines.schedule import compile_schedule
    from routines.spec.paths import paths
    from supervisor.cli.client import DaemonError, try_daemon
    from supervisor.cli.present import when
    from supervisor.engine.toggle import set_enabled
    from supervisor.fleet.view import cli_ledger

    p = paths()
    try:
        _, routine = find_routine(args.name, p)
    except NoSuchRoutine as exc:
        return die(str(exc))
    now = datetime.now(UTC)
    if args.on and routine.schedule.form == "once":
        from routines.spec.loader import once_past

        if past := once_past(routine.schedule, now):
            return die(f"{routine.name}: [schedule].once {past}: set a new time first")
    with closing(cli_ledger(p)) as ledger:
        set_enabled(ledger, routine, args.on, now)
    client = try_daemon(p)
    if client is not None:
        with client:
            try:
                client.request("reload")
            except DaemonError as exc:
                print(f"warning: the daemon did not reload: {exc}")
    if args.on and not routine.scheduled:
        print(f"{routine.name} enabled: started by its [trigger] only")
    elif args.on:
        sched = compile_schedule(routine.schedule, routine.kind)
        fire = sched.next_fire(routine.name, now)
        msg = f"{routine.name} enabled: {sched.description}"
        if fire:
            msg += f"; next run {when(fire, now)}"
        print(msg)
    if args.on:
        if getattr(args, "card", True):
            _print_card(routine)
        if not routine.enabled:
            print(
                f"note: {routine.source} still says enabled = false; `enable` wins until that "
                "line is edited (list says so)"
            )
        if client is None:
            from supervisor.cli.userunits import start_hint

            print(f"note: the daemon is not running, so nothing runs on schedule; {start_hint()}")
    else:
        print(f"{routine.name} disabled")
    return 0


def _print_card(routine: Routine) -> None:
    """What it may do, shown as it starts running on its own."""
    from supervisor.cli.commands.capabilities import card, card_lines, on_this_host
    from supervisor.cli.present import use_color

    for line in card_lines(card(routine, on_this_host(routine)), use_color()):
        print(line)
