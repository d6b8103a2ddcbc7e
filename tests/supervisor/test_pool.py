"""The pool's queue on a FakeSpawner and a FakeClock: FIFO order, max_concurrent, overlap,
shutdown → interrupted, and exactly one final status per run. A real ledger file; no worker
process and no real time, so each test takes milliseconds.

These cases were only reachable through subprocess daemons before (test_daemon_*.py keep the
end-to-end ones that need real processes).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest

from ipc import Event, Result, RunReply
from routines.ledger import Ledger, LedgerUnavailable, Unavailable
from routines.runs import ACTIVE, RunStatus, Trigger
from routines.spec import Routine
from routines.spec.config import Config
from routines.spec.paths import paths
from routines.spec.registry import scan
from supervisor.engine.clock import FakeClock
from supervisor.engine.finish import Notification
from supervisor.engine.owner import process_identity
from supervisor.engine.pool import Busy, Pool
from supervisor.engine.scheduler import Pending
from tests.supervisor.daemonkit import command_routine, write_routine
from tests.supervisor.fakespawn import FakeSpawner, settle

T0 = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
ME = (os.getpid(), 0.0)  # the owner recorded on manual rows (never checked for these)
T = TypeVar("T")


def routines(*names: str) -> dict[str, Routine]:
    for name in names:
        write_routine(name, command_routine("true"))
    reg = scan(paths())
    out = {}
    for name in names:
        entry = reg.get(name)
        assert entry is not None and entry.routine is not None
        out[name] = entry.routine
    return out


class Rig:
    def __init__(self, ledger: Ledger, max_concurrent: int = 2) -> None:
        self.ledger = ledger
        self.spawner = FakeSpawner()
        self.notes: list[Notification] = []
        self.changes = 0
        self.pool = Pool(
            ledger=ledger,
            paths=paths(),
            config=Config(max_concurrent=max_concurrent),
            clock=FakeClock(T0),
            notify=self.notes.append,
            on_change=self._changed,
            spawner=self.spawner,
        )

    def _changed(self) -> None:
        self.changes += 1

    def submit(self, r: Routine) -> tuple[Pending, asyncio.Future[RunReply]]:
        return self.pool.submit_manual(r, owner=ME)

    def statuses(self) -> dict[str, str]:
        return {r.run_id or "": str(r.status) for r in self.ledger.history(limit=100)}


@contextmanager
def rig(max_concurrent: int = 2) -> Iterator[Rig]:
    with Ledger(paths().ledger) as ledger:
        yield Rig(ledger, max_concurrent)


def run(body: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(asyncio.wait_for(body(), 30))  # a hang fails, it does not stall the run


def test_waiting_runs_start_in_the_order_they_came_never_more_than_max_concurrent() -> None:
    rs = routines("a", "b", "c", "d", "e")

    async def body() -> None:
        with rig(max_concurrent=2) as g:
            g.spawner.hold(*rs)
            futures = [g.submit(rs[n])[1] for n in "abcde"]
            await settle()
            assert g.spawner.started == ["a", "b"]
            assert [p.routine.name for p in g.pool.queue] == ["c", "d", "e"]
            for name, expect in (("b", "abc"), ("a", "abcd"), ("c", "abcde")):
                g.spawner.release(name)
                await settle()
                assert "".join(g.spawner.started) == expect
                assert len(g.pool.running) <= 2
            for name in "de":
                g.spawner.release(name)
            replies = await asyncio.gather(*futures)
            assert [r.status for r in replies] == [RunStatus.OK] * 5
            assert g.spawner.peak == 2
            assert g.pool.running == {} and not g.pool.queue
            assert set(g.statuses().values()) == {"ok"}
            assert g.ledger.active_runs() == []

    run(body)


def test_a_routine_is_busy_while_it_runs_or_waits_and_a_manual_run_is_refused() -> None:
    rs = routines("long", "other")

    async def body() -> None:
        with rig(max_concurrent=1) as g:
            g.spawner.hold("long", "other")
            g.submit(rs["long"])
            _, waiting = g.submit(rs["other"])
            await settle()
            assert g.pool.busy("long") and g.pool.busy("other")  # running, and queued
            assert g.pool.active_run_of("other") == g.pool.queue[0].run_id
            for name in ("long", "other"):
                with pytest.raises(Busy, match=rf"{name} is already running .*still going"):
                    g.submit(rs[name])
            assert len(g.ledger.history(limit=10)) == 2  # a refusal records nothing
            g.spawner.release("long")
            g.spawner.release("other")
            assert (await waiting).status == RunStatus.OK
            await settle()
            assert not g.pool.busy("long") and not g.pool.busy("other")

    run(body)


def test_a_run_owned_by_another_live_process_makes_the_routine_busy() -> None:
    rs = routines("common")
    with Ledger(paths().ledger) as ledger:
        # An in-process `run` elsewhere: its owner (our parent, alive) holds the row.
        ledger.record_run(
            "common",
            run_id="elsewhere",
            trigger=Trigger.MANUAL,
            status=RunStatus.RUNNING,
            now=T0,
            owner=process_identity(os.getppid()),
        )

    async def body() -> None:
        with rig() as g:
            with pytest.raises(Busy, match=r"\(elsewhere, in another process\)"):
                g.submit(rs["common"])
            assert g.spawner.started == []

    run(body)


def test_shutdown_interrupts_what_runs_and_what_waits_each_once() -> None:
    rs = routines("a", "b", "c")

    async def body() -> None:
        with rig(max_concurrent=1) as g:
            g.spawner.hold(*rs)
            futures = [g.submit(rs[n])[1] for n in "abc"]
            await settle()
            await g.pool.shutdown(0)
            replies = [await f for f in futures]
            assert [(r.routine, r.status, r.detail) for r in replies] == [
                ("a", "interrupted", "the daemon stopped while it ran"),
                ("b", "interrupted", "the daemon stopped before it started"),
                ("c", "interrupted", "the daemon stopped before it started"),
            ]
            assert g.spawner.started == ["a"]  # nothing new starts once stopping
            assert g.spawner.workers[0].stop_reason == "shutdown"
            assert set(g.statuses().values()) == {"interrupted"}
            assert g.ledger.active_runs() == []
            assert g.ledger.state("a").failure_streak == 0  # interrupted is not a strike

    run(body)


def test_an_error_after_ok_was_written_cannot_overwrite_it() -> None:
    rs = routines("done")

    async def body() -> None:
        with rig() as g:
            finish = g.pool._finish

            def then_fail(*args: Any) -> Any:
                finish(*args)  # the ledger now says ok
                raise RuntimeError("boom after the end was written")

            g.pool._finish = then_fail  # type: ignore[assignment]
            pending, done = g.submit(rs["done"])
            reply = await done
            row = g.ledger.run(pending.run_id)
            assert row is not None and row.status == RunStatus.OK
            assert (reply.status, reply.detail) == (RunStatus.OK, "done")  # what the ledger holds
            assert g.ledger.last_runs()["done"].status == RunStatus.OK

    run(body)


def test_an_error_before_the_end_records_failed_once() -> None:
    rs = routines("buggy")

    async def body() -> None:
        with rig() as g:

            def broken(*args: Any) -> Any:
                raise RuntimeError("a bug")

            g.pool._finish = broken  # type: ignore[assignment]
            pending, done = g.submit(rs["buggy"])
            reply = await done
            assert (reply.status, reply.detail) == (
                RunStatus.FAILED,
                "supervisor error: RuntimeError: a bug",
            )
            row = g.ledger.run(pending.run_id)
            assert row is not None and row.status not in ACTIVE and row.status == "failed"
            assert g.pool.running == {}

    run(body)


def test_dropping_a_routine_skips_its_waiting_runs_and_leaves_its_running_one() -> None:
    rs = routines("a", "b")

    async def body() -> None:
        with rig(max_concurrent=1) as g:
            g.spawner.hold("a", "b")
            _, running = g.submit(rs["a"])
            _, queued = g.submit(rs["b"])
            events: list[Event] = []

            class Follow:
                def send(self, msg: Event) -> bool:
                    events.append(msg)
                    return True

            g.pool.queue[0].listeners.append(Follow())
            await settle()
            assert g.pool.drop_queued("b", "disabled while queued") == 1
            assert g.pool.drop_queued("a", "disabled while queued") == 0  # it already runs
            reply = await queued
            assert (reply.status, reply.detail) == (RunStatus.SKIPPED, "disabled while queued")
            assert events[-1].text == "skipped: disabled while queued"
            g.spawner.release("a")
            assert (await running).status == RunStatus.OK
            assert g.spawner.started == ["a"]

    run(body)


def test_listeners_see_queued_running_and_the_end() -> None:
    rs = routines("watched")

    async def body() -> None:
        with rig() as g:
            seen: list[tuple[str, str]] = []

            class Follow:
                def send(self, msg: Event) -> bool:
                    seen.append((msg.kind, msg.text))
                    return True

            g.spawner.results["watched"] = Result(status=RunStatus.FAILED, error="exit 3")
            _, done = g.pool.submit_manual(rs["watched"], owner=ME, listener=Follow())
            reply = await done
            assert (reply.status, reply.detail) == (RunStatus.FAILED, "exit 3")
            assert seen[0] == ("status", "queued")
            assert seen[1][0] == "status" and seen[1][1] == "running"
            assert ("log", "fake worker for watched") in seen
            assert seen[-1] == ("status", "failed: exit 3")
            assert g.ledger.state("watched").failure_streak == 1
            assert g.changes == 1

    run(body)


def test_five_due_at_once_with_max_concurrent_two_run_in_fifo_order() -> None:
    """(Was test_daemon_overlap.py's subprocess test of the same name: every assertion of it
    is here, on the pool itself.)"""
    names = ["r1", "r2", "r3", "r4", "r5"]
    rs = routines(*names, "m6")

    def status(g: Rig) -> tuple[list[str], list[str]]:
        running = [r.pending.routine.name for r in g.pool.running.values()]
        return running, [p.routine.name for p in g.pool.queue]

    async def body() -> None:
        with rig(max_concurrent=2) as g:
            g.spawner.hold(*names, "m6")
            for name in names:  # what a tick's claims hand over, in order
                run_id = f"{name}-slot"
                assert g.ledger.claim(
                    name,
                    "2026-12-02T09:00:00Z",
                    run_id=run_id,
                    trigger=Trigger.SCHEDULE,
                    status=RunStatus.QUEUED,
                    now=T0,
                )
                g.pool.enqueue(Pending(run_id, rs[name], Trigger.SCHEDULE, "2026-12-02T09:00:00Z"))
            await settle()
            assert status(g) == (["r1", "r2"], ["r3", "r4", "r5"])
            # A manual run joins the back of the queue.
            manual, _ = g.submit(rs["m6"])
            assert status(g) == (["r1", "r2"], ["r3", "r4", "r5", "m6"])
            # Whichever run ends, the next to start is the head of the queue.
            for name, expect in (
                ("r2", (["r1", "r3"], ["r4", "r5", "m6"])),
                ("r3", (["r1", "r4"], ["r5", "m6"])),
                ("r1", (["r4", "r5"], ["m6"])),
            ):
                g.spawner.release(name)
                await settle()
                assert status(g) == expect
            for name in ("r4", "r5", "m6"):
                g.spawner.release(name)
            while g.pool.running or g.pool.queue:
                await settle()
            assert g.spawner.peak == 2  # the limit was reached and never passed
            assert g.spawner.started[2:] == ["r3", "r4", "r5", "m6"]
            assert set(g.spawner.started[:2]) == {"r1", "r2"}
            assert set(g.statuses().values()) == {"ok"}
            [m6] = g.ledger.history("m6")
            assert (m6.run_id, m6.trigger) == (manual.run_id, "manual")

    run(body)


def test_a_queued_run_whose_next_slot_comes_due_skips_it() -> None:
    """(Was test_daemon_overlap.py's subprocess test of the same name: the scheduler's claims
    handed to the pool as a daemon's tick does, every assertion kept.)"""
    from routines.runs import slot_id
    from supervisor.engine.scheduler import Scheduler

    routines("blocker", "waiter")
    first, second = T0, T0 + timedelta(minutes=1)

    def status(g: Rig) -> tuple[list[str], list[str]]:
        running = [r.pending.routine.name for r in g.pool.running.values()]
        return running, [p.routine.name for p in g.pool.queue]

    def rows(g: Rig, name: str) -> list[tuple[str | None, str, str | None]]:
        history = reversed(g.ledger.history(name))
        return [(r.slot, str(r.status), r.detail) for r in history]

    async def body() -> None:
        with rig(max_concurrent=1) as g:
            g.spawner.hold("blocker")
            g.spawner.results["waiter"] = Result(status=RunStatus.OK, summary="waited")
            sched = Scheduler(g.ledger, ME)
            sched.sync(scan(paths()), g.ledger.states(), T0 - timedelta(seconds=30))

            def tick(now: datetime) -> None:
                for pending in sched.due(now, g.pool.busy):
                    g.pool.enqueue(pending)

            tick(first + timedelta(seconds=1))
            await settle()
            assert status(g) == (["blocker"], ["waiter"])
            tick(second + timedelta(seconds=1))
            await settle()
            assert status(g) == (["blocker"], ["waiter"])  # still waiting, once
            g.spawner.release("blocker")
            while g.pool.running or g.pool.queue:
                await settle()
            assert rows(g, "waiter") == [
                (slot_id(first), "ok", "waited"),
                (slot_id(second), "skipped", "previous run still going"),
            ]
            assert [(s, st) for s, st, _ in rows(g, "blocker")] == [
                (slot_id(first), "ok"),
                (slot_id(second), "skipped"),
            ]

    run(body)


class _BudgetReadFails(Ledger):
    """A real ledger file whose budget read fails as during an outage. A stand-in: nothing
    real makes only this one read of an SQLite file fail (tests/fleet stops a real
    PostgreSQL for the whole ledger)."""

    def spent_today(self, routine: str, zone: Any, now: datetime) -> float:
        raise LedgerUnavailable(Unavailable.UNREACHABLE, "the fleet database: unreachable")


def test_a_run_the_ledger_kept_from_starting_is_skipped_with_why_never_failed() -> None:
    rs = routines("spender")

    async def body() -> None:
        with _BudgetReadFails(paths().ledger) as ledger:
            ledger.set_failure_streak("spender", 2)
            g = Rig(ledger)
            pending, done = g.submit(rs["spender"])
            reply = await done
            assert reply.status == RunStatus.SKIPPED
            assert reply.detail == (
                "not run: the ledger is unavailable (unreachable): the fleet database: unreachable"
            )
            assert g.spawner.started == []  # no worker
            row = ledger.run(pending.run_id)
            assert row is not None and row.status == RunStatus.SKIPPED
            assert ledger.state("spender").failure_streak == 2  # no strike

    run(body)
