"""Small pieces several commands share: finding a routine by name, the parser helper, and
whether the ledger is gone beside a live daemon (reaching the daemon is supervisor.cli.client's
`try_daemon`, which the views use too)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from routines.spec import Routine
from routines.spec.paths import Paths, paths
from routines.spec.registry import Entry, Registry
from supervisor.cli.present import die

__all__ = [
    "add_parser",
    "die",
    "find_entry",
    "ledger_gone_beside_daemon",
    "silence_stdout",
]


def add_parser(sub: Any, name: str, help: str, example: str, **kw: Any) -> argparse.ArgumentParser:
    """A subcommand parser whose --help ends with an example."""
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        help=help,
        description=help[0].upper() + help[1:] + ".",
        epilog="example:\n" + example,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        **kw,
    )
    return parser


def silence_stdout() -> None:
    """The reader of stdout went away (`vinos-routine run NAME | head -3`): send whatever is still
    printed to /dev/null, so that neither a later print nor the interpreter's last flush fails
    (Python ignores SIGPIPE and raises BrokenPipeError instead). What the command does goes on: a
    run is still run to its end and recorded
    (test_reliability_pipe.py::test_a_closed_stdout_ends_the_stream_not_the_run)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


class NoSuchRoutine(LookupError):
    pass


class InvalidRoutine(NoSuchRoutine):
    """The routine exists but its file is invalid: there is no routine to act on."""


def find_entry(name: str, p: Paths | None = None) -> tuple[Entry, Registry]:
    """The registry entry for `name`; NoSuchRoutine names the closest routines."""
    from routines.spec.registry import scan

    registry = scan(p or paths())
    entry = registry.get(name)
    if entry is None:
        raise NoSuchRoutine(registry.unknown(name))
    return entry, registry


def find_routine(name: str, p: Paths, *, fix: str = "; fix it first") -> tuple[Entry, Routine]:
    """The entry for `name` and its routine; NoSuchRoutine when there is none, InvalidRoutine
    (naming the file's errors, after `fix`) when its file is invalid."""
    entry, _ = find_entry(name, p)
    if entry.routine is None:
        raise InvalidRoutine(f"{name} is invalid{fix}:\n" + "\n".join(map(str, entry.errors)))
    return entry, entry.routine


def ledger_gone_beside_daemon(p: Paths) -> str | None:
    """Why this command must not open the ledger: it is missing while a daemon holds its
    lock (the state dir was deleted under it). Opening it would create a second, empty ledger
    beside the live daemon's, and with it a second run fence.

    On a fleet the ledger is the fleet's database: this machine's file is not the daemon's
    ledger (a machine that joined with none never has one), so its absence says nothing
    (test_reliability_lost.py::test_a_deleted_routines_dir_stops_scheduling_and_no_second_ledger_appears;
    tests/fleet/test_fleet_cli.py, a fresh fleet machine)."""
    if p.ledger.exists():
        return None
    from supervisor.fleet.view import config_or_default

    if config_or_default(p).fleet is not None:
        return None
    from supervisor.cli.client import daemon_locks, lock_holder  # only now: it costs ~10 ms

    holder = lock_holder(daemon_locks(p))
    if holder is None:
        return None
    return (
        f"the ledger {p.ledger} is gone, but the daemon (pid {holder or '?'}) is still "
        "running on it, so no new ledger is created beside it. Move the file back if it was "
        "moved, or restart the daemon (systemctl --user restart vinos-routined): it then "
        "uses the ledger in place, or starts a new one"
    )
