"""`status --waybar --follow`'s daemon side: a `watch` request stays open and gets one event
with the bar's JSON line whenever that line changes.

After each tick the daemon calls `StatusWatch.after_tick`, which compares a cheap signature of
what the line is made of (runs running and queued, the registry in force, the ledger's data
version and this connection's own writes, the brief's seen-file) with the last one and wakes
the watchers when it moved. A watcher then gathers the bar's data (the read model's rows and
the day's facts, never text: the client renders it, supervisor/cli/waybarfollow.py) and sends
it if it differs from the last it sent. It also wakes at each minute's turn, since "next
06:00" becomes "tomorrow 06:00" with nothing else changing; then it sends a keep-alive, on
which the client renders the line again (and which finds a client gone: a closed client is
noticed only when written to).

No watcher, no cost: `after_tick` returns at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import TYPE_CHECKING, Any

from ipc import Event, EventKind, Request
from routines.query import RoutineRow, RowCache, encode_rows
from supervisor.control.server import send_rows

if TYPE_CHECKING:
    from supervisor.control.api import Controlled
    from supervisor.control.server import Connection

__all__ = ["StatusWatch", "ledger_mark"]


def ledger_mark(ledger: Any) -> tuple[object, int, int | None]:
    """What moves whenever what the daemon's ledger holds may have: its connection (one
    reopened starts counting again), the data version (the other connections' commits) and
    that connection's own writes (None: a store that cannot count them)."""
    db = getattr(ledger, "_db", None)
    return (db, ledger.data_version, getattr(db, "total_changes", None))


class StatusWatch:
    def __init__(self, daemon: Controlled) -> None:
        self.daemon = daemon
        self.watchers: set[asyncio.Event] = set()
        self._last: object = None
        # What each file says of its row, for the bar's rows and `list`'s (handlers.py): one
        # cache, so 10,000 routines' parts are held once.
        self.rows = RowCache()

    def signature(self) -> tuple[Any, ...]:
        d = self.daemon
        try:
            seen: int | None = os.stat(d.paths.state_dir / "brief-seen.json").st_mtime_ns
        except OSError:
            seen = None
        refused = d.refusal()  # the ledger lost or paused
        return (
            d.activity(),
            id(d.registry),
            *ledger_mark(d.ledger),  # also this connection's own writes (a run's end)
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

    def bar(self, rescan: bool) -> tuple[list[RoutineRow], dict[str, Any]]:
        """What the bar is made of, as data: the read model's rows (routines.query) and the
        day's facts (supervisor/overview.py `bar_facts`); the client renders the line."""
        from supervisor.overview import as_on_disk, bar_facts, collect

        d = self.daemon
        d.refresh(rescan=rescan)
        now = d.clock.now()
        stale = [n for n, e in d.registry.entries.items() if e.stale]
        rows = collect(
            now, registry=as_on_disk(d.registry), ledger=d.ledger, known_fire=d.known_fire,
            stale=stale, cache=self.rows,
        )  # fmt: skip
        return rows, bar_facts(d.paths, rows, d.ledger, now)

    async def serve(self, req: Request, conn: Connection) -> dict[str, object]:
        """Send the bar's data now (the rows as ROWS events, then the day's facts with their
        count), again whenever it changes, and a keep-alive at each minute's turn that brings
        nothing new (the client renders the line again: "next 06:00" becomes "tomorrow 06:00"
        with nothing else changing)."""
        import msgspec

        wake = asyncio.Event()
        self.watchers.add(wake)
        last: bytes | None = None
        try:
            while not conn.closed:
                wake.clear()
                try:
                    rows, facts = self.bar(rescan=last is None)
                except Exception as exc:  # the bar says what failed rather than going blank
                    rows, facts = [], {"error": str(exc) or type(exc).__name__}
                encoded = msgspec.json.encode([encode_rows(rows), facts])
                if encoded == last:
                    sent = conn.send(Event(EventKind.STATUS, "", {"keepalive": True}))
                else:
                    send_rows(conn, rows)
                    sent = conn.send(
                        Event(EventKind.LOG, "", {"bar": {**facts, "rows": len(rows)}})
                    )
                if not sent:
                    break
                last = encoded
                del rows, facts, encoded
                now = self.daemon.clock.now()
                to_minute = 60.0 - (now.second + now.microsecond / 1e6) + 0.05
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), to_minute)
        finally:
            self.watchers.discard(wake)
        return {"code": 0}
