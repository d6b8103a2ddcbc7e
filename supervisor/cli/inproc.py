"""`vinos-routine run NAME` without a daemon: the same pool, job and worker code as the daemon,
in this process, for one manual run. The ledger row is owned by this process, so a daemon that
starts meanwhile sees the routine busy, and marks the run interrupted if this process dies."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import closing
from typing import Any

from ipc import Event, reply_json
from routines.spec import Routine
from routines.spec.config import Config
from routines.spec.paths import Paths
from supervisor.engine import notify
from supervisor.engine.clock import SystemClock
from supervisor.engine.finish import Notification
from supervisor.engine.owner import process_identity
from supervisor.engine.pool import Busy, Pool
from supervisor.engine.reply import ReplyTo
from supervisor.fleet.view import cli_ledger

__all__ = ["Busy", "run_in_process"]


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
    with closing(cli_ledger(p)) as ledger:
        pool = Pool(
            ledger=ledger,
            paths=p,
            config=config,
            clock=SystemClock(),
            notify=_notify,
            on_change=lambda: None,
        )
        _pending, done = pool.submit_manual(
            routine, owner=process_identity(), listener=_Listener(on_event), reply=reply
        )
        try:
            return reply_json(await done)
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
