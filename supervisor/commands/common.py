"""Small pieces several commands share: finding a routine by name, reaching the daemon."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from routines.paths import Paths, paths
from routines.registry import Entry, Registry, scan

__all__ = ["add_parser", "die", "find_entry", "try_daemon"]


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


def die(message: str, code: int = 1) -> int:
    """Print an error (after what stdout holds, so a piped `2>&1` reads in order); the code."""
    sys.stdout.flush()
    print(f"vinos-routine: {message}", file=sys.stderr)
    return code


class NoSuchRoutine(LookupError):
    pass


def find_entry(name: str, p: Paths | None = None) -> tuple[Entry, Registry]:
    """The registry entry for `name`; NoSuchRoutine names the closest routines."""
    registry = scan(p or paths())
    entry = registry.get(name)
    if entry is None:
        raise NoSuchRoutine(registry.unknown(name))
    return entry, registry


def try_daemon(p: Paths | None = None) -> Any:
    """A connected control client, or None when the daemon is not running."""
    from supervisor.client import DaemonNotRunning, connect

    try:
        return connect((p or paths()).control_socket)
    except DaemonNotRunning:
        return None
