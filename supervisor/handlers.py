"""The daemon's control commands: one small async function each, answering with the typed
replies of `ipc.messages` (the control server puts them on the wire).

They read and change the daemon's state only through its methods; a command that cannot be
done raises CommandError (code, message), which the client shows as it is.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import TYPE_CHECKING

from ipc import (
    PROTOCOL,
    ActiveEntry,
    DetachedReply,
    EnableReply,
    FleetStatus,
    NextFire,
    PingReply,
    ReloadReply,
    Request,
    RunReply,
    StatusReply,
)
from routines.ledger import LedgerUnavailable
from routines.spec import Routine
from supervisor.control import CommandError, Connection, Handler
from supervisor.health import Ground, Health
from supervisor.owner import version
from supervisor.pool import Busy
from supervisor.scheduler import Pending
from supervisor.toggle import set_enabled

if TYPE_CHECKING:
    from supervisor.daemon import Daemon
    from supervisor.reply import ReplyTo

__all__ = ["Handlers"]

# Modules the daemon must never load: it runs all day, and agent code must not share its process
# (test_daemon_agent.py::test_the_daemon_never_loads_anthropic_httpx2_or_worker). `ping` reports
# any.
_FORBIDDEN = ("anthropic", "httpx", "httpx2", "worker")
# Loaded only with config.toml's [fleet] (the fleet's tests and the daemon-imports test check).
_FLEET_ONLY = ("psycopg",)


class Handlers:
    """The control server's table (`table`): command name → handler."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon

    async def ping(self, req: Request, conn: Connection) -> PingReply:
        return PingReply(
            pid=os.getpid(),
            version=version(),
            protocol=PROTOCOL,
            home=str(self.daemon.paths.home),
            started_at=self.daemon.started_at.isoformat(),
            loaded_modules=sorted(m for m in _FORBIDDEN + _FLEET_ONLY if m in sys.modules),
        )

    async def status(self, req: Request, conn: Connection) -> StatusReply:
        return self.status_reply()

    def status_reply(self) -> StatusReply:
        """What `status` answers; also what a command run for a thin client reads."""
        pool, registry = self.daemon.pool, self.daemon.registry
        return StatusReply(
            daemon=True,
            running=[
                ActiveEntry(
                    routine=r.pending.routine.name,
                    run_id=run_id,
                    trigger=r.pending.trigger,
                    slot=r.pending.slot,
                    started_at=r.started_at.isoformat(),
                    pid=r.worker.pid if r.worker else None,
                )
                for run_id, r in pool.running.items()
            ],
            queued=[ActiveEntry(p.routine.name, p.run_id, p.trigger, p.slot) for p in pool.queue],
            next=[NextFire(n, at.isoformat()) for n, at in self.daemon.scheduler.next_fires()[:20]],
            routines=len(registry.entries),
            enabled=len(self.daemon.scheduler.tracked),
            invalid=sorted(n for n, e in registry.entries.items() if e.errors),
            # Invalid on disk, but the last good version is what runs
            # (test_daemon_reload.py::test_an_invalid_edit_keeps_the_last_good_version_running).
            stale=sorted(n for n, e in registry.entries.items() if e.stale),
            pid=os.getpid(),
            started_at=self.daemon.started_at.isoformat(),
            now=self.daemon.clock.now().isoformat(),
            max_concurrent=self.daemon.config.max_concurrent,
            status=self.daemon.status_line(),
            lost=self.daemon.ground.lost,
            disk_full=self.daemon.ground.full,
            health=self.daemon.ground.health,
            unwritten=[u.run_id for u in pool.unwritten],
            fleet=self._fleet(),
        )

    def _fleet(self) -> FleetStatus | None:
        fleet = self.daemon.fleet
        if fleet is None:
            return None
        return FleetStatus(
            machine=fleet.machine,
            held=dict(sorted(fleet.held.items())),
            elsewhere=dict(sorted(fleet.elsewhere.items())),
        )

    def _routine(self, name: object) -> Routine:
        if not isinstance(name, str):
            raise CommandError("usage", "expected a routine name")
        self.daemon.refresh(rescan=True)
        entry = self.daemon.registry.get(name)
        if entry is None:
            raise CommandError("unknown_routine", self.daemon.registry.unknown(name))
        if entry.routine is None:
            errors = "\n".join(str(p) for p in entry.errors)
            raise CommandError("invalid_routine", f"{name} is invalid:\n{errors}")
        return entry.routine

    async def _await_run(self, pending: Pending, conn: Connection) -> RunReply:
        done: asyncio.Future[RunReply] = asyncio.get_running_loop().create_future()
        pending.listeners.append(conn)
        pending.on_done.append(done)
        return await done

    async def run(self, req: Request, conn: Connection) -> RunReply | DetachedReply:
        ground = self.daemon.ground
        if not ground.check_held():
            raise CommandError("ledger_lost", str(ground.lost))
        if ground.full is not None:
            raise CommandError(_pause_code(ground), ground.full)
        reply = None
        if req.cmd == "reply":
            r, reply = self._reply_to(req)
        else:
            r = self._routine(req.args.get("name"))
        if not self.daemon.pool.accepting:
            raise CommandError("stopping", "the daemon is stopping; try again when it is back")
        detach = bool(req.args.get("detach"))
        try:
            pending, done = self.daemon.pool.submit_manual(
                r,
                owner=self.daemon.owner,
                listener=None if detach else conn,
                reply=reply,
                debug=bool(req.args.get("debug")),
            )
        except Busy as exc:
            raise CommandError("busy", str(exc)) from None
        except LedgerUnavailable as exc:  # nothing recorded, so nothing runs
            self.daemon.unavailable(exc)
            raise CommandError(_pause_code(ground), str(ground.full)) from None
        if detach:
            return DetachedReply(pending.run_id)
        return await done

    def _reply_to(self, req: Request) -> tuple[Routine, ReplyTo]:
        """`reply`: the parent run's routine (its current version) and the checked reply."""
        from supervisor.reply import ReplyRefused, prepare_reply

        try:
            return prepare_reply(
                self.daemon.ledger,
                self.daemon.paths,
                self._routine,
                req.args.get("run_id"),
                req.args.get("text"),
            )
        except ReplyRefused as exc:
            raise CommandError("reply_refused", str(exc)) from None

    async def follow(self, req: Request, conn: Connection) -> RunReply:
        run_id = req.args.get("run_id")
        name = req.args.get("name")
        if not run_id and isinstance(name, str):
            run_id = self.daemon.pool.active_run_of(name)
        if not isinstance(run_id, str):
            raise CommandError("not_running", f"{name or 'that routine'} is not running now")
        pending = self.daemon.pool.find(run_id)
        if pending is None:
            fin = self.daemon.pool.finished.get(run_id)
            if fin is not None:
                return fin.reply()
            raise CommandError("not_running", f"run {run_id} is not running now")
        return await self._await_run(pending, conn)

    async def reload(self, req: Request, conn: Connection) -> ReloadReply:
        self.daemon.force_reload()
        registry = self.daemon.registry
        return ReloadReply(
            routines=len(registry.entries),
            enabled=len(self.daemon.scheduler.tracked),
            invalid=sorted(n for n, e in registry.entries.items() if e.errors),
        )

    async def enable(self, req: Request, conn: Connection) -> EnableReply:
        """`enable`/`disable NAME`: the CLI's change, made by the daemon for clients that do
        not write the ledger themselves (the dashboard)."""
        r = self._routine(req.args.get("name"))
        on = req.cmd == "enable"
        set_enabled(self.daemon.ledger, r, on, self.daemon.clock.now())
        self.daemon.force_reload()
        return EnableReply(r.name, on)

    def table(self) -> dict[str, Handler]:
        return {
            "ping": self.ping,
            "status": self.status,
            "run": self.run,
            "reply": self.run,
            "follow": self.follow,
            "reload": self.reload,
            "enable": self.enable,
            "disable": self.enable,
            "answer": self.answer,
            "watch": self.watch,
        }

    async def watch(self, req: Request, conn: Connection) -> dict[str, object]:
        """`status --waybar --follow`: the bar's line each time it changes (supervisor/watch.py)."""
        return await self.daemon.watch.serve(self.status_reply, req, conn)

    async def answer(self, req: Request, conn: Connection) -> dict[str, object]:
        """A read command run here for a thin client (supervisor/answers.py)."""
        from supervisor.answers import answer

        return answer(self.daemon, self.status_reply, req, conn)


def _pause_code(ground: Ground) -> str:
    """The error code of a `run` refused while the daemon is paused."""
    return "disk_full" if ground.health is Health.DISK_FULL else "ledger_unavailable"
