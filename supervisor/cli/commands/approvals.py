"""`vinos-routine pending [--json]`, `approve ID [--yes]`, `deny ID [--why TEXT]`.

A run may only *propose* a routine's declared actions (routines/proposals.py); these commands
are how the person decides. `approve` shows the exact command and the whole input, asks on a
terminal, then runs `python -m worker.actioncmd ID`, which claims the proposal (one decision
per proposal, even with two `approve` racing) and runs it in the routine's sandbox. Both then
wake a running daemon: a run paused for this answer goes on (supervisor/engine/pauses.py).

What is approved is said again right above the question (`reminder`): the action, the
command, the input's size and line count and its first lines. A long input scrolls the top
of itself out of sight, and its last screen is the model's to write (a harmless-looking
header there, `Bcc: attacker@…` thousands of lines up): on a terminal it is paged through
$PAGER instead, already escaped (routines.safetext), and the question comes after.
"""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import closing
from datetime import UTC, datetime
from typing import Any

from supervisor.cli.argtypes import whole_number
from supervisor.cli.commands.common import add_parser, die

PROPOSAL_ID = whole_number("a proposal number", 1, 2**63 - 1)  # SQLite's INTEGER

__all__ = ["fresh_waiting", "register", "reminder"]

INPUT_PREVIEW_LINES = 3
REMINDER_LINES = 5  # the input's first lines, repeated next to the question
PAGE_AFTER_LINES = 40  # a longer input is paged on a terminal, not printed


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
    p.add_argument(
        "id", type=PROPOSAL_ID, metavar="ID", help="the proposal's number (see `pending`)"
    )
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    p.set_defaults(func=approve)
    p = add_parser(
        sub,
        "deny",
        "refuse a proposed action (its routine's next run is told, with your reason)",
        '  vinos-routine deny 12 --why "too curt; keep the greeting"\n',
    )
    p.add_argument(
        "id", type=PROPOSAL_ID, metavar="ID", help="the proposal's number (see `pending`)"
    )
    p.add_argument("--why", default="", help="why, for the routine's next run")
    p.set_defaults(func=deny)


def fresh_waiting(ledger: Any, now: datetime) -> tuple[list[Any], list[Any]]:
    """(waiting proposals, those just invalidated because their routine file changed), after
    marking the expired ones."""
    from routines import proposals
    from routines.spec.paths import paths
    from routines.spec.registry import scan

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
    from routines.safetext import one_line, visible
    from routines.spec.paths import paths
    from supervisor.cli.present import print_json_lines
    from supervisor.fleet.view import cli_ledger

    now = datetime.now(UTC)
    with closing(cli_ledger(paths())) as ledger:
        waiting, stale = fresh_waiting(ledger, now)
    paused = paused_runs() if waiting else set()
    if args.json:
        rows = [
            {**w.as_json(), "state": str(w.state), "paused": w.run_id in paused} for w in waiting
        ]
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
        if w.run_id in paused:
            print(f"    needs you: run {w.run_id} is paused until you answer (by {w.expires_at})")
        if w.why:
            print(f"    (not run automatically: {one_line(w.why)})")
        lines = w.input.splitlines() or [""]
        for line in lines[:INPUT_PREVIEW_LINES]:
            print(f"    │ {_cut(visible(line, newlines=False))}")
        if len(lines) > INPUT_PREVIEW_LINES:
            print(f"    │ … ({len(lines) - INPUT_PREVIEW_LINES} more lines)")
        print(f"    vinos-routine approve {w.id}   ·   vinos-routine deny {w.id} --why '…'")
    return 0


