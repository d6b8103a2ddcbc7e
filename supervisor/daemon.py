"""`vinos-routine daemon`: the per-user supervisor's loop (docs/design.md lists its invariants).

One asyncio loop. Each tick re-reads the wall clock, rescans the routine files (cheap: only
changed files are parsed; supervisor/rescan.py paces it), claims what is due
(supervisor/scheduler.py), and hands runs to the pool (supervisor/pool.py). It sleeps until
the earliest fire time or 30 s, whichever is first, or until something wakes it (a reload, a
manual run, a finished worker). Identity and locks are supervisor/owner.py's; the control
commands supervisor/handlers.py's.

Signal handlers only set flags and wake the loop; the loop does the work.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Collection
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from routines.ledger import Ledger, LedgerError, LedgerUnavailable, Unavailable
from routines.ledgerapi import MachineInUse, Store
from routines.safetext import one_line
from routines.spec.config import Config, ConfigInvalid, load_config
from routines.spec.paths import Paths, paths
from routines.spec.registry import Registry
from supervisor import housekeeping, notify, systemd
from supervisor.clock import Clock, clock_from_env
from supervisor.control import ControlServer, socket_path_problem
from supervisor.finish import Notification, remove_leftovers
from supervisor.handlers import Handlers
from supervisor.health import Ground
from supervisor.owner import (
    ROOT_REFUSAL,
    Locks,
    acquire_locks,
    held_files,
    interrupt_orphans,
    owner_alive,
    process_identity,
    version,
)
from supervisor.pool import Pool
from supervisor.rescan import Rescanner
from supervisor.scheduler import Scheduler
from supervisor.statusline import status_line
from supervisor.watch import StatusWatch

if TYPE_CHECKING:
    from routines.ledger import RoutineState
    from supervisor.fleet import Fleet
    from supervisor.fleetlocal import Offline

__all__ = ["Daemon", "main"]

log = logging.getLogger("vinos.daemon")

# At most this long between ticks (a sleep or a clock jump is noticed within it). Tests shorten
# it with VINOS_TICK_MAX_SEC so they need not wait 30 s to see a stepped clock.
TICK_MAX_SEC = float(os.environ.get("VINOS_TICK_MAX_SEC") or 30.0)
# How long SIGTERM waits for running workers; VINOS_STOP_GRACE_SEC shortens it for tests.
STOP_GRACE_SEC = float(os.environ.get("VINOS_STOP_GRACE_SEC") or 30.0)
# Routines claimed for per tick: a claim is a transaction (a few ms), so a thousand due at once
# would hold the loop for seconds; in batches, the first runs start within one batch.
CLAIM_BATCH = 8


class Daemon:
    def __init__(
        self,
        p: Paths,
        config: Config,
        clock: Clock,
        *,
        worker_argv: list[str] | None = None,
        locks: Locks | None = None,
    ) -> None:
        self.paths = p
        self.config = config
        self.clock = clock
        self.owner = process_identity()
        self.fleet: Fleet | None = None
        self.offline: Offline | None = None  # a fleet machine's runs while its database is away
        self._fleet_states: dict[str, RoutineState] = {}  # as last read, to seed `offline`
        self.ledger: Store
        if config.fleet is not None:
            from supervisor.fleet import Fleet  # psycopg is loaded only for a fleet

            self.fleet = Fleet(config.fleet, version(), clock.now, TICK_MAX_SEC)
            self.ledger = self.fleet.ledger
            from supervisor.fleetlocal import Offline

            self.offline = Offline(
                paths=p,
                config=config,
                clock=clock,
                owner=self.owner,
                machine=config.fleet.machine,
                notify=self._notify,
                wake=self.wake,
                worker_argv=worker_argv,
            )
        else:
            # Opened (created) before its identity is taken; one that cannot be opened yet (a
            # full disk, a read-only file) is a pause the ticks retry, not a failed start.
            self.ledger = Ledger(p.ledger, wait=True)
        held = held_files(p.ledger, locks)
        if self.fleet is not None:
            held.pop(p.ledger, None)  # this machine's old SQLite file is not the ledger now
        local = self.ledger if isinstance(self.ledger, Ledger) else None
        opened = (p.ledger, lambda: local.opened_id if local else None) if local else None
        self.ground = Ground(held, p.state_dir, self._notify, TICK_MAX_SEC, ledger=opened)
        self._marked = False  # runs left behind by a dead daemon are marked interrupted
        self.registry = Registry()
        self.scheduler = Scheduler(self.ledger, self.owner)
        self.pool = Pool(
            ledger=self.ledger,
            paths=p,
            config=config,
            clock=clock,
            notify=self._notify,
            on_change=self._run_ended,
            worker_argv=worker_argv,
            fence=self.fleet.book if self.fleet is not None else None,
        )
        if self.fleet is not None:
            self.fleet.on_renewal = self.pool.leases_renewed  # fenced runs (supervisor/fleet.py)
        self.refused: str | None = None  # another daemon runs under this fleet machine name
        self.watch = StatusWatch(self)  # `status --waybar --follow` (supervisor/watch.py)
        self.control = ControlServer(Handlers(self).table())
        self._wake = asyncio.Event()
        self._stopping = False
        self._reload_asked = True
        self._data_version: int | None = None
        self._rescanner = Rescanner(p, clock)
        self._external_busy: set[str] = set()
        self._last_prune: datetime | None = None
        self.started_at = clock.now()

    # -- lifecycle ------------------------------------------------------------------------

    def wake(self) -> None:
        self._wake.set()

    def _run_ended(self) -> None:
        # A run's end may have changed routine state through our own connection (the third
        # strike disables the routine), which PRAGMA data_version does not report: re-read
        # the states on the next tick (tests/supervisor/test_daemon_strikes.py).
        self._data_version = None
        self.wake()

    def ask_stop(self) -> None:
        self._stopping = True
        self.wake()

    def ask_reload(self) -> None:
        self._reload_asked = True
        self.wake()

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        previous: dict[signal.Signals, Any] = {}
        for sig, handler in (
            (signal.SIGTERM, self.ask_stop),
            (signal.SIGINT, self.ask_stop),
            (signal.SIGHUP, self.ask_reload),
        ):
            previous[sig] = signal.getsignal(sig)
            loop.add_signal_handler(sig, handler)
        try:
            fds = systemd.listen_fds()
            await self.control.start(self.paths.control_socket, fds[0] if fds else None)
            if self.pool.probes is not None:  # the sandbox probe, once for every worker
                self.pool.probes.get(self.config.sandbox.bwrap)
            self.tick()
            systemd.notify("READY=1\nSTATUS=" + self.status_line())
            watchdog = asyncio.ensure_future(self._watchdog())
            keeper = housekeeping.start(self.ledger, self.paths, self.config, self.clock)
            beat = asyncio.ensure_future(self.fleet.heartbeat(self.refuse)) if self.fleet else None
            while not self._stopping:
                timeout = self._sleep_for()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout)
                self._wake.clear()
                if not self._stopping:
                    self.tick()
            watchdog.cancel()
            keeper.cancel()
            if beat is not None:
                beat.cancel()
            systemd.notify("STOPPING=1\nSTATUS=stopping: waiting for running routines")
            self._set_title("vinos-routined: stopping")
            await self.pool.shutdown(STOP_GRACE_SEC)
            if self.offline is not None:
                if self.offline.pool is not None:
                    await self.offline.pool.shutdown(STOP_GRACE_SEC)  # copied in at next start
                self._remember_cursors()
            await self.control.close()
            try:
                self.pool.flush()
            except LedgerUnavailable as exc:
                log.error(
                    "the ledger takes no writes (%s): %d finished run(s) could not be recorded "
                    "and are lost (they show as interrupted from the next start): %s",
                    exc.reason,
                    len(self.pool.unwritten),
                    ", ".join(u.run_id for u in self.pool.unwritten),
                )
        finally:
            for sig, handler in previous.items():
                loop.remove_signal_handler(sig)
                signal.signal(sig, handler)
            self.ledger.close()
            if self.fleet is not None:
                self.fleet.close()
            if self.offline is not None:
                self.offline.close()
        return 1 if self.refused else 0

    def refuse(self, why: str) -> None:
        """Another live daemon holds this fleet machine name: stop (supervisor/fleet.py)."""
        if self.refused is None:
            self.refused = why
            self._notify(Notification("vinos-routine stopped", why, "critical"))
        self.ask_stop()

    def mark_interrupted(self) -> None:
        """Runs left queued/running by a process that is gone become `interrupted`, never replayed
        (test_daemon_crash.py::test_kill9_of_the_daemon_mid_run_then_restart)."""
        for run in interrupt_orphans(self.ledger, self.clock.now()):
            log.warning("%s: run %s interrupted (its supervisor is gone)", run.routine, run.run_id)
            remove_leftovers(self.paths, run.routine, run.run_id)  # its scratch dirs too

    def _sleep_for(self) -> float:
        now = self.clock.now()
        if self.ground.shaken:
            # A due slot that could not be claimed stays due: retry once a tick, not at once.
            # Routines run offline (a fleet's database away) keep their own times.
            offline = self.offline.next_wake() if self.offline is not None else None
            if offline is None:
                return TICK_MAX_SEC
            return max(0.01, min(TICK_MAX_SEC, (offline - now).total_seconds()))
        if self.scheduler.more_due:
            return 0.0  # claim the next batch once the loop has started the last one's runs
        nxt = self.scheduler.next_wake()
        if nxt is None:
            return TICK_MAX_SEC
        return max(0.01, min(TICK_MAX_SEC, (nxt - now).total_seconds()))

    async def _watchdog(self) -> None:
        interval = systemd.watchdog_interval()
        if interval is None:
            return
        while True:
            systemd.notify("WATCHDOG=1")
            await asyncio.sleep(interval)

    # -- the tick ---------------------------------------------------------------------------

    def tick(self) -> None:
        if not self.ground.check_held():
            self._update_status()
            return
        try:
            self._tick()
        except MachineInUse as exc:
            log.error("%s", exc)
            self.refuse(str(exc))
        except LedgerUnavailable as exc:
            self.unavailable(exc)
            if self.offline is not None and self.fleet is not None:
                self._offline(exc)
        else:
            self.ground.recovered()
        self._update_status()

    def _remember_cursors(self) -> None:
        assert self.offline is not None and self.fleet is not None
        cursors = {n: t.cursor for n, t in self.scheduler.tracked.items()}
        try:
            self.offline.remember(self.registry, self.fleet.held, self._fleet_states, cursors)
        except LedgerError as exc:  # a full disk: the next start begins from now
            log.warning("the cursors for an offline start were not kept: %s", exc)

    def _offline(self, exc: LedgerUnavailable) -> None:
        """The fleet's database away: run here what may run offline (supervisor/fleetlocal.py)."""
        assert self.offline is not None and self.fleet is not None
        now = self.clock.now()
        if exc.reason is Unavailable.UNREACHABLE:
            registry = self.registry
            if not registry.entries:  # started while the database was away: never refreshed
                from routines.spec.registry import scan

                registry = scan(self.paths, registry)
            cursors = {n: t.cursor for n, t in self.scheduler.tracked.items()}
            self.offline.start(registry, self.fleet.held, self._fleet_states, cursors, now)
        self.offline.tick(now, self._busy)

    def _tick(self) -> None:
        """One tick's work; LedgerUnavailable when the ledger took no read or write (nothing of
        it recorded: a full disk, a read-only file, an outage).
        Results kept from while the disk was full are written first, so none waits behind a
        new claim (test_reliability_full_disk.py::
        test_a_full_disk_pauses_the_daemon_and_loses_no_result)."""
        written = self.pool.flush()
        if written:
            log.info("recorded %d finished run(s) kept while the ledger took no writes", written)
        if self.offline is not None and self.fleet is not None and self.offline.pending:
            _ = self.fleet.ledger.data_version  # LedgerUnavailable while it is still away
            self.offline.back(self.fleet.ledger, self.clock.now())  # DRAINING meanwhile
            self._data_version = None  # the copy moved cursors: read the states again
        if not self._marked:
            self.mark_interrupted()
            self._marked = True
        now = self.clock.now()
        self.refresh()
        for pending in self.scheduler.due(now, self._busy, CLAIM_BATCH):
            self.pool.enqueue(pending)
        if self.scheduler.full is not None:
            raise self.scheduler.full
        if self._last_prune is None or now - self._last_prune > timedelta(hours=24):
            self.ledger.prune_claims(now, self.config.ledger.keep_runs_max)
            self._last_prune = now

    def unavailable(self, exc: LedgerUnavailable) -> None:
        # Re-read states and re-sync next tick: a sync may have stopped half-way. A fleet's
        # database out of reach pauses alike (fail closed).
        self._data_version = None
        self.ground.unavailable(exc)

    def refresh(self, rescan: bool = False) -> bool:
        """Rescan files and, if another process wrote the ledger, its states. True if changed."""
        now = self.clock.now()
        force = rescan or self._reload_asked
        if self._reload_asked:
            self._reload_asked = False
            try:
                self.config = load_config(self.paths.config_file)
                self.pool.config = self.config
            except ConfigInvalid as exc:
                log.error("config.toml is invalid; keeping the previous settings:\n%s", exc)
        registry = self._rescanner.scan(self.registry, force)
        version = self.ledger.data_version
        files_changed = registry.entries != self.registry.entries
        ledger_changed = version != self._data_version
        if not files_changed and not ledger_changed:
            return False
        previous = self.registry
        self.registry = registry
        self._data_version = version
        held: Collection[str] = ()
        if self.fleet is not None:
            self.fleet.refresh(registry)  # publish definitions; hold pinned and divergent ones
            held = self.fleet.held
        states = self.ledger.states()
        if self.fleet is not None:
            self._fleet_states = states
        self._external_busy = {
            a.routine
            for a in self.ledger.active_runs()
            if a.owner_pid != self.owner[0] and owner_alive(a.owner_pid, a.owner_started)
        }
        if self.fleet is not None:
            self._external_busy |= set(self.fleet.elsewhere)  # overlap is fleet-wide
        for name, why in self.scheduler.sync(registry, states, now, held).items():
            self.pool.drop_queued(name, why)
        for name, entry in registry.entries.items():
            if entry.stale and previous.get(name) is not entry:  # once per bad edit
                log.warning(
                    "%s: file invalid, keeping the last good version:\n%s",
                    one_line(name),
                    "\n".join(one_line(str(p)) for p in entry.errors),
                )
        self.pool.admit()
        return True

    def _busy(self, name: str) -> bool:
        if self.offline is not None and self.offline.busy(name):
            return True
        return self.pool.busy(name) or name in self._external_busy

    def force_reload(self) -> None:
        """Re-read config.toml, the files and the ledger's states now (reload, enable)."""
        self._reload_asked = True
        self._data_version = None
        self.tick()

    # -- status -----------------------------------------------------------------------------

    def status_line(self) -> str:
        return status_line(
            running=len(self.pool.running),
            queued=len(self.pool.queue),
            next_fires=self.scheduler.next_fires()[:1],
            now=self.clock.now(),
            health=self.ground.health,
            reason=self.ground.reason,
            unwritten=len(self.pool.unwritten),
        )

    def _update_status(self) -> None:
        line = self.status_line()
        self.watch.after_tick()
        systemd.notify("STATUS=" + line)
        self._set_title("vinos-routined: " + line)

    @staticmethod
    def _set_title(title: str) -> None:
        with contextlib.suppress(Exception):
            import setproctitle

            setproctitle.setproctitle(title)

    def _notify(self, note: Notification) -> None:
        loop = asyncio.get_running_loop()
        loop.run_in_executor(None, notify.send, note.title, note.body, note.urgency)


