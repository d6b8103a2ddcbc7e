"""`vinos-routine remove NAME`: delete a user routine's file and its workspace; its history
stays.

Only a file in ~/.vinos/routines/ is yours to delete: a system routine (/etc/vinos/routines)
can be overridden (`edit` writes your copy) or turned off (`disable`), and `remove` says so.
The routine's workspace (routines/workspace/NAME, what its shell tools kept between runs) goes
with it, whatever modes they set in it: nothing a sandbox wrote outlives its routine, and a
system routine of the same name taking its place again must not find files the removed one
planted. The ledger's rows, the run logs and the outputs in state/NAME/ are kept. On a
terminal it asks first; without one it needs `--yes`, which does not ask. A running daemon
reloads: a run of NAME still waiting in its queue is dropped (recorded `skipped`), one
already running finishes (a shell call it makes after the removal starts in a new, empty
workspace, which `remove` does not see again: the routine is gone by then).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from routines.spec.paths import Paths
from supervisor.cli.commands.common import NoSuchRoutine, add_parser, die, find_entry

__all__ = ["register"]


def register(sub: Any) -> None:
    p = add_parser(
        sub,
        "remove",
        "delete a user routine's file and its workspace (its history is kept)",
        "  vinos-routine remove old-digest\n  vinos-routine remove old-digest --yes\n",
    )
    p.add_argument("name", help="routine name")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask first")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from routines.spec import Origin
    from routines.spec.paths import paths
    from supervisor.cli.client import DaemonError, try_daemon
    from supervisor.cli.present import ask_yes, visible

    p = paths()
    try:
        entry, _ = find_entry(args.name, p)
    except NoSuchRoutine as exc:
        return die(str(exc))
    name = entry.name
    if entry.origin is Origin.SYSTEM:
        return die(
            f"{name} is a system routine ({entry.path}) and cannot be removed: turn it off with "
            f"`vinos-routine disable {name}`, or override it with `vinos-routine edit {name}` "
            "(your copy goes into ~/.vinos/routines/)"
        )
    after = (
        f"; the system routine {entry.overrides} takes its place again"
        if entry.overrides is not None
        else ""
    )
    workspace = p.workspace(name)
    also = f" and its workspace {visible(str(workspace))}" if workspace.is_dir() else ""
    if not args.yes and not sys.stdin.isatty():
        # Nobody to ask: a script must say --yes, as for `approve` (a pipe is no consent).
        return die(f"not on a terminal: add --yes to remove {name} without the question", 2)
    if not args.yes:
        question = f"Remove {visible(str(entry.path))}{also}{after}? Its history is kept."
        if not ask_yes(question, default=False):
            print("nothing removed")
            return 1
    try:
        entry.path.unlink()
    except FileNotFoundError:
        return die(f"{entry.path} is already gone")
    except OSError as exc:
        return die(f"cannot remove {entry.path}: {exc.strerror or exc}")
    print(f"removed {entry.path}{after}")
    _forget_override(p, name)
    status = _remove_workspace(workspace)
    print(f"  its history and outputs stay: vinos-routine history {name}; {p.routine_state(name)}")
    client = try_daemon(p)
    if client is not None:
        with client:
            try:
                client.request("reload")
            except DaemonError as exc:
                print(f"warning: the daemon did not reload: {exc}")
    return status


def _forget_override(p: Paths, name: str) -> None:
    """An `enable`/`disable` of the removed file dies with it: whatever file appears under
    the name next (a draft, the system routine again) starts from what it says
    (supervisor/engine/toggle.py; the binding to the file holds this too, this keeps no row
    behind)."""
    from contextlib import closing

    from supervisor.fleet.view import cli_ledger

    with closing(cli_ledger(p)) as ledger:
        ledger.clear_override(name)


def _remove_workspace(workspace: Path) -> int:
    """Remove the routine's workspace, saying what went; 1 when some of it stays."""
    from routines.store import remove_tree
    from supervisor.cli.present import visible

    try:
        gone = remove_tree(workspace)
    except OSError as exc:
        print(
            f"vinos-routine: its workspace {visible(str(workspace))} could not be removed: "
            f"{visible(str(exc))}",
            file=sys.stderr,
        )
        return 1
    if gone:
        files = gone - 1  # the workspace folder itself
        print(f"removed its workspace {visible(str(workspace))} ({files} files and folders)")
    return 0
