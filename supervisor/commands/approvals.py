"""`vinos-routine pending [--json]`, `approve ID [--yes]`, `deny ID [--why TEXT]`.

A run may only *propose* a routine's declared actions (routines/proposals.py); these commands
are how the person decides. `approve` shows the exact command and the whole input, asks on a
terminal, then execs `python -m worker.actioncmd ID`, which claims the proposal (one decision
per proposal, even with two `approve` racing) and runs it in the routine's sandbox.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from supervisor.commands.common import add_parser, die

__all__ = ["fresh_waiting", "register"]

INPUT_PREVIEW_LINES = 3


def register(sub: Any) -> None:
    p = add_parser(
        sub,
        "pending",
        "list the actions routines proposed that wait for your decision",
        "  vinos-routine pending\n  vinos-routine pending --json\n",
    )
    p.add_argument("--json", action="store_true", help="one JSON object per proposal")
    p.set_defaults(func=pending)
    p = add_parser(
        sub,
        "approve",
        "show a proposed action, then run it once in its routine's sandbox",
        "  vinos-routine approve 12\n  vinos-routine approve 12 --yes   # no question\n",
    )
    p.add_argument("id", type=int, metavar="ID", help="the proposal's number (see `pending`)")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    p.set_defaults(func=approve)
    p = add_parser(
        sub,
        "deny",
        "refuse a proposed action (its routine's next run is told, with your reason)",
        '  vinos-routine deny 12 --why "too curt; keep the greeting"\n',
    )
    p.add_argument("id", type=int, metavar="ID", help="the proposal's number (see `pending`)")
    p.add_argument("--why", default="", help="why, for the routine's next run")
    p.set_defaults(func=deny)


def fresh_waiting(ledger: Any, now: datetime) -> tuple[list[Any], list[Any]]:
    """(waiting proposals, those just invalidated because their routine file changed), after
    marking the expired ones."""
    from routines import proposals
    from routines.paths import paths
    from routines.registry import scan

    proposals.expire(ledger, now)
    waiting = proposals.waiting(ledger)
    if not waiting:
        return [], []
    registry = scan(paths())
    stale: list[Any] = []
    for name in sorted({w.routine for w in waiting}):
        entry = registry.get(name)
        current = (
            proposals.fingerprint(entry.routine.text)
            if entry is not None and entry.valid and entry.routine is not None
            else None
        )
        if any(w.fingerprint != current for w in waiting if w.routine == name):
            stale += [w for w in waiting if w.routine == name and w.fingerprint != current]
            proposals.invalidate(ledger, name, current, now)
    return [w for w in waiting if w not in stale], stale


def _age(created: str, now: datetime) -> str:
    from routines.humanize import relative
    from routines.ledger import from_iso

    return relative(now - from_iso(created)) + " ago"


def pending(args: argparse.Namespace) -> int:
    from routines.ledger import Ledger
    from routines.paths import paths
    from routines.safetext import one_line, visible
    from supervisor.present import print_json_lines

    now = datetime.now(UTC)
    with Ledger(paths().ledger) as ledger:
        waiting, stale = fresh_waiting(ledger, now)
    if args.json:
        rows = [{**w.as_json(), "state": str(w.state)} for w in waiting]
        rows += [{**s.as_json(), "state": "invalidated"} for s in stale]
        print_json_lines(rows)
        return 0
    for s in stale:
        print(
            f"#{s.id} {one_line(s.routine)} · {one_line(s.action)}: invalidated, "
            "the routine file was edited since it was proposed (nothing ran)"
        )
    if not waiting:
        print("nothing waits for you" + (" now" if stale else ""))
        return 0
    for w in waiting:
        print(f"#{w.id}  {w.routine} · {w.action} · {_age(w.created_at, now)}")
        print(f"    {one_line(w.summary)}")
        if w.why:
            print(f"    (not run automatically: {one_line(w.why)})")
        lines = w.input.splitlines() or [""]
        for line in lines[:INPUT_PREVIEW_LINES]:
            print(f"    │ {visible(line, newlines=False)[:200]}")
        if len(lines) > INPUT_PREVIEW_LINES:
            print(f"    │ … ({len(lines) - INPUT_PREVIEW_LINES} more lines)")
        print(f"    vinos-routine approve {w.id}   ·   vinos-routine deny {w.id} --why '…'")
    return 0


def _describe(w: Any, routine: Any) -> str:
    from routines.safetext import one_line, visible

    action = routine.agent.action(w.action) if routine and routine.agent else None
    network = action.network if action else False
    net = "off" if network is False else "any host" if network is True else ", ".join(network)
    home = ", ".join(action.home) if action and action.home else "none"
    text = visible(w.input)
    return "\n".join(
        [
            f"#{w.id} from {w.routine} (run {w.run_id}): {one_line(w.summary)}",
            f"  action:  {w.action}",
            f"  command: {visible(w.command, newlines=False)}   (in {w.routine}'s sandbox)",
            f"  network: {net}   home: {home}",
            f"  input on stdin ({len(w.input.encode('utf-8', 'surrogatepass')):,} bytes):",
            "-----",
            text + ("" if text.endswith("\n") else "\n") + "-----",
        ]
    )


def approve(args: argparse.Namespace) -> int:
    from routines import proposals
    from routines.ledger import Ledger
    from routines.paths import paths
    from routines.registry import scan
    from supervisor.present import ask_yes

    p = paths()
    now = datetime.now(UTC)
    with Ledger(p.ledger) as ledger:
        proposals.expire(ledger, now)
        found = proposals.get(ledger, args.id)
        if found is None:
            return die(f"no proposal #{args.id} (see: vinos-routine pending)")
        entry = scan(p).get(found.routine)
        routine = entry.routine if entry is not None and entry.valid else None
        current = proposals.fingerprint(routine.text) if routine is not None else None
        if current != found.fingerprint:
            proposals.invalidate(ledger, found.routine, current, now, only=found.id)
            found = proposals.get(ledger, args.id) or found
    if found.state != "waiting":
        return die(f"proposal #{found.id} cannot be approved: {_state_words(found)}")
    print(_describe(found, routine))
    if not args.yes:
        if not sys.stdin.isatty():
            return die("not on a terminal: add --yes to approve without the question", 2)
        if not ask_yes(f"Run {found.action} for {found.routine} now?", default=False):
            print("not approved; it still waits")
            return 1
    sys.stdout.flush()
    sys.stderr.flush()
    return _exec_action(found.id)


def _state_words(found: Any) -> str:
    by = f" by {found.decided_by}" if found.decided_by else ""
    when = f" at {found.decided_at}" if found.decided_at else ""
    return {
        "running": f"it was already approved{by}{when} and is running",
        "done": f"it was already approved{by}{when} and ran (exit status {found.exit_status})",
        "denied": f"it was denied{when}",
        "expired": f"it expired at {found.expires_at}",
        "invalidated": "it is invalidated: its routine file was edited since it was proposed",
    }.get(str(found.state), str(found.state))


def _exec_action(proposal_id: int) -> int:
    from supervisor.approvals import action_argv

    argv = action_argv(proposal_id)
    root = str(Path(__file__).resolve().parent.parent.parent)
    env = dict(os.environ)
    rest = [x for x in env.get("PYTHONPATH", "").split(os.pathsep) if x and x != root]
    env["PYTHONPATH"] = os.pathsep.join([root, *rest])
    os.execve(argv[0], argv, env)


def deny(args: argparse.Namespace) -> int:
    from routines import proposals
    from routines.ledger import Ledger
    from routines.paths import paths
    from routines.safetext import one_line

    now = datetime.now(UTC)
    with Ledger(paths().ledger) as ledger:
        proposals.expire(ledger, now)
        found, why = proposals.deny(ledger, args.id, why=args.why.strip()[:500], now=now)
    if found is None:
        return die(f"no proposal #{args.id} (see: vinos-routine pending)")
    if why is not None:
        return die(f"proposal #{found.id} cannot be denied: {_state_words(found)}")
    print(f"denied #{found.id} ({one_line(found.routine)} · {one_line(found.action)})")
    print(f"  {found.routine}'s next run is told" + (f": {one_line(args.why)}" if args.why else ""))
    return 0
