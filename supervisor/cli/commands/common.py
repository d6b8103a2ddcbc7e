"""Small pieces several commands share: finding a routine by name, the parser helper, and
whether the ledger is gone beside a live daemon (reaching the daemon is supervisor.cli.client's
`try_daemon`, which the views use too)."""

from __future__ import annotations

import argparse
from typing import Any

from routines.spec import Routine
from routines.spec.paths import Paths, paths
from routines.spec.registry import Entry, Registry
from supervisor.cli.guarded import ledger_gone_beside_daemon, silence_stdout
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