def _head(w: Any, routine: Any) -> str:
    """Who proposed what: the action, the command, its sandbox, the input's size (pure)."""
    from routines.proposals import WRITE_ACTION
    from routines.safetext import one_line, visible

    if w.action == WRITE_ACTION:  # a write_file call a run paused at: the path, the content
        return "\n".join(
            [
                f"#{w.id} from {w.routine} (run {w.run_id}): {one_line(w.summary)}",
                f"  write:   {visible(w.command, newlines=False)}   (created or replaced whole)",
                f"  content ({_size(w.input)}):",
            ]
        )
    action = routine.agent.action(w.action) if routine and routine.agent else None
    network = action.network if action else False
    net = "off" if network is False else "any host" if network is True else ", ".join(network)
    home = ", ".join(action.home) if action and action.home else "none"
    return "\n".join(
        [
            f"#{w.id} from {w.routine} (run {w.run_id}): {one_line(w.summary)}",
            f"  action:  {one_line(w.action)}",
            f"  command: {visible(w.command, newlines=False)}   (in {w.routine}'s sandbox)",
            f"  network: {net}   home: {home}",
            f"  input on stdin ({_size(w.input)}):",
        ]
    )


def _input_block(w: Any) -> str:
    from routines.safetext import visible

    text = visible(w.input)
    return "-----\n" + text + ("" if text.endswith("\n") else "\n") + "-----"


def _size(text: str) -> str:
    size = len(text.encode("utf-8", "surrogatepass"))
    lines = len(text.splitlines())
    return f"{size:,} bytes, {lines:,} line{'' if lines == 1 else 's'}"


LINE_CUT = 200  # characters of one escaped input line shown in a preview


def _cut(shown: str) -> str:
    """An escaped line at most LINE_CUT characters long, and a marker counting the rest when
    it is longer: `To: boss` padded with spaces past the cut hid `, evil@x` without a trace
    (tests/cli/test_cli_approve_display.py::
    test_a_cut_line_says_how_much_was_cut_next_to_the_question)."""
    if len(shown) <= LINE_CUT:
        return shown
    return f"{shown[:LINE_CUT]}…(+{len(shown) - LINE_CUT:,} chars)"


def reminder(w: Any) -> str:
    """What is approved, said again right above the question (pure): the action, the command,
    the input's size and line count, and its first lines, each escaped to one line."""
    from routines.proposals import WRITE_ACTION
    from routines.safetext import one_line, visible

    lines = w.input.splitlines() or [""]
    what = "write:  " if w.action == WRITE_ACTION else "command:"
    out = [
        f"approving #{w.id}: {one_line(w.action)} for {one_line(w.routine)}",
        f"  {what} {visible(w.command, newlines=False)}",
        f"  input:   {_size(w.input)}; it begins:",
    ]
    out += [f"    │ {_cut(visible(line, newlines=False))}" for line in lines[:REMINDER_LINES]]
    if len(lines) > REMINDER_LINES:
        out.append(f"    │ … and {len(lines) - REMINDER_LINES:,} more lines")
    return "\n".join(out)


def page(text: str) -> bool:
    """Show `text` (escaped already: no byte of it can drive the terminal) through $PAGER;
    False when no pager could start, and the caller prints it instead."""
    import shlex
    import shutil
    import subprocess

    pager = os.environ.get("PAGER") or ("less" if shutil.which("less") else "more")
    try:
        argv = shlex.split(pager)
    except ValueError:
        return False
    # LESSSECURE: no shell escape, no editor, no log file from inside less.
    env = {**os.environ, "LESSSECURE": "1"}
    env.setdefault("LESS", "FX")
    try:
        subprocess.run(argv, input=text.encode("utf-8", "replace"), env=env, check=False)
    except OSError:
        return False
    return True


