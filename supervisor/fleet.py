"""The daemon's side of a fleet (config.toml [fleet]): it registers the machine, publishes its
routines' definitions, holds back the routines it must not run here (pinned elsewhere, or
divergent), and renews its runs' leases while ending the runs of machines that stopped.

Threads: the ledger's calls are synchronous psycopg. The loop's calls (claims, run rows) are
short statements on one connection, bounded by connect/statement timeouts, and skipped at once
while the database is known to be down (routines.pgledger.Gate). The heartbeat, the one call
made whether or not there is work, runs in a thread (asyncio.to_thread) on its own connection,
so a stalled network never delays a tick.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from datetime import datetime

from routines.config import FleetSettings
from routines.ledgerfaults import LedgerUnavailable, Unavailable
from routines.pgledger import Gate, PgLedger
from routines.registry import Registry
from routines.safetext import one_line
from supervisor.fleetplan import LEASE, RENEW, definition_fingerprint, hold

__all__ = ["Fleet"]

log = logging.getLogger("vinos.fleet")

# Tests shorten the lease timings (a real minute is too long to wait for a lapsed lease).
RENEW_SEC = float(os.environ.get("VINOS_FLEET_RENEW_SEC") or RENEW.total_seconds())
LEASE_SEC = float(os.environ.get("VINOS_FLEET_LEASE_SEC") or LEASE.total_seconds())


class Fleet:
    def __init__(
        self,
        settings: FleetSettings,
        version: str,
        now: Callable[[], datetime],
        tick_cap: float,
    ) -> None:
        self.settings = settings
        self.machine = settings.machine
        self.version = version
        self.now = now
        self.ledger = PgLedger(
            settings.database,
            settings.machine,
            gate=Gate(cap=tick_cap),
            lease_sec=LEASE_SEC,
            connect=False,
        )
        # The heartbeat's own connection: used only from its thread.
        self._beat_ledger = PgLedger(
            settings.database,
            settings.machine,
            gate=Gate(cap=tick_cap),
            lease_sec=LEASE_SEC,
            connect=False,
        )
        self.held: dict[str, str] = {}  # routine → why it is not scheduled here
        self.elsewhere: dict[str, str] = {}  # routine → the machine running it now
        self._published: dict[str, str] | None = None
        self._fingerprints: dict[str, tuple[str, str]] = {}  # name → (text, fingerprint)
        self._token: object = None  # what `held` was decided from
        self.registered = False

    def refresh(self, registry: Registry) -> None:
        """On the loop, each tick: publish this machine's definitions when they changed, and
        decide what is held back when they or the fleet's changed (`definitions_token`: one
        row, so an idle tick does not read every machine's fingerprints).
        LedgerUnavailable (UNREACHABLE) when the database is down."""
        if not self.registered:
            self.ledger.register(self.version, os.getpid())
            self.registered = True
        routines = registry.routines()
        mine = {r.name: self._fingerprint(r.name, r.text) for r in routines}
        if mine != self._published:
            self.ledger.publish_definitions(mine)
            self._published = mine
        token = (self.ledger.definitions_token(), tuple(sorted(mine.items())))
        if token != self._token:
            published = self.ledger.definitions()
            held = hold(self.machine, ((r.name, r.machines, mine[r.name]) for r in routines),
                        published)  # fmt: skip
            for name, why in held.items():
                if self.held.get(name) != why:
                    log.warning("%s: not scheduled on %s: %s", one_line(name), self.machine, why)
            self.held = held
            self._token = token
        self.elsewhere = self.ledger.busy_elsewhere()

    def _fingerprint(self, name: str, text: str) -> str:
        """definition_fingerprint, hashed again only when the file's text changed."""
        known = self._fingerprints.get(name)
        if known is None or known[0] is not text:
            known = self._fingerprints[name] = (text, definition_fingerprint(text))
        return known[1]

    def beat(self) -> list[tuple[str, str, str]]:
        """In the heartbeat thread: renew this machine's leases and end lapsed ones."""
        self._beat_ledger.renew()
        return self._beat_ledger.expire_leases(self.now())

    async def heartbeat(self) -> None:
        """Every RENEW_SEC until cancelled; an unreachable database is retried next time."""
        while True:
            try:
                ended = await asyncio.to_thread(self.beat)
            except LedgerUnavailable:
                ended = []
            except Exception:
                log.exception("fleet heartbeat failed")
                ended = []
            for routine, run_id, machine in ended:
                log.warning(
                    "%s: run %s on %s interrupted: its lease lapsed (not replayed)",
                    routine,
                    run_id,
                    machine,
                )
            await asyncio.sleep(RENEW_SEC)

    @staticmethod
    def unreachable(exc: Exception) -> bool:
        return isinstance(exc, LedgerUnavailable) and exc.reason in (
            Unavailable.UNREACHABLE,
            Unavailable.DRAINING,
        )

    def close(self) -> None:
        self.ledger.close()
        self._beat_ledger.close()
