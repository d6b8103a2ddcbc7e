"""`vinos-routine daemon`: the per-user supervisor's loop (docs/design.md lists its invariants).

One asyncio loop. Each tick re-reads the wall clock, rescans the routine files (cheap: only
changed files are parsed; supervisor/engine/rescan.py paces it), claims what is due
(supervisor/engine/scheduler.py), and hands runs to the pool (supervisor/engine/pool.py). It sleeps
until
the earliest fire time or 30 s, whichever is first, or until something wakes it (a reload, a
manual run, a finished worker). Identity and locks are supervisor/engine/owner.py's; the control
commands supervisor/control/handlers.py's. Where runs are recorded and fenced (this machine, or a
fleet) is the Site's (supervisor/engine/site.py), chosen once in `compose()`: the loop never asks
which. With [fleet], the fleet's own part (supervisor/fleet/site.py `Member`: join, heartbeat,
offline mode, its status) runs beside the loop, which calls it when it is there.

Signal handlers only set flags and wake the loop; the loop does the work.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
import sys
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from routines.ledger import LedgerError, LedgerUnavailable, is_enabled
from routines.ledger.api import MachineInUse
from routines.safetext import one_line
from routines.spec.config import Config, ConfigInvalid, load_config
from routines.spec.paths import Paths, paths
from routines.spec.registry import Registry
from supervisor.control.api import Refused
from supervisor.control.handlers import Handlers
from supervisor.control.sandboxsock import SOCKET_NAME, SandboxServer
from supervisor.control.server import ControlServer, socket_path_problem
from supervisor.control.snapshot import status_reply
from supervisor.control.watch import StatusWatch
from supervisor.engine import (
    approvals,
    housekeeping,
    notify,
    pauses,
    pausestore,
    phone,
    runcgroup,
    systemd,
)
from supervisor.engine.clock import Clock, clock_from
from supervisor.engine.filewatch import FileWatch
from supervisor.engine.finish import Finished, Notification, remove_leftovers
from supervisor.engine.forkserver import ForkServer, forkserver_for, keep_forkserver, needs_sdk
from supervisor.engine.health import Ground, Health
from supervisor.engine.owner import (
    ROOT_REFUSAL,
    Locks,
    acquire_locks,
    interrupt_orphans,
    process_identity,
    version,
)
from supervisor.engine.pool import Busy, Pool
from supervisor.engine.rescan import Rescanner
from supervisor.engine.scheduler import Listener, Pending, Scheduler
from supervisor.engine.site import LocalSite, Site
from supervisor.engine.spawn import Spawner, WorkerSpawner, worker_env
from supervisor.engine.statusline import status_line
from supervisor.engine.toggle import file_edits, set_enabled, unbound
from supervisor.engine.triggers import TriggerBook, fire_event
from supervisor.timings import Timings, TimingsInvalid

if TYPE_CHECKING:
    from ipc import RunReply, StatusReply
    from routines.ledger import RoutineState
    from routines.spec import Routine
    from supervisor.engine.reply import ReplyTo
    from supervisor.fleet.site import Member

__all__ = ["Daemon", "compose", "main", "stop_line"]

log = logging.getLogger("vinos.daemon")

# Routines claimed for per tick: a claim is a transaction (a few ms), so a thousand due at once
# would hold the loop for seconds; in batches, the first runs start within one batch.
CLAIM_BATCH = 8


class Daemon:
    """The loop. Built by `main()`, and in tests with a fake clock, a FakeSpawner and a Site
    of their own (tests/supervisor/test_daemon_tick.py drives `tick` in-process)."""

    def __init__(
        self,
        p: Paths,
        config: Config,
        *,
        clock: Clock,
        site: Site,
        spawner: Spawner,
        timings: Timings,
        notify: Callable[[Notification], None] | None = None,
        publish: Callable[[str], None] | None = None,
        forks: ForkServer | None = None,
    ) -> None:
        self.paths = p
        self.config = config
        self.clock = clock
        self.site = site
        self.timings = timings
        self.owner = process_identity()
        self.states: dict[str, RoutineState] = {}  # as last read (a fleet's offline mode too)
        self.ledger = site.ledger
        # Desktop notifications, sent off the loop; a test passes a list's append.
        self._desktop: Callable[[Notification], None] = notify or _notify_desktop
        self._notify: Callable[[Notification], None] = self.tell
        # The status line after each tick: systemd's STATUS= and the process title.
        self._publish: Callable[[str], None] = publish or _publish_status
        guarded = site.guarded()
        self.ground = Ground(
            guarded.held, p.state_dir, self._notify, timings.tick_max_sec, ledger=guarded.ledger
        )
        self._marked = False  # runs left behind by a dead daemon are marked interrupted
        self.registry = Registry()
        self.scheduler = Scheduler(self.ledger, self.owner)
        self.triggers = TriggerBook(self.ledger, self.owner)  # after, watch, fire
        self.files: FileWatch | None = None  # `watch` globs' inotify, once the loop runs
        # The spawner's forkserver, kept up while a run is near or the daemon was used lately
        # (supervisor/engine/forkserver.py); its start counts as a use: a person who just started
        # the daemon is about to try a routine.
        self.forks = forks
        self._last_use = clock.now()
        self.pool = Pool(
            ledger=self.ledger,
            paths=p,
            config=config,
            clock=clock,
            notify=self._notify,
            on_change=self._run_ended,
            spawner=spawner,
            fence=site.fence,
        )
        # A fleet machine's own part (supervisor/fleet/site.py), set by `compose` with [fleet].
        self.member: Member | None = None
        self.refused: str | None = None  # another daemon holds this daemon's identity
        self.watch = StatusWatch(self)  # `status --waybar --follow` (supervisor/control/watch.py)
        handlers = Handlers(self, self.watch).table()  # they see the Controlled protocol
        self.control = ControlServer(handlers, idle_sec=timings.control_idle_sec)
        # `sandbox NAME -- CMD` forked by the forkserver (supervisor/control/sandboxsock.py).
        self.sandboxes = None if forks is None else SandboxServer(forks, self._sandbox_used)
        self._wake = asyncio.Event()
        self._stopping = False
        self._stop_why = ""
        self._reload_asked = True  # rescan the files on the next tick
        self._config_asked = False  # re-read config.toml first thing on the next tick
        self._data_version: int | None = None
        self._rescanner = Rescanner(p, clock)
        # Routines with a run that waits for a person → that run (supervisor/engine/pauses.py).
        self._waiting: dict[str, str] = {}
        self._last_prune: datetime | None = None
        self.keeper: housekeeping.Housekeeper | None = None  # set when `run` starts it
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

    def ask_stop(self, why: str = "asked to stop") -> None:
        if not self._stopping:
            self._stop_why = why
        self._stopping = True
        self.wake()

    def ask_reload(self) -> None:
        self._reload_asked = self._config_asked = True
        self.wake()

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        previous: dict[signal.Signals, Any] = {}
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            previous[sig] = signal.getsignal(sig)
            if sig is signal.SIGHUP:
                loop.add_signal_handler(sig, self.ask_reload)
            else:
                loop.add_signal_handler(sig, self.ask_stop, sig.name)
        try:
            fds = systemd.listen_fds()
            await self.control.start(self.paths.control_socket, fds[0] if fds else None)
            if self.sandboxes is not None:
                await self.sandboxes.start(self.paths.runtime_dir / SOCKET_NAME)
            if self.pool.probes is not None:  # the sandbox probe, once for every worker
                self.pool.probes.get(self.config.sandbox.bwrap)
            self.files = FileWatch(self.triggers, self.wake, home=str(Path.home()))
            self.tick()
            systemd.notify("READY=1\nSTATUS=" + self.status_line())
            watchdog = asyncio.ensure_future(self._watchdog())
            self.keeper, keeper = housekeeping.start(
                self.ledger,
                self.paths,
                self.config,
                self.clock,
                self.timings.housekeeping_delay_sec,
            )
            member = self.member
            own = member.tasks(self.refuse) if member is not None else []
            tasks = [asyncio.ensure_future(t) for t in own]
            while not self._stopping:
                timeout = self._sleep_for()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout)
                self._wake.clear()
                if not self._stopping:
                    self.tick()
            watchdog.cancel()
            keeper.cancel()
            if self.files is not None:
                self.files.close()
            for task in tasks:
                task.cancel()
            await self._shut_down()
        finally:
            for sig, handler in previous.items():
                loop.remove_signal_handler(sig)
                signal.signal(sig, handler)
            self.site.close()
            if self.member is not None:
                self.member.close()
        log.info("vinos-routine daemon stopped (pid %d)", os.getpid())
        return 1 if self.refused else 0

    async def _shut_down(self) -> None:
        """The runs given their grace, then the fleet member, the sandbox calls, the
        forkserver and the control socket, in that order; then what is unwritten, said."""
        systemd.notify("STOPPING=1\nSTATUS=stopping: waiting for running routines")
        _set_title("vinos-routined: stopping")
        # A stop is said in the log, as a start is: a journal that ends without a line
        # reads as a crash (tests/supervisor/test_daemon_systemd.py::
        # test_a_foreground_daemon_says_why_and_when_it_stops).
        log.info("%s", stop_line(self._stop_why, len(self.pool.running), self.timings))
        await self.pool.shutdown(self.timings.stop_grace_sec)  # offline runs too
        if self.member is not None:
            self.member.stop()
        if self.sandboxes is not None:
            await self.sandboxes.close()  # its calls are the forkserver's children too
        if self.forks is not None:
            # After the workers: they die with it.
            await self.forks.close()
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

    def refuse(self, why: str) -> None:
        """Another live daemon holds this daemon's identity (a fleet machine name): stop."""
        if self.refused is None:
            self.refused = why
            self._notify(Notification("vinos-routine stopped", why, "critical"))
        self.ask_stop("another daemon holds this daemon's identity")

    def mark_interrupted(self) -> None:
        """Runs left queued/running by a process that is gone become `interrupted`, never replayed
        (test_daemon_crash.py::test_kill9_of_the_daemon_mid_run_then_restart)."""
        for run in interrupt_orphans(self.ledger, self.clock.now()):
            log.warning("%s: run %s interrupted (its supervisor is gone)", run.routine, run.run_id)
            remove_leftovers(self.paths, run.routine, run.run_id)  # its scratch dirs too

    def _sleep_for(self) -> float:
        now = self.clock.now()
        cap = self.timings.tick_max_sec
        if self.ground.shaken:
            # A due slot that could not be claimed stays due: retry once a tick, not at once.
            # What runs meanwhile (a fleet's offline mode) keeps its own times.
            own = self.member.next_wake() if self.member is not None else None
            if own is None:
                return cap
            return max(0.01, min(cap, (own - now).total_seconds()))
        if self.scheduler.more_due:
            return 0.0  # claim the next batch once the loop has started the last one's runs
        nxt = self.scheduler.next_wake()
        if nxt is None:
            return cap
        return max(0.01, min(cap, (nxt - now).total_seconds()))

    async def _watchdog(self) -> None:
        interval = systemd.watchdog_interval()
        if interval is None:
            return
        while True:
            systemd.notify("WATCHDOG=1")
            await asyncio.sleep(interval)

    # -- the tick ---------------------------------------------------------------------------

    def tick(self) -> None:
        if self._config_asked:
            # First, and apart from the ledger: a reload during an outage reaches the holders
            # that run without it (the pool, which runs a fleet's offline runs too).
            self._config_asked = False
            try:
                self.reconfigure(load_config(self.paths.config_file))
            except ConfigInvalid as exc:
                log.error("config.toml is invalid; keeping the previous settings:\n%s", exc)
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
            if self.member is not None:
                self.member.unavailable(exc, self.clock.now(), self._busy)
        else:
            self.ground.recovered()
        self._update_status()

    def _tick(self) -> None:
        """One tick's work; LedgerUnavailable when the ledger took no read or write (nothing of
        it recorded: a full disk, a read-only file, an outage).
        Results kept from while the disk was full are written first, so none waits behind a
        new claim (test_reliability_full_disk.py::
        test_a_full_disk_pauses_the_daemon_and_loses_no_result)."""
        written = self.pool.flush()
        if written:
            log.info("recorded %d finished run(s) kept while the ledger took no writes", written)
        if self.member is not None and self.member.resume(self.clock.now()):
            self._data_version = None  # e.g. runs made offline copied in: read the states again
        if not self._marked:
            # Requests and paused conversations kept outside the ledger before: in, once.
            pausestore.import_once(self.ledger, self.paths, self.clock.now())
            self.mark_interrupted()
            self._marked = True
        now = self.clock.now()
        self.refresh()
        self._waiting = pauses.tend(
            self.ledger,
            self.paths,
            self._valid_routine,
            now,
            self._resume,
            lambda name: self.pool.busy(name) or self.site.busy(name),
            lambda routine: is_enabled(self.states, routine),
            self._notify,
        )
        for pending in self.scheduler.due(now, self._slot_busy, CLAIM_BATCH):
            self.pool.enqueue(pending)
        if self.scheduler.full is not None:
            raise self.scheduler.full
        self.triggers.scan_after()
        # A run that waits for its person fences events as it fences slots: they stay held
        # (one run once answered), never run beside it (tests/supervisor/test_daemon_needs_you.py::
        # test_an_event_waits_while_a_run_of_its_routine_waits_for_a_person).
        for pending in self.triggers.due(now, lambda name: bool(self._slot_busy(name))):
            self.pool.enqueue(pending)
        if self._last_prune is None or now - self._last_prune > timedelta(hours=24):
            self.ledger.prune_claims(now, self.config.ledger.keep_runs_max)
            self._last_prune = now

    def unavailable(self, exc: LedgerUnavailable) -> None:
        # Re-read states and re-sync next tick: a sync may have stopped half-way. A fleet's
        # database out of reach pauses alike (fail closed); a fleet's Member is told after this.
        self._data_version = None
        self.ground.unavailable(exc)

    def refresh(self, rescan: bool = False) -> bool:
        """Rescan files and, if another process wrote the ledger, its states. True if changed."""
        now = self.clock.now()
        force = rescan or self._reload_asked
        self._reload_asked = False
        registry = self._rescanner.scan(self.registry, force)
        version = self.ledger.data_version
        files_changed = registry.entries != self.registry.entries
        ledger_changed = version != self._data_version
        if not files_changed and not ledger_changed:
            return False
        previous = self.registry
        # The person's edits keep the state they set (supervisor/engine/toggle.py): before the
        # states are read, so this tick already sees the override on the edited file.
        for name, was, now_identity in file_edits(previous, registry):
            self.ledger.rebind_override(name, was, now_identity)
        self.registry = registry
        self._data_version = version
        held = self.site.refresh(registry)  # who else is busy; a fleet's held-back routines
        states = self.states = self.ledger.states()
        if legacy := unbound(registry, states):  # once, after the ledger's upgrade
            for name, identity in legacy:
                self.ledger.rebind_override(name, None, identity)
            states = self.states = self.ledger.states()
        for name, why in self.scheduler.sync(registry, states, now, held).items():
            self.pool.drop_queued(name, why)
        for name, why in self.triggers.sync(registry, states, now, held).items():
            self.pool.drop_queued(name, why)
        if self.files is not None:
            self.files.sync(f.routine for f in self.triggers.followers.values())
        for name, entry in registry.entries.items():
            if entry.stale and previous.get(name) is not entry:  # once per bad edit
                log.warning(
                    "%s: file invalid, keeping the last good version:\n%s",
                    one_line(name),
                    "\n".join(one_line(str(p)) for p in entry.errors),
                )
        self.pool.admit()
        return True

    def _slot_busy(self, name: str) -> bool | str:
        """Whether `name`'s due slot is skipped, and why when it waits for a person."""
        return pauses.waiting_reason(self._waiting, name) or self._busy(name)

    def _valid_routine(self, name: str) -> Routine | None:
        entry = self.registry.get(name)
        return entry.routine if entry is not None else None

    def _resume(self, routine: Routine, reply: ReplyTo) -> str:
        """Start the run that continues a paused one its person answered. The caller checked
        the routine is not busy here; another live owner of a run of it (which a daemon up
        leaves no room for) is logged, never an error that stops the loop."""
        try:
            pending, _ = self.pool.submit_manual(routine, owner=self.owner, reply=reply)
        except Busy as exc:
            log.error("%s: run %s was answered but could not go on: %s",
                      routine.name, reply.parent_run_id, exc)  # fmt: skip
            return ""
        return pending.run_id

    def reconfigure(self, config: Config) -> None:
        """A reload's settings, handed to every holder of config: the pool (max_concurrent,
        and what each new run's job carries: providers, pricing, sandbox; a fleet's offline
        runs are this pool's too) and housekeeping (retention); a fleet's offline mode reads
        `self.config` when it starts. Which fleet database and machine name is the daemon's
        identity: those take effect at its restart (tests/supervisor/test_daemon_reload.py,
        tests/fleet/test_fleet_outage_end.py::test_reload_reaches_the_offline_pool)."""
        before = self.config.fleet
        if (before and (before.database, before.machine)) != (
            config.fleet and (config.fleet.database, config.fleet.machine)
        ):
            log.warning("config.toml's [fleet] database or machine changes at the next restart")
        if config != self.config:
            log.info("config.toml reloaded")
        self.config = config
        self.pool.config = config
        if self.keeper is not None:
            self.keeper.reconfigure(config.ledger)
        self.pool.admit()  # a larger max_concurrent starts queued runs now

    def _busy(self, name: str) -> bool:
        return self.site.busy(name) or self.pool.busy(name)

    def force_reload(self) -> None:
        """Re-read config.toml, the files and the ledger's states now (reload, enable)."""
        self._reload_asked = self._config_asked = True
        self._data_version = None
        self.tick()

    # -- what the control commands see and ask (supervisor/control/api.py) ------------------

    def snapshot(self) -> StatusReply:
        return status_reply(
            pool=self.pool,
            scheduler=self.scheduler,
            registry=self.registry,
            ground=self.ground,
            started_at=self.started_at,
            now=self.clock.now(),
            max_concurrent=self.config.max_concurrent,
            line=self.status_line(),
            fleet=self.member.status() if self.member is not None else None,
        )

    def start_action(self, proposal_id: int, shown: str) -> None:
        loop = asyncio.get_running_loop()

        def then() -> None:  # from the reaping thread
            loop.call_soon_threadsafe(self.wake)

        approvals.start_approved(proposal_id, shown, then)

    def set_enabled(self, routine: Routine, on: bool) -> None:
        set_enabled(self.ledger, routine, on, self.clock.now())
        self.force_reload()

    def lost(self) -> str | None:
        return self.ground.lost

    def refusal(self) -> Refused | None:
        if not self.ground.check_held():
            return Refused("ledger_lost", str(self.ground.lost))
        if self.ground.full is not None:
            return Refused(self._pause_code(), self.ground.full)
        return None

    def submit(
        self, routine: Routine, *, listener: Listener | None, reply: ReplyTo | None, debug: bool
    ) -> tuple[Pending, asyncio.Future[RunReply]]:
        if not self.pool.accepting:
            raise Refused("stopping", "the daemon is stopping; try again when it is back")
        # Before the pool starts the run: a forkserver started now is waited for by its
        # spawn, so a typed run is forked, never a second cold start beside it.
        self._last_use = self.clock.now()
        self._keep_forks(active=1)
        try:
            return self.pool.submit_manual(
                routine, owner=self.owner, listener=listener, reply=reply, debug=debug
            )
        except Busy as exc:
            raise Refused("busy", str(exc)) from None
        except LedgerUnavailable as exc:  # nothing recorded, so nothing runs
            self.unavailable(exc)
            raise Refused(self._pause_code(), str(self.ground.full)) from None

    def fire(self, routine: Routine, text: str | None) -> tuple[str, str | None]:
        """A fire call: its event held and claimed at once when the routine is free.
        ("started", run id) or ("held", None): it runs when the routine's current run ends,
        coalesced with any other event held meanwhile."""
        name = routine.name
        if not self.pool.accepting:
            raise Refused("stopping", "the daemon is stopping; try again when it is back")
        if routine.trigger is None or not routine.trigger.fire:
            raise Refused(
                "not_fireable",
                f"{name} takes no fire calls: add fire = true to its [trigger] table",
            )
        if self.triggers.routine(name) is None:
            raise Refused(
                "disabled",
                f"{name} is not on here (disabled, or a fleet runs it on another machine); "
                f"to turn it on: vinos-routine enable {name}",
            )
        event = fire_event(name, text)
        self.triggers.offer(event)
        self.tick()
        pending = next(
            (p for p in [*self.pool.queue, *(r.pending for r in self.pool.running.values())]
             if p.slot == event.slot),
            None,
        )  # fmt: skip
        return ("started", pending.run_id) if pending is not None else ("held", None)

    def _pause_code(self) -> str:
        """The error code of a `run` refused while the daemon is paused."""
        return "disk_full" if self.ground.health is Health.DISK_FULL else "ledger_unavailable"

    def active_run_of(self, name: str) -> str | None:
        return self.pool.active_run_of(name)

    def find(self, run_id: str) -> Pending | None:
        return self.pool.find(run_id)

    def finished(self, run_id: str) -> Finished | None:
        return self.pool.finished.get(run_id)

    def activity(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return tuple(self.pool.running), tuple(p.run_id for p in self.pool.queue)

    def known_fire(self, name: str, routine: Routine, now: datetime) -> datetime | None:
        return self.scheduler.known_fire(name, routine, now)

    def serves_local_ledger(self) -> bool:
        return self.member is None

    # -- status -----------------------------------------------------------------------------

    def tell(self, note: Notification) -> None:
        """The desktop notification, and the phone push when `note` has one and config.toml
        names a topic (read at each push: a reload reaches it)."""
        self._desktop(note)
        phone.start(note, self.config.ntfy, self.paths)

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

    def _sandbox_used(self) -> None:
        # A `sandbox` call is a use, as a typed run is: the next one finds the forkserver up.
        self._last_use = self.clock.now()
        self._keep_forks(len(self.pool.running) + len(self.pool.queue))

    def _keep_forks(self, active: int) -> None:
        if self.forks is None or self._stopping:
            return
        now = self.clock.now()
        if active:
            self._last_use = now
        nxt = self.scheduler.next_wake()
        kinds = (e.routine.kind for e in self.registry.entries.values() if e.routine is not None)
        sdk = needs_sdk(kinds)
        keep_forkserver(self.forks, active, nxt, now, worker_env(), self._last_use, sdk)

    def _update_status(self) -> None:
        self._keep_forks(len(self.pool.running) + len(self.pool.queue))
        line = self.status_line()
        self.watch.after_tick()
        self._publish(line)


def stop_line(why: str, running: int, timings: Timings) -> str:
    """The log line a stop starts with (pure): why, and what it waits for."""
    if not running:
        return f"stopping ({why})"
    runs = "run" if running == 1 else "runs"
    return (
        f"stopping ({why}): waiting up to {timings.stop_grace_sec:g} s for {running} "
        f"running {runs}, then ending them"
    )


def _set_title(title: str) -> None:
    with contextlib.suppress(Exception):
        import setproctitle

        setproctitle.setproctitle(title)


def _publish_status(line: str) -> None:
    systemd.notify("STATUS=" + line)
    _set_title("vinos-routined: " + line)


def _notify_desktop(note: Notification) -> None:
    loop = asyncio.get_running_loop()
    if not note.opens_dashboard:
        loop.run_in_executor(None, notify.send, note.title, note.body, note.urgency)
        return
    from supervisor.engine.spawn import worker_env

    # Its "Open the dashboard" runs `vinos-routine dashboard`, which opens the one running
    # (when it is this user's) or starts it: the person answers there, in its session.
    opener = [sys.executable, "-P", "-m", "supervisor", "dashboard"]
    send = functools.partial(notify.send, on_open=opener, open_env=worker_env())
    loop.run_in_executor(None, send, note.title, note.body, note.urgency)


def compose(
    p: Paths,
    config: Config,
    *,
    clock: Clock,
    timings: Timings,
    locks: Locks,
    spawner: Spawner,
    forks: ForkServer | None,
) -> Daemon:
    """The daemon for `config`: the loop on this machine's Site, or with [fleet] on a fleet's,
    its Member beside it (psycopg is loaded only then). LedgerError when its ledger cannot be
    opened at all."""
    if config.fleet is None:
        site: Site = LocalSite(p, locks)
        return Daemon(
            p, config, clock=clock, site=site, spawner=spawner, timings=timings, forks=forks
        )
    from supervisor.fleet.site import FleetSite, Member

    fleet = FleetSite(p, config, clock=clock, timings=timings, locks=locks)
    daemon = Daemon(
        p, config, clock=clock, site=fleet, spawner=spawner, timings=timings, forks=forks
    )
    daemon.member = Member(fleet, daemon)
    return daemon


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
        timings = Timings.from_debug(os.environ)  # the one debug setting (supervisor/timings.py)
    except TimingsInvalid as exc:
        print(f"vinos-routine: {exc}", file=sys.stderr)
        return 1
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
    clock = clock_from(timings.clock_offset_file)
    # The daemon into its leaf of a delegated cgroup, before it starts any process.
    limits = runcgroup.prepare()
    log.info("run limits: %s", runcgroup.describe(limits))
    forks = forkserver_for(worker_argv, timings.forkserver)  # real workers only
    spawner = WorkerSpawner(worker_argv, forks, limits.root or None)
    try:
        daemon = compose(
            p, config, clock=clock, timings=timings, locks=locks, spawner=spawner, forks=forks
        )
    except LedgerError as exc:
        print(f"vinos-routine: {exc}", file=sys.stderr)
        return 1
    if daemon.member is not None:
        try:
            daemon.member.join()  # this daemon's identity (one daemon per fleet machine name)
        except MachineInUse as exc:
            print(f"vinos-routine: {exc}", file=sys.stderr)
            daemon.site.close()
            return 1
    log.info("vinos-routine daemon %s started for %s (pid %d)", version(), p.home, os.getpid())
    try:
        return asyncio.run(daemon.run())
    finally:
        for f in locks.files:
            f.close()