def approve(args: argparse.Namespace) -> int:
    from routines import proposals
    from routines.spec.paths import paths
    from routines.spec.registry import scan
    from supervisor.cli.present import ask_yes
    from supervisor.fleet.view import cli_ledger

    p = paths()
    now = datetime.now(UTC)
    with closing(cli_ledger(p)) as ledger:
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
    long = len(found.input.splitlines()) > PAGE_AFTER_LINES
    print(_head(found, routine), flush=True)
    if not args.yes and long and sys.stdin.isatty() and sys.stdout.isatty():
        from routines.safetext import visible

        print("  (paged: leave the pager to answer)", flush=True)
        if not page(visible(found.input)):
            print(_input_block(found))
    else:
        print(_input_block(found))
    print(reminder(found))
    if not args.yes:
        if not sys.stdin.isatty():
            return die("not on a terminal: add --yes to approve without the question", 2)
        if not ask_yes(f"Run {found.action} for {found.routine} now?", default=False):
            print("not approved; it still waits")
            return 1
    sys.stdout.flush()
    sys.stderr.flush()
    code = _exec_action(found.id, proposals.fingerprint(found.input))
    if _paused(found):
        print(f"  {found.routine}'s paused run {found.run_id} goes on with this answer")
    return code


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


def _exec_action(proposal_id: int, shown: str) -> int:
    """Run the action runner (python -m worker.actioncmd) on the input the person was shown
    (`shown`, its fingerprint) and return its exit status, then
    tell a running daemon, which resumes the run that paused for it
    (supervisor/engine/pauses.py)."""
    import subprocess

    from supervisor.engine.approvals import action_argv

    argv = action_argv(proposal_id, shown=shown)
    from supervisor.engine.spawn import package_root  # one place knows where our packages are

    root = package_root()
    env = dict(os.environ)
    rest = [x for x in env.get("PYTHONPATH", "").split(os.pathsep) if x and x != root]
    env["PYTHONPATH"] = os.pathsep.join([root, *rest])
    code = subprocess.call(argv, env=env)
    _tell_daemon()
    return code


def _tell_daemon() -> None:
    """Wake a running daemon so a run paused for this answer resumes now, not on its next
    tick (it would find the answer then too: nothing depends on this arriving)."""
    import contextlib

    from routines.spec.paths import paths
    from supervisor.cli.client import DaemonError, try_daemon

    with contextlib.suppress(DaemonError, OSError):
        client = try_daemon(paths())
        if client is not None:
            with client:
                client.request("reload")


def deny(args: argparse.Namespace) -> int:
    from routines import proposals
    from routines.safetext import one_line
    from routines.spec.paths import paths
    from supervisor.fleet.view import cli_ledger

    now = datetime.now(UTC)
    with closing(cli_ledger(paths())) as ledger:
        proposals.expire(ledger, now)
        found, why = proposals.deny(ledger, args.id, why=args.why.strip()[:500], now=now)
    if found is None:
        return die(f"no proposal #{args.id} (see: vinos-routine pending)")
    if why is not None:
        return die(f"proposal #{found.id} cannot be denied: {_state_words(found)}")
    print(f"denied #{found.id} ({one_line(found.routine)} · {one_line(found.action)})")
    told = (
        "its paused run goes on, told" if _paused(found) else f"{found.routine}'s next run is told"
    )
    print(f"  {told}" + (f": {one_line(args.why)}" if args.why else ""))
    _tell_daemon()
    return 0


def _paused(found: Any) -> bool:
    """Whether the run that proposed `found` paused for it (needs_you): its answer resumes it."""

    from routines.ledger import LedgerError
    from routines.runs import RunStatus
    from routines.spec.paths import paths
    from supervisor.fleet.view import cli_ledger

    try:
        with closing(cli_ledger(paths())) as ledger:
            row = ledger.run(found.run_id)
    except (LedgerError, OSError):  # a fleet database out of reach: only wording depends on it
        return False
    return row is not None and row.status in (RunStatus.NEEDS_YOU, RunStatus.RESUMED)


def paused_runs() -> set[str]:
    """The runs that wait for a person now (`pending` marks their requests)."""
    from contextlib import closing

    from routines.ledger import LedgerError
    from routines.spec.paths import paths
    from supervisor.fleet.view import cli_ledger

    try:
        with closing(cli_ledger(paths())) as ledger:
            return {r.run_id for r in ledger.paused_runs()}
    except (LedgerError, OSError):
        return set()
