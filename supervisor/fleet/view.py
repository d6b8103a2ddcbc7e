"""What the CLI shows of a fleet: which ledger a command reads (the fleet's when config.toml has
[fleet]), and the fleet's picture for `fleet status` and `list` (pure, from rows already read).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from routines.ledger import Ledger
from routines.spec.config import Config, load_config_or_default
from routines.spec.paths import Paths
from routines.spec.registry import Registry

if TYPE_CHECKING:
    from routines.ledger.api import LedgerAPI

__all__ = [
    "FleetPicture",
    "cli_ledger",
    "config_or_default",
    "held_here",
    "picture",
    "requests_ledger",
]


def config_or_default(p: Paths) -> Config:
    return load_config_or_default(p.config_file)


def cli_ledger(p: Paths) -> LedgerAPI:
    """The ledger a read command uses: the fleet's with [fleet], else this machine's file."""
    config = config_or_default(p)
    if config.fleet is None:
        return Ledger(p.ledger)
    from routines.ledger.api import open_ledger  # its Protocol costs a one-machine `list` ~1 ms

    return open_ledger(p.ledger, config.fleet)


def requests_ledger(p: Paths) -> LedgerAPI | None:
    """Where a command reads and answers the requests for a person: the fleet's ledger with
    [fleet] (any machine answers them), else this machine's file; None when there is none."""
    if config_or_default(p).fleet is None and not p.ledger.exists():
        return None
    return cli_ledger(p)


def held_here(ledger: LedgerAPI, registry: Registry) -> dict[str, str]:
    """On a fleet, this machine's routines it does not run and why; {} on one machine."""
    definitions = getattr(ledger, "definitions", None)
    machine = getattr(ledger, "machine", None)
    if definitions is None or machine is None:
        return {}
    # Only on a fleet: fleetplan loads hashlib (OpenSSL), ~3 ms of every `list` otherwise.
    from supervisor.fleet.plan import definition_fingerprint, hold

    return hold(
        machine,
        ((r.name, r.machines, definition_fingerprint(r.text)) for r in registry.routines()),
        definitions(),
    )


@dataclass(frozen=True, slots=True)
class MachineView:
    machine: str
    version: str | None
    heartbeat: datetime | None
    age_sec: float | None
    up: bool
    left: bool
    host: str | None = None  # where its daemon runs, and its pid: one daemon per name
    pid: int | None = None
    conflict: str | None = None  # a second daemon under this name was refused

    def as_json(self) -> dict[str, Any]:
        return {
            "machine": self.machine,
            "version": self.version,
            "heartbeat": self.heartbeat.isoformat() if self.heartbeat else None,
            "heartbeat_age_sec": None if self.age_sec is None else round(self.age_sec, 1),
            "up": self.up,
            "left": self.left,
            "host": self.host,
            "pid": self.pid,
            "conflict": self.conflict,
        }


@dataclass(frozen=True, slots=True)
class FleetPicture:
    machine: str  # this one
    machines: tuple[MachineView, ...]
    running: Mapping[str, str]  # routine → machine
    divergent: Mapping[str, list[list[str]]]  # routine → machines grouped by definition
    held_here: Mapping[str, str]  # this machine's routines it does not run, and why

    def as_json(self) -> dict[str, Any]:
        return {
            "machine": self.machine,
            "machines": [m.as_json() for m in self.machines],
            "running": dict(self.running),
            "divergent": dict(self.divergent),
            "held_here": dict(self.held_here),
        }


def picture(
    machine: str,
    machines: list[Any],
    running: Mapping[str, str],
    published: Mapping[str, Mapping[str, str]],
    registry: Registry,
) -> FleetPicture:
    """The fleet as `fleet status` shows it, from `PgLedger.machines()`, `where_running()`
    and `definitions()` (machines up now), and this machine's registry."""
    from supervisor.fleet.plan import LEASE, definition_fingerprint, divergence, hold

    views = tuple(
        MachineView(
            m.machine,
            m.version,
            m.heartbeat,
            m.heartbeat_age_sec,
            m.left_at is None
            and m.heartbeat_age_sec is not None
            and m.heartbeat_age_sec < LEASE.total_seconds(),
            m.left_at is not None,
            m.host,
            m.pid,
            m.conflict,
        )
        for m in machines
    )
    here = {r.name: r for r in registry.routines()}
    divergent: dict[str, list[list[str]]] = {}
    for name, theirs in sorted(published.items()):
        r = here.get(name)
        fps = {**theirs, machine: definition_fingerprint(r.text)} if r else dict(theirs)
        d = divergence(name, fps, r.machines if r else ())
        if d is not None:
            divergent[name] = d.groups()
    held = hold(
        machine,
        ((r.name, r.machines, definition_fingerprint(r.text)) for r in here.values()),
        published,
    )
    return FleetPicture(machine, views, dict(running), divergent, held)
