"""`vinos-routine run NAME` without a daemon: the same pool, job and worker code as the daemon,
in this process, for one manual run. The ledger row is owned by this process, so a daemon that
starts meanwhile sees the routine busy, and marks the run interrupted if this process dies."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ipc import Event, RunStatus, Trigger
from routines.config import Config
from routines.ledger import Ledger
from routines.paths import Paths
from routines.spec import Routine
from supervisor import notify
from supervisor.clock import SystemClock
from supervisor.daemon import owner_alive, process_identity
from supervisor.jobs import new_run_id
from supervisor.pool import Pool
from supervisor.record import Notification
from supervisor.reply import ReplyTo
from supervisor.scheduler import Pending

__all__ = ["Busy", "run_in_process"]


class Busy(RuntimeError):
    pass


class _Listener:
    def __init__(self, on_event: Callable[[Event], None]) -> None:
        self.on_event = on_event

    def send(self, msg: Event) -> bool:
        self.on_event(msg)
        return True


def _notify(note: Notification) -> None:
    notify.send(note.title, note.body, note.urgency)


async def _run(
    routine: Routine,
    p: Paths,
    config: Config,
    on_event: Callable[[Event], None],
    reply: ReplyTo | None = None,
) -> dict[str, Any]:
    clock = SystemClock()
    with Ledger(p.ledger) as ledger:
        for active in ledger.active_runs():
            if active.routine == routine.name and owner_alive(
                active.owner_pid, active.owner_started
            ):
                raise Busy(
                    f"{routine.name} is already running ({active.run_id}): previous run still going"
                )
        now = clock.now()
        run_id = new_run_id(routine.name, now)
        trigger = Trigger.REPLY if reply else Trigger.MANUAL
        ledger.record_run(
            routine.name,
            run_id=run_id,
            trigger=trigger,
            status=RunStatus.QUEUED,
            now=now,
            owner=process_identity(),
            parent_run_id=reply.parent_run_id if reply else None,
        )
        pool = Pool(
            ledger=ledger,
            paths=p,
            config=config,
            clock=clock,
            notify=_notify,
            on_change=lambda: None,
        )
        done: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        detail = reply.detail() if reply else "manual run"
        pending = Pending(run_id, routine, trigger, None, detail, reply=reply)
        pending.listeners.append(_Listener(on_event))
        pending.on_done.append(done)
        pool.enqueue(pending)
        try:
            return await done
        except asyncio.CancelledError:
            await pool.shutdown(0)
            raise


def run_in_process(
    routine: Routine,
    p: Paths,
    config: Config,
    on_event: Callable[[Event], None],
    reply: ReplyTo | None = None,
) -> dict[str, Any]:
    """Run `routine` once, now, here (a reply with `reply`); returns the finished run (as
    the daemon reports it)."""
    return asyncio.run(_run(routine, p, config, on_event, reply))
