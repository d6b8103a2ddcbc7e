"""`vinos-routine daemon`: the per-user supervisor (DESIGN.md "Supervisor semantics").

One asyncio loop. Each tick re-reads the wall clock, rescans the routine files (cheap: only
changed files are parsed), claims what is due (supervisor/scheduler.py), and hands runs to the
pool (supervisor/pool.py). It sleeps until the earliest fire time or 30 s, whichever is first,
or until something wakes it (a reload, a manual run, a finished worker).

Signal handlers only set flags and wake the loop; the loop does the work.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import signal
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import psutil

from ipc import PROTOCOL, Request, RunStatus, Trigger
from routines.config import Config, ConfigInvalid, load_config
from routines.ledger import Ledger, LedgerError, LedgerFull
from routines.paths import Paths, paths
from routines.product import ROOT_REFUSAL, version
from routines.registry import Registry, scan
from routines.runs import RunEnd
from routines.safetext import one_line
from supervisor import housekeeping, notify, systemd
from supervisor.clock import Clock, clock_from_env
from supervisor.control import CommandError, Connection, ControlServer, socket_path_problem
from supervisor.jobs import new_run_id
from supervisor.pool import Pool
from supervisor.record import Notification
from supervisor.scheduler import Pending, Scheduler
from supervisor.toggle import set_enabled

if TYPE_CHECKING:
    from routines.spec import Routine
    from supervisor.reply import ReplyTo

__all__ = ["Daemon", "main", "owner_alive"]

log = logging.getLogger("vinos.daemon")

# At most this long between ticks (a sleep or a clock jump is noticed within it). Tests shorten
# it with VINOS_TICK_MAX_SEC so they need not wait 30 s to see a stepped clock.
TICK_MAX_SEC = float(os.environ.get("VINOS_TICK_MAX_SEC") or 30.0)
# How long SIGTERM waits for running workers; VINOS_STOP_GRACE_SEC shortens it for tests.
STOP_GRACE_SEC = float(os.environ.get("VINOS_STOP_GRACE_SEC") or 30.0)
# The mtime scan stats every routine file, which with thousands of files is real CPU on every
# tick. So a tick rescans at once when a routine directory changed (a file added, removed, or
# saved by rename, as editors and `vinos-routine edit` do), and otherwise, for edits in place,
# only as often as keeps the scan near SCAN_CPU_SHARE of one CPU: every tick for a few hundred
# files, every few minutes for 10,000 (bench/bench_supervisor.py). SIGHUP, `reload` and a
# manual `run` always rescan.
SCAN_CPU_SHARE = 0.0005
SCAN_MAX_INTERVAL_SEC = 300.0


def process_identity(pid: int | None = None) -> tuple[int, float]:
    """(pid, create time): a pid alone may be reused by an unrelated process later."""
    proc = psutil.Process(pid)
    return proc.pid, proc.create_time()


def owner_alive(pid: int | None, started: float | None) -> bool:
    if pid is None:
        return False
    try:
        proc = psutil.Process(pid)
        if started is not None and abs(proc.create_time() - started) > 0.01:
            return False
        return bool(proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


@dataclass(frozen=True, slots=True)
class Locks:
    files: tuple[IO[str], ...]


def acquire_locks(p: Paths) -> Locks:
    """One daemon per VINOS_HOME (and per runtime dir, where its socket lives)."""
    files: list[IO[str]] = []
    for path in (p.daemon_lock, p.state_dir / ".daemon.lock"):
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        f = open(path, "a+")  # noqa: SIM115 - held open for the daemon's lifetime
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "unknown"
            f.close()
            for other in files:
                other.close()
            raise SystemExit(
                f"vinos-routine: another daemon is already running for {p.home} "
                f"(pid {holder}, lock {path}); stop it first "
                "(systemctl --user stop vinos-routined)"
            ) from None
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        files.append(f)
    return Locks(tuple(files))


FileId = tuple[int, int]  # (st_dev, st_ino)


def file_id(path: Path) -> FileId | None:
    """The identity of the file at `path` (not following a symlink), None when it is gone."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def lost_file(held: dict[Path, FileId]) -> str | None:
    """Why one of the files the daemon holds open is no longer the one at its path, or None.

    A deleted or replaced ledger or lock means another process may start a second ledger and
    a second daemon beside this one: then a slot could run twice (issue 17, item 2)."""
    for path, ident in held.items():
        now = file_id(path)
        if now is None:
            return f"{path} was deleted"
        if now != ident:
            return f"{path} was replaced by another file"
    return None


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
        self.ledger = Ledger(p.ledger)
        # Invariant: the daemon schedules only while the ledger and lock files at their paths
        # are the ones it opened (tests/supervisor/test_reliability_lost.py).
        self._held: dict[Path, FileId] = {}
        ledger_id = file_id(p.ledger)
        if ledger_id is not None:
            self._held[p.ledger] = ledger_id
        for f in locks.files if locks else ():
            st = os.fstat(f.fileno())
            self._held[Path(f.name)] = (st.st_dev, st.st_ino)
        self.lost: str | None = None  # why scheduling stopped for good, once it has
        self.full: str | None = None  # why the ledger takes no writes now (a full disk)
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
        )
        self.control = ControlServer(
            {
                "ping": self._ping,
                "status": self._status,
                "run": self._run,
                "reply": self._run,
                "follow": self._follow,
                "reload": self._reload,
                "enable": self._enable,
                "disable": self._enable,
            }
        )
        self._wake = asyncio.Event()
        self._stopping = False
        self._reload_asked = True
        self._data_version: int | None = None
        self._dirs_seen: tuple[tuple[int, int] | None, ...] | None = None
        self._next_scan = 0.0  # clock.monotonic() of the next scan for edits in place
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
            self.tick()
            systemd.notify("READY=1\nSTATUS=" + self.status_line())
            watchdog = asyncio.ensure_future(self._watchdog())
            keeper = housekeeping.start(self.ledger, self.paths, self.config, self.clock)
            while not self._stopping:
                timeout = self._sleep_for()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout)
                self._wake.clear()
                if not self._stopping:
                    self.tick()
            watchdog.cancel()
            keeper.cancel()
            systemd.notify("STOPPING=1\nSTATUS=stopping: waiting for running routines")
            self._set_title("vinos-routined: stopping")
            await self.pool.shutdown(STOP_GRACE_SEC)
            await self.control.close()
            try:
                self.pool.flush()
            except LedgerFull:
                log.error(
                    "no space left: %d finished run(s) could not be recorded and are lost "
                    "(they show as interrupted from the next start): %s",
                    len(self.pool.unwritten),
                    ", ".join(u.run_id for u in self.pool.unwritten),
                )
        finally:
            for sig, handler in previous.items():
                loop.remove_signal_handler(sig)
                signal.signal(sig, handler)
            self.ledger.close()
        return 0

    def mark_interrupted(self) -> None:
        """Runs left queued/running by a process that is gone become `interrupted`, never
        replayed (DESIGN.md point 7)."""
        now = self.clock.now()
        for run in self.ledger.active_runs():
            if owner_alive(run.owner_pid, run.owner_started):
                continue
            detail = f"its supervisor (pid {run.owner_pid}) went away; not replayed"
            if not self.ledger.finish_run(
                run.run_id, RunEnd(RunStatus.INTERRUPTED, detail), now=now
            ):
                continue  # it ended meanwhile: its own ending stands
            log.warning("%s: run %s interrupted (its supervisor is gone)", run.routine, run.run_id)

    def _sleep_for(self) -> float:
        if self.full is not None or self.lost is not None:
            # A due slot that could not be claimed stays due: retry once a tick, not at once.
            return TICK_MAX_SEC
        now = self.clock.now()
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

    def _check_held(self) -> bool:
        """False (and loudly, once) while the ledger or a lock is deleted or replaced; True
        again if the very file comes back (moved away and back)."""
        why = lost_file(self._held)
        if why is None:
            if self.lost is not None:
                log.warning("the ledger and lock files are back: scheduling resumed")
                self.lost = None
            return True
        if self.lost is None:
            self.lost = (
                f"{why} while the daemon ran; it stopped scheduling, so that no slot can run "
                "twice. Move the file back if it was moved, or restart the daemon "
                "(systemctl --user restart vinos-routined): it then uses the ledger in place, "
                "or starts a new one"
            )
            log.error("%s", self.lost)
            self._notify(Notification("vinos-routine stopped scheduling", self.lost, "critical"))
        return False

    def tick(self) -> None:
        if not self._check_held():
            self._update_status()
            return
        try:
            self._tick()
        except LedgerFull as exc:
            self._disk_full(exc)
        else:
            self._space_back()
        self._update_status()

    def _tick(self) -> None:
        """One tick's work; LedgerFull when a write found no space (nothing of it recorded).
        Results kept from while the disk was full are written first, so none waits behind a
        new claim (issue 17, item 1)."""
        written = self.pool.flush()
        if written:
            log.info("recorded %d finished run(s) kept while the disk was full", written)
        if not self._marked:
            self.mark_interrupted()
            self._marked = True
        now = self.clock.now()
        self._refresh(now)
        for pending in self.scheduler.due(now, self._busy):
            self.pool.enqueue(pending)
        if self.scheduler.full is not None:
            raise self.scheduler.full
        if self._last_prune is None or now - self._last_prune > timedelta(hours=24):
            self.ledger.prune_claims(now)
            self._last_prune = now

    def _disk_full(self, exc: LedgerFull) -> None:
        # Re-read states and re-sync next tick: a sync may have stopped half-way.
        self._data_version = None
        if self.full is not None:
            return  # said once; tried again every tick
        self.full = (
            f"no space left for the ledger ({exc.__cause__ or exc}): nothing new is claimed "
            "and finished runs are kept in memory until there is room; free some space on "
            f"the disk holding {self.paths.state_dir}"
        )
        log.error("%s", self.full)
        self._notify(Notification("vinos-routine: the disk is full", self.full, "critical"))

    def _space_back(self) -> None:
        if self.full is not None:
            self.full = None
            log.warning("space is back: the ledger takes writes again, scheduling resumed")

    def _dir_stamps(self) -> tuple[tuple[int, int] | None, ...]:
        out: list[tuple[int, int] | None] = []
        for d in (self.paths.routines_dir, self.paths.system_dir):
            try:
                st = os.stat(d)
            except OSError:
                out.append(None)
                continue
            out.append((st.st_mtime_ns, st.st_ino))
        return tuple(out)

    def _scan(self, force: bool) -> Registry:
        """The registry, rescanned when due (see SCAN_CPU_SHARE), else the one in force."""
        dirs = self._dir_stamps()  # before the scan: a change during it is seen next time
        if not force and dirs == self._dirs_seen and self.clock.monotonic() < self._next_scan:
            return self.registry
        self._dirs_seen = dirs
        cpu = time.process_time()
        registry = scan(self.paths, self.registry)
        cost = time.process_time() - cpu
        self._next_scan = self.clock.monotonic() + min(SCAN_MAX_INTERVAL_SEC, cost / SCAN_CPU_SHARE)
        return registry

    def _refresh(self, now: datetime, rescan: bool = False) -> bool:
        """Rescan files and, if another process wrote the ledger, its states. True if changed."""
        force = rescan or self._reload_asked
        if self._reload_asked:
            self._reload_asked = False
            try:
                self.config = load_config(self.paths.config_file)
                self.pool.config = self.config
            except ConfigInvalid as exc:
                log.error("config.toml is invalid; keeping the previous settings:\n%s", exc)
        registry = self._scan(force)
        version = self.ledger.data_version
        files_changed = registry.entries != self.registry.entries
        ledger_changed = version != self._data_version
        if not files_changed and not ledger_changed:
            return False
        previous = self.registry
        self.registry = registry
        self._data_version = version
        states = self.ledger.states()
        self._external_busy = {
            a.routine
            for a in self.ledger.active_runs()
            if a.owner_pid != self.owner[0] and owner_alive(a.owner_pid, a.owner_started)
        }
        for name, why in self.scheduler.sync(registry, states, now).items():
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
        return self.pool.busy(name) or name in self._external_busy

    # -- status -----------------------------------------------------------------------------

    def status_line(self) -> str:
        if self.lost is not None:
            return "stopped scheduling: " + self.lost.split(";", 1)[0]
        if self.full is not None:
            waiting = len(self.pool.unwritten)
            return f"paused: the disk is full ({waiting} finished run(s) wait to be recorded)"
        running = len(self.pool.running)
        parts = [f"{running} running"]
        if self.pool.queue:
            parts.append(f"{len(self.pool.queue)} queued")
        fires = self.scheduler.next_fires()
        if fires:
            name, at = fires[0]
            local = at.astimezone()
            clock = (
                local.strftime("%H:%M")
                if at - self.clock.now() < timedelta(hours=20)
                else local.strftime("%a %H:%M")
            )
            parts.append(f"next {name} {clock}")
        else:
            parts.append("nothing scheduled")
        return " · ".join(parts)

    def _update_status(self) -> None:
        line = self.status_line()
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

    # -- control commands ---------------------------------------------------------------------

    async def _ping(self, req: Request, conn: Connection) -> Any:
        return {
            "pid": os.getpid(),
            "version": version(),
            "protocol": PROTOCOL,
            "home": str(self.paths.home),
            "started_at": self.started_at.isoformat(),
            "loaded_modules": sorted(
                m for m in ("anthropic", "httpx", "httpx2", "worker") if m in sys.modules
            ),
        }

    async def _status(self, req: Request, conn: Connection) -> Any:
        snap = self.pool.snapshot()
        snap["next"] = [
            {"routine": n, "at": at.isoformat()} for n, at in self.scheduler.next_fires()[:20]
        ]
        snap["pid"] = os.getpid()
        snap["started_at"] = self.started_at.isoformat()
        snap["now"] = self.clock.now().isoformat()
        snap["routines"] = len(self.registry.entries)
        snap["enabled"] = len(self.scheduler.tracked)
        snap["invalid"] = sorted(n for n, e in self.registry.entries.items() if e.errors)
        # Invalid on disk, but the last good version is what runs (DESIGN.md "Routine file").
        snap["stale"] = sorted(n for n, e in self.registry.entries.items() if e.stale)
        snap["max_concurrent"] = self.config.max_concurrent
        snap["status"] = self.status_line()
        snap["lost"] = self.lost
        snap["disk_full"] = self.full
        snap["unwritten"] = [u.run_id for u in self.pool.unwritten]
        return snap

    def _routine(self, name: object) -> Any:
        if not isinstance(name, str):
            raise CommandError("usage", "expected a routine name")
        self._refresh(self.clock.now(), rescan=True)
        entry = self.registry.get(name)
        if entry is None:
            raise CommandError("unknown_routine", self.registry.unknown(name))
        if entry.routine is None:
            errors = "\n".join(str(p) for p in entry.errors)
            raise CommandError("invalid_routine", f"{name} is invalid:\n{errors}")
        return entry.routine

    async def _run(self, req: Request, conn: Connection) -> Any:
        if not self._check_held():
            raise CommandError("ledger_lost", str(self.lost))
        if self.full is not None:
            raise CommandError("disk_full", self.full)
        reply = None
        if req.cmd == "reply":
            routine, reply = self._reply_to(req)
        else:
            routine = self._routine(req.args.get("name"))
        if not self.pool.accepting:
            raise CommandError("stopping", "the daemon is stopping; try again when it is back")
        if self._busy(routine.name):
            active = self.pool.active_run_of(routine.name) or "in another process"
            raise CommandError(
                "busy", f"{routine.name} is already running ({active}): previous run still going"
            )
        now = self.clock.now()
        run_id = new_run_id(routine.name, now)
        trigger = Trigger.REPLY if reply else Trigger.MANUAL
        try:
            self.ledger.record_run(
                routine.name,
                run_id=run_id,
                trigger=trigger,
                status=RunStatus.QUEUED,
                now=now,
                owner=self.owner,
                parent_run_id=reply.parent_run_id if reply else None,
            )
        except LedgerFull as exc:  # nothing recorded, so nothing runs
            self._disk_full(exc)
            raise CommandError("disk_full", str(self.full)) from None
        detail = reply.detail() if reply else "manual run"
        pending = Pending(run_id, routine, trigger, None, detail, reply=reply)
        if req.args.get("detach"):
            self.pool.enqueue(pending)
            return {"run_id": run_id}
        return await self._await_run(pending, conn, enqueue=True)

    def _reply_to(self, req: Request) -> tuple[Routine, ReplyTo]:
        """`reply`: the parent run's routine (its current version) and the checked reply."""
        from supervisor.reply import ReplyRefused, prepare_reply

        try:
            return prepare_reply(
                self.ledger, self.paths, self._routine, req.args.get("run_id"), req.args.get("text")
            )
        except ReplyRefused as exc:
            raise CommandError("reply_refused", str(exc)) from None

    async def _await_run(self, pending: Pending, conn: Connection, enqueue: bool) -> Any:
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        pending.listeners.append(conn)
        pending.on_done.append(done)
        if enqueue:
            self.pool.enqueue(pending)
        fin = await done
        return fin

    async def _follow(self, req: Request, conn: Connection) -> Any:
        run_id = req.args.get("run_id")
        name = req.args.get("name")
        if not run_id and isinstance(name, str):
            run_id = self.pool.active_run_of(name)
        if not isinstance(run_id, str):
            raise CommandError("not_running", f"{name or 'that routine'} is not running now")
        pending = self.pool.find(run_id)
        if pending is None:
            fin = self.pool.finished.get(run_id)
            if fin is not None:
                return fin.as_json()
            raise CommandError("not_running", f"run {run_id} is not running now")
        return await self._await_run(pending, conn, enqueue=False)

    async def _reload(self, req: Request, conn: Connection) -> Any:
        self._reload_asked = True
        self._data_version = None
        self.tick()
        return {
            "routines": len(self.registry.entries),
            "enabled": len(self.scheduler.tracked),
            "invalid": sorted(n for n, e in self.registry.entries.items() if e.errors),
        }

    async def _enable(self, req: Request, conn: Connection) -> Any:
        """`enable`/`disable NAME`: the CLI's change, made by the daemon for clients that do not
        write the ledger themselves (the dashboard)."""
        routine = self._routine(req.args.get("name"))
        on = req.cmd == "enable"
        set_enabled(self.ledger, routine, on, self.clock.now())
        self._reload_asked = True
        self._data_version = None
        self.tick()
        return {"name": routine.name, "enabled": on}


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
    log.info("vinos-routine daemon %s started for %s (pid %d)", version(), p.home, os.getpid())
    try:
        return asyncio.run(daemon.run())
    finally:
        for f in locks.files:
            f.close()
