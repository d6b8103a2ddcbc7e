"""The daemon's tick, in-process: a real Daemon on a FakeClock, the pool's FakeSpawner and a
Site of the test's own (LocalSite, or one that holds routines back, runs them elsewhere or
finds its database away when it reads who else is busy). A real ledger file and real routine
files; no process, no socket and no real time, so each test takes milliseconds, as
tests/supervisor/test_pool.py does for the pool. The end-to-end cases that need a real daemon
process stay in test_daemon_*.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from routines.ledger import Ledger, LedgerUnavailable, RunRow, Unavailable
from routines.runs import RunStatus, Trigger
from routines.spec.config import Config
from routines.spec.paths import paths
from routines.spec.registry import Registry
from supervisor.daemon import Daemon
from supervisor.engine.clock import FakeClock
from supervisor.engine.finish import Notification
from supervisor.engine.health import Health
from supervisor.engine.site import LocalSite
from supervisor.timings import Timings
from tests.supervisor.daemonkit import command_routine, write_routine
from tests.supervisor.fakespawn import FakeSpawner, settle

T0 = datetime(2026, 12, 2, 9, 0, 0, tzinfo=UTC)
T = TypeVar("T")


class FakeSite(LocalSite):
    """This machine's real ledger, with what a fleet would add scripted by the test: routines
    held back, routines running elsewhere, and an outage (`away`) when it reads them."""

    def __init__(self) -> None:
        super().__init__(paths())
        self.held: dict[str, str] = {}
        self.running_elsewhere: set[str] = set()
        self.away: LedgerUnavailable | None = None

    def refresh(self, registry: Registry) -> Mapping[str, str]:
        if self.away is not None:
            raise self.away
        return self.held

    def busy(self, name: str) -> bool:
        return name in self.running_elsewhere


class Rig:
    def __init__(self, site: LocalSite | None = None) -> None:
        self.clock = FakeClock(T0)
        self.spawner = FakeSpawner()
        self.site = site or LocalSite(paths())
        self.notes: list[Notification] = []
        self.lines: list[str] = []  # the status line after each tick
        self.daemon = Daemon(
            paths(),
            Config(),
            clock=self.clock,
            site=self.site,
            spawner=self.spawner,
            timings=Timings(),
            notify=self.notes.append,
            publish=self.lines.append,
        )

    async def tick_at(self, instant: datetime) -> None:
        self.clock.set(instant)
        self.daemon.tick()
        await settle()

    def health(self) -> Health:
        return self.daemon.ground.health

    def rows(self, name: str) -> list[RunRow]:
        return list(reversed(self.daemon.ledger.history(name, limit=100)))

    def close(self) -> None:
        self.site.close()


def run(body: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(asyncio.wait_for(body(), 30))  # a hang fails, it does not stall the run


def test_a_due_slot_is_claimed_and_spawned_once() -> None:
    write_routine("every", command_routine("true"))

    async def body() -> None:
        g = Rig()
        try:
            await g.tick_at(T0)  # a new routine owes nothing from before it was seen
            assert g.spawner.started == []
            await g.tick_at(T0 + timedelta(minutes=1, seconds=1))
            await g.tick_at(T0 + timedelta(minutes=1, seconds=2))  # the same slot: claimed
            assert g.spawner.started == ["every"]
            [row] = g.rows("every")
            assert (row.status, row.trigger, row.slot) == (
                RunStatus.OK,
                Trigger.SCHEDULE,
                "2026-12-02T09:01:00Z",
            )
            assert g.health() is Health.OK
        finally:
            g.close()

    run(body)


def test_a_routine_held_back_by_the_site_is_not_run_nor_recorded() -> None:
    write_routine("pinned", command_routine("true"))
    write_routine("free", command_routine("true"))

    async def body() -> None:
        site = FakeSite()
        site.held = {"pinned": "pinned to another machine"}
        g = Rig(site)
        try:
            await g.tick_at(T0)
            await g.tick_at(T0 + timedelta(minutes=1, seconds=1))
            assert g.spawner.started == ["free"]
            assert g.rows("pinned") == []
            assert "pinned" not in g.daemon.scheduler.tracked
        finally:
            g.close()

    run(body)


def test_a_slot_due_while_the_routine_runs_elsewhere_is_skipped_never_run() -> None:
    write_routine("common", command_routine("true"))

    async def body() -> None:
        site = FakeSite()
        g = Rig(site)
        try:
            await g.tick_at(T0)
            site.running_elsewhere = {"common"}
            g.daemon.force_reload()  # what is busy elsewhere is read with the states
            await g.tick_at(T0 + timedelta(minutes=1, seconds=1))
            assert g.spawner.started == []
            [row] = g.rows("common")
            assert row.status == RunStatus.SKIPPED
            assert row.detail is not None and "still going" in row.detail
        finally:
            g.close()

    run(body)


def test_an_unavailable_ledger_pauses_without_a_strike_and_resumes_once_back() -> None:
    write_routine("paused", command_routine("true"))

    async def body() -> None:
        site = FakeSite()
        g = Rig(site)
        try:
            await g.tick_at(T0)
            site.away = LedgerUnavailable(Unavailable.UNREACHABLE, "the database is away")
            with Ledger(paths().ledger) as other:  # another process's write: states re-read
                other.set_failure_streak("someone-else", 0)
            for second in (1, 2, 3):
                await g.tick_at(T0 + timedelta(minutes=1, seconds=second))
            assert g.spawner.started == []
            assert g.rows("paused") == []  # nothing claimed, nothing failed
            assert g.daemon.ledger.state("paused").failure_streak == 0
            assert g.health() is Health.UNREACHABLE
            assert len(g.notes) == 1  # said once, not once a tick
            assert "paused" in g.lines[-1]
            site.away = None
            await g.tick_at(T0 + timedelta(minutes=1, seconds=4))
            assert g.health() is Health.OK
            assert g.spawner.started == ["paused"]  # the slot stayed due: run once, late
            [row] = g.rows("paused")
            assert row.status == RunStatus.OK
        finally:
            g.close()

    run(body)


def test_catch_up_after_a_sleep_runs_once_for_all_missed_slots() -> None:
    write_routine("hourly", command_routine("true", schedule='cron = "0 * * * *"'))

    async def body() -> None:
        g = Rig()
        try:
            await g.tick_at(T0)
            woke = T0 + timedelta(hours=5, minutes=10)  # a laptop asleep through five slots
            await g.tick_at(woke)
            await g.tick_at(woke + timedelta(seconds=30))
            assert g.spawner.started == ["hourly"]
            [row] = g.rows("hourly")
            assert row.trigger == Trigger.CATCH_UP
            assert row.detail is not None and "stands in for 5 missed runs" in row.detail
        finally:
            g.close()

    run(body)
