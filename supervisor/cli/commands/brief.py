"""`vinos-routine brief`: the day's outputs across routines, newest first, with their outcome.

Outputs are the files state/NAME/YYYY-MM-DD-HHMM.md; their run (status, outcome, summary) comes
from the ledger. Showing an output in full marks it seen (see supervisor/seen.py);
`--unseen` lists what routines with open_on_login left for you, `--open` pages it ($PAGER) on
a terminal and hands it to xdg-open elsewhere (a launcher, waybar, a login hook).

What it gathers and shows is supervisor/cli/views/brief.py; this module holds the parser and
what a brief does besides printing: marking what was shown seen, paging or opening it.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any

from supervisor.cli.commands.common import add_parser, die
from supervisor.seen import UNSEEN_DAYS

if TYPE_CHECKING:
    from routines.spec.paths import Paths
    from supervisor.cli.views.brief import Item

__all__ = ["register"]


def _day(text: str) -> date:
    today = datetime.now().astimezone().date()
    if text == "today":
        return today
    if text == "yesterday":
        return today - timedelta(days=1)
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected YYYY-MM-DD, today or yesterday, found {text!r}"
        ) from None


def register(sub: Any) -> None:
    p = add_parser(
        sub,
        "brief",
        "the day's outputs across routines, newest first, with their outcome",
        "  vinos-routine brief                  # today's, in full\n"
        "  vinos-routine brief --date yesterday --list\n"
        "  vinos-routine brief --unseen --open  # at login: what waits for you, in a viewer\n",
    )
    p.add_argument("--date", type=_day, metavar="D", help="YYYY-MM-DD, today or yesterday")
    p.add_argument(
        "--unseen",
        action="store_true",
        help=f"only outputs of open_on_login routines not shown yet (last {UNSEEN_DAYS} days "
        "unless --date)",
    )
    p.add_argument("--open", action="store_true", help="page them, or open them with xdg-open")
    p.add_argument("--list", action="store_true", help="one line per output, not the text")
    p.add_argument("--json", action="store_true", help="print JSON (marks nothing seen)")
    p.add_argument(
        "--menu",
        action="store_true",
        help="one line per output for a launcher: LABEL<TAB>FILE (packaging/walker)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from routines.spec.paths import paths
    from supervisor.cli.present import print_json, use_color
    from supervisor.cli.views import brief

    p = paths()
    today = datetime.now().astimezone().date()
    days = _days(args, today)
    items, runs = brief.gather(p, days)
    failed, quiet, away = runs.failed, runs.quiet, runs.elsewhere
    waiting = _waiting(p)
    if args.unseen:
        items = [i for i in items if i.open_on_login and not i.seen]
    heading = brief.heading(days, today)
    note = _pruned(p, days, today)
    if args.json:
        print_json(brief.json_value(days, items, failed, waiting, note, away, quiet))
        return 0
    if args.menu:
        for line in brief.menu_lines(items):
            print(line)
        return 0
    if note:
        print(note, file=sys.stderr)
    if args.open:
        if not items and not waiting:
            print("nothing new to show" if args.unseen else f"no outputs for {heading}")
            return 0
        top = brief.pending_text(waiting, runs.paused)
        code = _open(p, top + brief.document(items, heading), days[0])
        if code == 0:
            _mark(p, items)
        return code
    text = brief.render(
        items,
        failed,
        heading,
        unseen=args.unseen,
        as_list=args.list,
        c=use_color(),
        quiet=[] if args.unseen else quiet,
    )
    print(brief.pending_text(waiting, runs.paused) + text, end="")
    if away:
        where = ", ".join(f"{n} on {m}" for m, n in sorted(away.items()))
        print(f"\nOn other machines (outputs stay where they were made): {where}")
    if not args.list:
        _mark(p, items)
    return 0


def _days(args: argparse.Namespace, today: date) -> list[date]:
    """The days a brief shows: the one asked for, the last few for --unseen, or today."""
    if args.date:
        return [args.date]
    if args.unseen:
        return [today - timedelta(days=n) for n in range(UNSEEN_DAYS)]
    return [today]


def _waiting(p: Paths) -> list[Any]:
    """The proposals waiting for a decision (expired and invalidated ones marked first)."""
    from contextlib import closing

    from supervisor.cli.commands.approvals import fresh_waiting
    from supervisor.fleet.view import requests_ledger

    found = requests_ledger(p)
    if found is None:
        return []
    with closing(found) as ledger:
        waiting, _ = fresh_waiting(ledger, datetime.now(UTC))
    return waiting


def _pruned(p: Paths, days: list[date], today: date) -> str | None:
    """A note when a day asked for is past output retention (its outputs were deleted)."""
    from supervisor.engine.retention import keep_days, pruned_note

    keep = keep_days(p.config_file)
    if min(days) >= today - timedelta(days=keep):
        return None
    return pruned_note("outputs", keep)


def _mark(p: Paths, items: list[Item]) -> None:
    from supervisor.seen import mark_seen

    try:
        mark_seen(p.state_dir, [i.key for i in items])
    except OSError as exc:  # a read-only state dir: the brief was shown all the same
        print(
            f"vinos-routine: could not record what was shown ({exc.strerror}: {exc.filename})",
            file=sys.stderr,
        )


def _open(p: Paths, text: str, day: date) -> int:
    """Page `text` on a terminal; elsewhere write it to a private file and xdg-open it."""
    import shutil
    import subprocess

    if sys.stdout.isatty():
        pager = os.environ.get("PAGER") or ("less" if shutil.which("less") else "more")
        env = dict(os.environ)
        env.setdefault("LESS", "FRX")
        try:
            subprocess.run(pager, shell=True, input=text.encode("utf-8"), env=env, check=False)
        except OSError as exc:
            return die(f"cannot start the pager {pager!r}: {exc.strerror}")
        return 0
    from routines.store import write_atomic

    p.runtime_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    target = p.runtime_dir / f"brief-{day.isoformat()}.md"
    write_atomic(target, text.encode("utf-8"), mode=0o600)
    opener = shutil.which("xdg-open")
    if opener is None:
        return die(f"xdg-open not found (install xdg-utils); the brief is at {target}")
    try:
        code = subprocess.run(
            [opener, str(target)], stdin=subprocess.DEVNULL, check=False
        ).returncode
    except OSError as exc:
        return die(f"cannot run xdg-open: {exc.strerror}; the brief is at {target}")
    if code != 0:
        return die(f"xdg-open failed (exit {code}); the brief is at {target}")
    return 0
