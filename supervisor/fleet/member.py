"""The daemon's side of a fleet (config.toml [fleet]): it registers the machine (one daemon
per machine name), publishes its routines' definitions, holds back the routines it must not
run here (pinned elsewhere, or divergent), and renews its runs' leases while ending the runs
of machines that stopped.

Fencing: each leased run's worker holds "yours until T" (LeaseBook.deadline, moved on by
each renewal, supervisor/fleet/plan.py `Fence`); a renewal that finds a lease gone has the
pool stop that run at once (`on_renewal`).

Threads: the ledger's calls are synchronous psycopg. The loop's calls (claims, run rows) are
short statements on one connection, each under a client-side deadline (LOOP_DEADLINE_SEC:
routines/ledger/postgres.py), and skipped at once while the database is known to be down
(routines.ledger.postgres_open.Gate). The heartbeat, the one call made whether or not there
is work, runs in a thread (asyncio.to_thread) on its own connection, so a stalled network
never delays a tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from ipc import lease_clock
from routines.ledger import LedgerUnavailable
from routines.ledger.postgres import Gate, MachineInUse, PgLedger
from routines.ledger.postgres_open import CALL_DEADLINE_SEC, FIRST_CONNECTION_SEC
from routines.safetext import one_line
from routines.spec.config import FleetSettings
from routines.spec.registry import Registry
from supervisor.fleet.plan import (
    Fence,
    definition_fingerprint,
    fence,
    hold,
    lost_leases,
    may_reap,
)
from supervisor.timings import Timings

__all__ = ["Fleet", "LeaseBook", "MachineInUse", "Renewal", "boot_id", "pid_alive"]

log = logging.getLogger("vinos.fleet")

# The loop's calls wait at most this long for the database, so the control socket answers
# within a second however the database behaves (a stalled call fails as an outage); the CLI's
# calls have the same (routines/ledger/postgres_open.py).
LOOP_DEADLINE_SEC = CALL_DEADLINE_SEC
START_DEADLINE_SEC = FIRST_CONNECTION_SEC  # the first call, before the control socket listens


@dataclass(frozen=True, slots=True)
class Renewal:
    """What one heartbeat did: when it began (lease_clock), the leases it renewed, the runs
    of other machines it ended (routine, run id, machine)."""

    began: float
    renewed: Sequence[str]
    ended: Sequence[tuple[str, str, str]]


class LeaseBook:
    """When each of this daemon's leases was made or last renewed, on lease_clock: the worker
    deadlines come from it. Written from the loop (claims) and the heartbeat's results."""

    def __init__(self, timings: Fence, clock: Callable[[], float] = lease_clock) -> None:
        self.timings = timings
        self.clock = clock
        self._lock = threading.Lock()
        self._from: dict[str, float] = {}  # run id → the instant its expiry counts from
        self._committed: dict[str, float] = {}  # run id → when its lease row was committed

    def made(self, run_id: str, before: float, after: float) -> None:
        with self._lock:
            self._from[run_id] = before
            self._committed[run_id] = after

    def renewed(self, renewal: Renewal) -> tuple[dict[str, float], list[str]]:
        """The new deadline of each renewed lease, and the leases the renewal found gone
        (forgotten here: each is reported once)."""
        with self._lock:
            lost = lost_leases(self._committed, renewal.renewed, renewal.began)
            deadlines: dict[str, float] = {}
            for run_id in renewal.renewed:
                if run_id in self._from:
                    self._from[run_id] = max(self._from[run_id], renewal.began)
                    deadlines[run_id] = self._from[run_id] + self.timings.deadline
            for run_id in lost:
                self._from.pop(run_id, None)
                self._committed.pop(run_id, None)
        return deadlines, lost

    def deadline(self, run_id: str) -> float:
        """ "Yours until" for the worker of `run_id` (a lease this book never saw counts from
        now, the latest its expiry can count from)."""
        with self._lock:
            began = self._from.get(run_id)
        return (self.clock() if began is None else began) + self.timings.deadline


