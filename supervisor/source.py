"""Where a read command (`list`, `status`, `history`, `cost`) takes its routines, its ledger
and its environment from: the files, the ledger file and this process's environment, or,
while the daemon answers a thin client (supervisor/control/answers.py), the daemon's parsed
registry,
its open ledger and the environment the client sent.

The commands are the same code either way, so what they print is the same either way
(tests/supervisor/test_thin_client.py pins it byte for byte). Only this module knows which it is.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from routines.spec.paths import Paths
    from routines.spec.registry import Registry

__all__ = ["BorrowedLedger", "Source", "current", "environ", "known_fire", "scan", "serving"]


@dataclass(frozen=True, slots=True)
class Source:
    """What the daemon lends a command it runs for a client."""

    registry: Callable[[], Registry]  # as `routines.spec.registry.scan` would read the files now
    ledger: Any  # the daemon's open Ledger: borrowed, never closed by the command
    status: Callable[[], dict[str, Any]]  # the `status` request's result, as on the wire
    color: bool  # what `use_color()` said in the client
    env: Mapping[str, str]  # the client's variables a command reads (PATH, the key's presence)
    # The routine's next fire after `now` when the scheduler already knows it, else None.
    known_fire: Callable[[str, Any, datetime], datetime | None] = lambda name, r, now: None


_current: contextvars.ContextVar[Source | None] = contextvars.ContextVar(
    "vinos_source", default=None
)


def current() -> Source | None:
    return _current.get()


@contextmanager
def serving(source: Source) -> Iterator[None]:
    token = _current.set(source)
    try:
        yield
    finally:
        _current.reset(token)


def scan(p: Paths) -> Registry:
    """The registry: the daemon's when it serves this command, else the files read now."""
    src = _current.get()
    if src is not None:
        return src.registry()
    from routines.spec.registry import scan as scan_files

    return scan_files(p)


def known_fire(name: str, routine: Any, now: datetime) -> datetime | None:
    """The next fire the daemon's scheduler holds for `routine`, when it is provably the one
    `compile_schedule(...).next_fire(name, now)` would compute; else None (compute it)."""
    src = _current.get()
    return None if src is None else src.known_fire(name, routine, now)


def environ() -> Mapping[str, str]:
    """The environment a command's output depends on: the client's, not the daemon's."""
    src = _current.get()
    return os.environ if src is None else src.env


class BorrowedLedger:
    """The daemon's ledger lent to one command: `closing()` it does not close it."""

    def __init__(self, ledger: Any) -> None:
        self._ledger = ledger

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ledger, name)

    def close(self) -> None:
        pass