def main(*, worker_argv: list[str] | None = None) -> int:
    """Run the daemon in the foreground until SIGTERM/SIGINT."""
    if os.geteuid() == 0:
        print(ROOT_REFUSAL, file=sys.stderr)
        return 1
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(levelname)s %(name)s: %(message)s",
    )
    p = paths()
    try:
        config = load_config(p.config_file)
    except ConfigInvalid as exc:
        print(f"vinos-routine: config.toml is invalid:\n{exc}", file=sys.stderr)
        return 1
    try:
        locks = acquire_locks(p)
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        return 1
    problem = socket_path_problem(p.control_socket)
    if problem and not os.environ.get("LISTEN_FDS"):  # socket activation binds it for us
        print(f"vinos-routine: {problem}", file=sys.stderr)
        return 1
    try:
        daemon = Daemon(p, config, clock_from_env(), worker_argv=worker_argv, locks=locks)
    except LedgerError as exc:
        print(f"vinos-routine: {exc}", file=sys.stderr)
        return 1
    if daemon.fleet is not None:
        from supervisor.fleet import START_DEADLINE_SEC

        try:  # one daemon per fleet machine name; while the database is away, at its return
            daemon.fleet.join(wait=START_DEADLINE_SEC)
        except MachineInUse as exc:
            print(f"vinos-routine: {exc}", file=sys.stderr)
            daemon.ledger.close()
            daemon.fleet.close()
            return 1
        except LedgerUnavailable:
            pass  # an outage at start: the loop waits for the database, as for any outage
    log.info("vinos-routine daemon %s started for %s (pid %d)", version(), p.home, os.getpid())
    try:
        return asyncio.run(daemon.run())
    finally:
        for f in locks.files:
            f.close()