class Fleet:
    def __init__(
        self,
        settings: FleetSettings,
        version: str,
        now: Callable[[], datetime],
        timings: Timings,
    ) -> None:
        self.settings = settings
        self.machine = settings.machine
        self.version = version
        self.now = now
        # Tests shorten the lease timings (a real minute is too long to wait for a lapsed lease).
        lease_sec, renew_sec = timings.fleet_lease_sec, timings.fleet_renew_sec
        tick_cap = timings.tick_max_sec
        self.timings = fence(lease_sec, renew_sec)
        self.book = LeaseBook(self.timings)
        self.instance = secrets.token_hex(8)  # this start of the daemon
        self.ledger = PgLedger(
            settings.database,
            settings.machine,
            gate=Gate(cap=tick_cap),
            lease_sec=lease_sec,
            connect=False,
            instance=self.instance,
            taken_after=self.timings.taken_after,
            deadline=LOOP_DEADLINE_SEC,
            on_lease=self.book.made,
            lease_clock=lease_clock,
        )
        # The heartbeat's own connection: used only from its thread. It retries every renewal
        # period, not every tick: the first renewal after an outage must come within a period
        # of the database's return, before any other machine may end these leases (may_reap).
        self._beat_ledger = PgLedger(
            settings.database,
            settings.machine,
            gate=Gate(cap=renew_sec),
            lease_sec=lease_sec,
            connect=False,
            instance=self.instance,
            taken_after=self.timings.taken_after,
            deadline=max(1.0, renew_sec),
        )
        # Told each renewal's new worker deadlines and the leases found gone (the pool).
        self.on_renewal: Callable[[Mapping[str, float], Iterable[str]], None] | None = None
        self.held: dict[str, str] = {}  # routine → why it is not scheduled here
        self.elsewhere: dict[str, str] = {}  # routine → the machine running it now
        self._published: dict[str, str] | None = None
        self._fingerprints: dict[str, tuple[str, str]] = {}  # name → (text, fingerprint)
        self._token: object = None  # what `held` was decided from
        self.registered = False
        # When the database is back (lease clock of the first renewal since it was away, or
        # since this start); None once may_reap's wait is over. Until then no lapsed lease
        # is ended here: their machines renew them, or write their kept results, first.
        self._back_at: float | None = None
        self._away = True  # no renewal yet (this start), or the last one failed
        # Told when a renewal succeeds after an outage: the loop writes its kept results now.
        self.on_back: Callable[[], None] | None = None

    def refresh(self, registry: Registry) -> None:
        """On the loop, each tick: publish this machine's definitions when they changed, and
        decide what is held back when they or the fleet's changed (`definitions_token`: one
        row, so an idle tick does not read every machine's fingerprints).
        LedgerUnavailable (UNREACHABLE) when the database is down."""
        if not self.registered:
            self.join()
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

    def join(self, wait: float = LOOP_DEADLINE_SEC) -> None:
        """Register this daemon under the machine name; MachineInUse while another live daemon
        holds it (on another host, or on this one with its pid alive). `wait`: the deadline
        of this call (longer at start, before the loop runs: a first connection migrates the
        schema, which must not look like an outage)."""
        deadline, self.ledger.deadline = self.ledger.deadline, wait
        try:
            self.ledger.register(
                self.version,
                os.getpid(),
                host=socket.gethostname(),
                boot_id=boot_id(),
                alive=pid_alive,
            )
        finally:
            self.ledger.deadline = deadline
        self.registered = True

    def _fingerprint(self, name: str, text: str) -> str:
        """definition_fingerprint, hashed again only when the file's text changed."""
        known = self._fingerprints.get(name)
        if known is None or known[0] is not text:
            known = self._fingerprints[name] = (text, definition_fingerprint(text))
        return known[1]

    def beat(self) -> Renewal:
        """In the heartbeat thread: renew this daemon's leases and end lapsed ones."""
        began = lease_clock()
        renewed = self._beat_ledger.renew()
        if self._away:
            self._away, self._back_at = False, began
        if not may_reap(self._back_at, began, self.timings):
            return Renewal(began, renewed, ())
        self._back_at = None
        return Renewal(began, renewed, self._beat_ledger.expire_leases(self.now()))

    async def heartbeat(self, on_refused: Callable[[str], None] | None = None) -> None:
        """Every renewal period (`timings.renew`) until cancelled; an unreachable database
        is retried next time.
        Each renewal moves its runs' worker deadlines on, and stops the runs whose lease it
        found gone (`on_renewal`)."""
        while True:
            renewal = None
            away = self._away
            try:
                renewal = await asyncio.to_thread(self.beat)
            except LedgerUnavailable:
                self._away = True
            except MachineInUse as exc:
                log.error("%s", exc)
                if on_refused is not None:
                    on_refused(str(exc))
            except Exception:
                log.exception("fleet heartbeat failed")
            if renewal is not None and away:
                # Back: the loop's connection tries at once (not after its back-off), and the
                # loop wakes to write the results it kept (Pool.flush) while these leases hold.
                self.ledger.gate.succeeded()
                if self.on_back is not None:
                    self.on_back()
            ended = renewal.ended if renewal is not None else ()
            if renewal is not None:
                deadlines, lost = self.book.renewed(renewal)
                if self.on_renewal is not None:
                    self.on_renewal(deadlines, lost)
            for routine, run_id, machine in ended:
                log.warning(
                    "%s: run %s on %s interrupted: its lease lapsed (not replayed)",
                    routine,
                    run_id,
                    machine,
                )
            await asyncio.sleep(self.timings.renew)

    def close(self) -> None:
        self.ledger.close()
        self._beat_ledger.close()


def boot_id() -> str | None:
    """This boot of this host's kernel: two daemons with one boot id share a pid space."""
    with contextlib.suppress(OSError), open("/proc/sys/kernel/random/boot_id") as f:
        return f.read().strip()
    return None


def pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # this very process: the row is left from a daemon that had its pid
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
