"""The daemon's control commands: one small async function each, answering with the typed
replies of `ipc.messages` (the control server puts them on the wire).

They read and change the daemon's state only through the `Controlled` protocol
(supervisor/control/api.py), never the Daemon class; a command that cannot be done raises
CommandError (code, message), which the client shows as it is.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from typing import TYPE_CHECKING

from ipc import (
    PROTOCOL,
    DetachedReply,
    EnableReply,
    PingReply,
    ReloadReply,
    Request,
    RunReply,
    StatusReply,
)
from routines.spec import Routine
from supervisor.control.api import Controlled, Refused
from supervisor.control.server import CommandError, Connection, Handler, send_rows
from supervisor.engine.owner import version
from supervisor.engine.scheduler import Pending

if TYPE_CHECKING:
    from supervisor.control.watch import StatusWatch
    from supervisor.engine.reply import ReplyTo

__all__ = ["Handlers"]

# Modules the daemon must never load: it runs all day, and agent code must not share its process
# (test_daemon_agent.py::test_the_daemon_never_loads_anthropic_httpx2_or_worker). `ping` reports
# any.
_FORBIDDEN = ("anthropic", "httpx", "httpx2", "worker")
# Loaded only with config.toml's [fleet] (the fleet's tests and the daemon-imports test check).
_FLEET_ONLY = ("psycopg",)
_SHA256 = re.compile(r"[0-9a-f]{64}")


class Handlers:
    """The control server's table (`table`): command name → handler."""

    def __init__(self, daemon: Controlled, watch: StatusWatch) -> None:
        self.daemon = daemon
        self.status_watch = watch  # `status --waybar --follow` (supervisor/control/watch.py)

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
        """The daemon's state; with `problems` (the asking shell's PATH and whether it has a
        key), what keeps the enabled routines from working, for `status` to print."""
        reply = self.status_reply()
        env = req.args.get("problems")
        if not isinstance(env, dict):
            return reply
        self._ledger_in_place()
        from dataclasses import replace

        return replace(reply, problems=self._problems(reply, env))

    def status_reply(self) -> StatusReply:
        """What `status` answers; also what the bar's watch reads."""
        return self.daemon.snapshot()

    def _ledger_in_place(self) -> None:
        """Refuse a client's read while the ledger is lost or its file is gone: the CLI then
        says why itself (cli/commands/common.py `ledger_gone_beside_daemon`), or makes one."""
        d = self.daemon
        if d.lost() is not None:
            raise CommandError("ledger_lost", "the ledger was lost")
        if d.serves_local_ledger() and not d.paths.ledger.exists():
            raise CommandError("no_ledger", "no ledger file")

    def _problems(self, reply: StatusReply, env: dict[str, object]) -> list[str]:
        from supervisor.hostcheck import KEY_ENV, status_problems
        from supervisor.overview import as_on_disk

        shell = {"PATH": str(env.get("path") or "")}
        if env.get("key"):
            shell[KEY_ENV] = "set"  # only whether the client has one; never its value
        # Paused because its ledger is away (a fleet's database down or hung): the routines'
        # own `enabled` stands in for their states, without a read that would wait
        # (tests/fleet/test_fleet_cli.py: status answers within a second on a hang).
        states = self.daemon.ledger.states() if reply.health == "ok" else {}
        d = self.daemon
        return status_problems(
            d.paths, as_on_disk(d.registry).routines(), states, os.getpid(), shell
        )

    async def list_routines(self, req: Request, conn: Connection) -> dict[str, object]:
        """`list`: the read model's rows (routines.query), from the files as they are now,
        the daemon's ledger and the next fires its scheduler holds, sent as ROWS events (a
        line holds at most ipc.MAX_LINE bytes), each a batch of columns; the response counts
        them. The client renders them."""
        from supervisor.control.watch import ledger_mark
        from supervisor.overview import as_on_disk, collect

        self._ledger_in_place()
        d = self.daemon
        d.refresh(rescan=True)  # a file edited a moment ago shows
        stale = sorted(n for n, e in d.registry.entries.items() if e.stale)
        rows = collect(
            d.clock.now(),
            registry=as_on_disk(d.registry),
            ledger=d.ledger,
            known_fire=d.known_fire,
            stale=stale,
            cache=self.status_watch.rows,
            # Before the rows are read: a write meanwhile makes the next `list` read again.
            ledger_mark=ledger_mark(d.ledger),
        )
        send_rows(conn, rows)
        return {"rows": len(rows), "stale": stale}

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
        refused = self.daemon.refusal()
        if refused is not None:
            raise CommandError(refused.code, refused.message)
        reply = None
        if req.cmd == "reply":
            r, reply = self._reply_to(req)
        else:
            r = self._routine(req.args.get("name"))
        detach = bool(req.args.get("detach"))
        try:
            pending, done = self.daemon.submit(
                r,
                listener=None if detach else conn,
                reply=reply,
                debug=bool(req.args.get("debug")),
            )
        except Refused as exc:
            raise CommandError(exc.code, exc.message) from None
        if detach:
            return DetachedReply(pending.run_id)
        return await done

    def _reply_to(self, req: Request) -> tuple[Routine, ReplyTo]:
        """`reply`: the parent run's routine (its current version) and the checked reply."""
        from supervisor.engine.reply import ReplyRefused, prepare_reply

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
            run_id = self.daemon.active_run_of(name)
        if not isinstance(run_id, str):
            raise CommandError("not_running", f"{name or 'that routine'} is not running now")
        pending = self.daemon.find(run_id)
        if pending is None:
            fin = self.daemon.finished(run_id)
            if fin is not None:
                return fin.reply()
            raise CommandError("not_running", f"run {run_id} is not running now")
        return await self._await_run(pending, conn)

    async def reload(self, req: Request, conn: Connection) -> ReloadReply:
        self.daemon.force_reload()
        now = self.daemon.snapshot()
        return ReloadReply(routines=now.routines, enabled=now.enabled, invalid=now.invalid)

    async def enable(self, req: Request, conn: Connection) -> EnableReply:
        """`enable`/`disable NAME`: the CLI's change, made by the daemon for clients that do
        not write the ledger themselves (the dashboard)."""
        r = self._routine(req.args.get("name"))
        on = req.cmd == "enable"
        self.daemon.set_enabled(r, on)
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
            "list": self.list_routines,
            "fire": self.fire,
            "watch": self.watch,
            "approve": self.decide,
            "deny": self.decide,
        }

    async def fire(self, req: Request, conn: Connection) -> dict[str, object]:
        """`vinos-routine fire NAME [--input]`: an event for a routine with fire = true. Its
        input is capped (refused past INPUT_CAP, never cut silently) and reaches the model
        marked as untrusted data."""
        from routines.spec.trigger import INPUT_CAP

        routine = self._routine(req.args.get("name"))
        text = req.args.get("input")
        if text is not None and not isinstance(text, str):
            raise CommandError("usage", "expected the input as text")
        if text is not None and len(text.encode()) > INPUT_CAP:
            raise CommandError(
                "input_too_large",
                f"the input is {len(text.encode()):,} bytes; a fire call takes at most "
                f"{INPUT_CAP:,}",
            )
        try:
            state, run_id = self.daemon.fire(routine, text or None)
        except Refused as exc:
            raise CommandError(exc.code, exc.message) from None
        return {"routine": routine.name, "state": state, "run_id": run_id}

    async def decide(self, req: Request, conn: Connection) -> dict[str, object]:
        """The dashboard's Approve and Deny, in the person's session there (the CLI's
        `approve` runs the action in the person's terminal instead). Approve names the
        fingerprint of the input the page showed: the action runs with that input or not at
        all (worker/actioncmd.py checks it again when it claims the proposal)."""
        from routines import proposals

        pid = req.args.get("id")
        if not isinstance(pid, int) or isinstance(pid, bool) or pid < 1:
            raise CommandError("usage", "expected the proposal's number")
        ledger = self.daemon.ledger
        now = self.daemon.clock.now()
        proposals.expire(ledger, now)
        found = proposals.get(ledger, pid)
        if found is None:
            raise CommandError("no_proposal", f"no proposal #{pid}")
        if req.cmd == "deny":
            why = req.args.get("why") or ""
            if not isinstance(why, str):
                raise CommandError("usage", "expected the reason as text")
            by = proposals.Decider.DASHBOARD
            _, refused = proposals.deny(ledger, pid, why=why.strip()[:500], now=now, by=by)
            if refused is not None:
                raise CommandError("not_waiting", f"proposal #{pid} cannot be denied: {refused}")
            self.daemon.wake()
            return {"id": pid, "state": "denied", "routine": found.routine}
        shown = req.args.get("shown")
        if not isinstance(shown, str) or not _SHA256.fullmatch(shown):
            raise CommandError("usage", "expected the fingerprint of the input shown")
        if found.state != proposals.ProposalState.WAITING:
            raise CommandError("not_waiting", f"proposal #{pid} is {found.state}, not waiting")
        if proposals.fingerprint(found.input) != shown:
            raise CommandError("changed", f"proposal #{pid}'s input is not the one shown")
        try:
            self.daemon.start_action(pid, shown)
        except OSError as exc:
            raise CommandError("not_started", f"the action could not start: {exc}") from None
        return {"id": pid, "state": "approved", "routine": found.routine}

    async def watch(self, req: Request, conn: Connection) -> dict[str, object]:
        """`status --waybar --follow`: the bar's line each time it changes
        (supervisor/control/watch.py)."""
        return await self.status_watch.serve(req, conn)
