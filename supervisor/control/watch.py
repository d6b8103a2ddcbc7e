"""`status --waybar --follow`'s daemon side: a `watch` request stays open and gets one event
with the bar's JSON line whenever that line changes.

After each tick the daemon calls `StatusWatch.after_tick`, which compares a cheap signature of
what the line is made of (runs running and queued, the registry in force, the ledger's data
version and this connection's own writes, the brief's seen-file) with the last one and wakes
the watchers when it moved. A watcher then renders the line as `status --waybar` would
(supervisor/control/answers.py) and sends it if it differs from the last it sent. It also wakes at
each minute's turn, since "next 06:00" becomes "tomorrow 06:00" with nothing else changing;
that wake-up sends nothing when the line is the same, except a keep-alive every few minutes
that finds a client gone (a closed client is noticed only when written to).

No watcher, no cost: `after_tick` returns at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ipc import Event, EventKind, Request

if TYPE_CHECKING:
    from ipc import StatusReply
    from supervisor.control.api import Controlled
    from supervisor.control.server import Connection

__all__ = ["KEEPALIVE_MINUTES", "StatusWatch"]

KEEPALIVE_MINUTES = 5


class StatusWatch:
    def __init__(self, daemon: Controlled) -> None:
        self.daemon = daemon
        self.watchers: set[asyncio.Event] = set()
        self._last: object = None

    def signature(self) -> tuple[Any, ...]:
        d = self.daemon
        try:
            seen: int | None = os.stat(d.paths.state_dir / "brief-seen.json").st_mtime_ns
        except OSError:
            seen = None
        db = getattr(d.ledger, "_db", None)  # this connection's own writes (a run's end)
        refused = d.refusal()  # the ledger lost or paused
        return (
            d.activity(),
            id(d.registry),
            d.ledger.data_version,
            getattr(db, "total_changes", None),
            seen,
            d.lost() is None,
            refused.message if refused is not None else None,
        )

    def after_tick(self) -> None:
        """Wake the watchers if what the bar shows may have changed."""
        if not self.watchers:
            return
        try:
            now = self.signature()
        except Exception:  # e.g. the ledger unreadable: let the watchers render and say so
            now = None
        if now != self._last or now is None:
            self._last = now
            for ev in self.watchers:
                ev.set()

    async def serve(
        self, status: Callable[[], StatusReply], req: Request, conn: Connection
    ) -> dict[str, object]:
        from supervisor.control.answers import render
        from supervisor.control.memtrim import release

        args = {**req.args, "verb": "status", "opts": {"waybar": True}}
        wake = asyncio.Event()
        self.watchers.add(wake)
        last: bytes | None = None
        quiet = 0
        try:
            while not conn.closed:
                wake.clear()
                done = render(self.daemon, status, args, rescan=last is None)
                if isinstance(done, str):
                    return {"fallback": done}
                line = done[1]
                del done
                if line != last or quiet >= KEEPALIVE_MINUTES:
                    event = Event(EventKind.LOG, line.decode("latin-1"), {"fd": 1})
                    if line == last:
                        event = Event(EventKind.STATUS, "", {"keepalive": True})
                    if not conn.send(event):
                        break
                    last, quiet = line, 0
                # The line is of every routine: its rows and text were freed, so give the
                # pages back once it has left, as `answer` does (supervisor/control/memtrim.py).
                conn.after_sent(release)
                now = self.daemon.clock.now()
                to_minute = 60.0 - (now.second + now.microsecond / 1e6) + 0.05
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), to_minute)
                if not wake.is_set():
                    quiet += 1
        finally:
            self.watchers.discard(wake)
        return {"code": 0}
