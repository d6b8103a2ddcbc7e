"""A fleet's pool fences its runs (supervisor/engine/pool.py `fence`, `leases_renewed`), on a
FakeSpawner and a fake lease book: each worker is told its lease's deadline when it starts
and at each renewal, and a run whose lease a renewal found gone is stopped at once and
recorded `interrupted (lease lost)`, never `ok`; a waiting one is dropped the same way. The
fleet's own timing decisions (supervisor/fleet/plan.py `fence`, `lost_leases`, and
supervisor/fleet/member.py LeaseBook) on a fake clock."""

from __future__ import annotations

import asyncio

import pytest

from routines.ledger import Ledger
from routines.runs import RunStatus, Trigger
from routines.spec.config import Config
from routines.spec.paths import paths
from supervisor.engine.clock import FakeClock
from supervisor.engine.pool import Pool
from supervisor.engine.scheduler import Pending
from supervisor.engine.spawn import StopReason
from supervisor.fleet.member import LeaseBook, Renewal
from supervisor.fleet.plan import fence, lost_leases
from tests.supervisor.fakespawn import FakeSpawner, settle
from tests.supervisor.test_pool import ME, T0, routines, run


class Book:
    """Each run's deadline, as a LeaseBook would give it."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def deadline(self, run_id: str) -> float:
        self.asked.append(run_id)
        return 1000.0


def fleet_pool(ledger: Ledger, spawner: FakeSpawner, max_concurrent: int = 1) -> Pool:
    return Pool(
        ledger=ledger,
        paths=paths(),
        config=Config(max_concurrent=max_concurrent),
        clock=FakeClock(T0),
        notify=lambda n: None,
        on_change=lambda: None,
        spawner=spawner,
        fence=Book(),
    )


def test_a_worker_starts_with_its_deadline_and_hears_each_renewal() -> None:
    rs = routines("a")

    async def body() -> None:
        with Ledger(paths().ledger) as ledger:
            spawner = FakeSpawner()
            pool = fleet_pool(ledger, spawner)
            spawner.hold("a")
            pending, done = pool.submit_manual(rs["a"], owner=ME)
            await settle()
            [worker] = spawner.workers
            assert worker.job.lease_until == 1000.0
            pool.leases_renewed({pending.run_id: 1040.0, "someone-else": 5.0}, [])
            pool.leases_renewed({pending.run_id: 1080.0}, [])
            assert worker.leases == [1040.0, 1080.0]
            spawner.release("a")
            assert (await done).status == RunStatus.OK

    run(body)


def test_a_run_whose_lease_is_gone_is_stopped_at_once_and_recorded_lease_lost() -> None:
    rs = routines("a", "b")

    async def body() -> None:
        with Ledger(paths().ledger) as ledger:
            spawner = FakeSpawner()
            pool = fleet_pool(ledger, spawner, max_concurrent=1)
            spawner.hold("a", "b")
            a, a_done = pool.submit_manual(rs["a"], owner=ME)
            b, b_done = pool.submit_manual(rs["b"], owner=ME)  # waits: one at a time
            await settle()
            pool.leases_renewed({}, [a.run_id, b.run_id, "not-mine"])
            ra, rb = await asyncio.gather(a_done, b_done)
            assert spawner.workers[0].stop_reason == StopReason.LEASE
            assert spawner.started == ["a"]  # b never started
            for reply in (ra, rb):
                assert reply.status == RunStatus.INTERRUPTED
                assert "lease lost" in reply.detail
            for r in ledger.history(limit=10):
                assert (r.status, "lease lost" in (r.detail or "")) == ("interrupted", True)

    run(body)


def test_without_a_fence_a_run_has_no_deadline() -> None:
    rs = routines("a")

    async def body() -> None:
        with Ledger(paths().ledger) as ledger:
            spawner = FakeSpawner()
            pool = fleet_pool(ledger, spawner)
            pool.fence = None  # a machine alone, or a fleet machine's offline runs
            _, done = pool.submit_manual(rs["a"], owner=ME)
            await done
            assert spawner.workers[0].job.lease_until is None

    run(body)


def test_the_fence_keeps_the_worker_deadline_plus_its_kill_time_inside_the_lease() -> None:
    for expiry, renew in ((60.0, 15.0), (4.0, 0.5), (3.0, 0.5), (600.0, 30.0)):
        f = fence(expiry, renew)
        assert f.deadline + f.kill < f.expiry  # dead before the lease's expiry
        assert f.renew < f.deadline  # a renewal can come before the deadline
        assert f.taken_after >= f.kill  # and others wait a kill time past it
    assert (fence(60, 15).deadline, fence(60, 15).kill) == (50.0, 5.0)
    with pytest.raises(ValueError, match="renew more often"):
        fence(60, 55)


def test_a_renewal_judges_only_the_leases_committed_before_it_began() -> None:
    held = {"old": 10.0, "new": 20.0, "renewed": 5.0}
    # "new" was committed after the renewal began: the renewal may not have seen it.
    assert lost_leases(held, ["renewed"], renewal_began=15.0) == ["old"]
    assert lost_leases(held, ["renewed", "old"], renewal_began=15.0) == []


def test_the_lease_book_gives_deadlines_from_the_claim_then_from_each_renewal() -> None:
    f = fence(60, 15)
    book = LeaseBook(f, clock=lambda: 7000.0)
    book.made("r1", before=100.0, after=100.5)
    assert book.deadline("r1") == 100.0 + f.deadline  # counted from before the claim
    assert book.deadline("unknown") == 7000.0 + f.deadline
    deadlines, lost = book.renewed(Renewal(began=115.0, renewed=["r1"], ended=()))
    assert (deadlines, lost) == ({"r1": 115.0 + f.deadline}, [])
    book.made("r2", before=116.0, after=116.2)
    deadlines, lost = book.renewed(Renewal(began=130.0, renewed=["r2"], ended=()))
    assert (deadlines, lost) == ({"r2": 130.0 + f.deadline}, ["r1"])
    _, lost = book.renewed(Renewal(began=145.0, renewed=["r2"], ended=()))
    assert lost == []  # reported once


def test_a_run_claimed_in_another_ledger_is_recorded_there_and_holds_no_lease() -> None:
    """A fleet machine's run made offline (claimed in its own file while the fleet's database is
    away) goes through the one pool: it waits behind the fleet's run for max_concurrent, starts
    with no deadline (no lease to renew), and its rows are in the file it was claimed in."""
    rs = routines("fleet", "offline")

    async def body() -> None:
        with Ledger(paths().ledger) as fleet, Ledger(paths().state_dir / "own.db") as own:
            spawner = FakeSpawner()
            pool = fleet_pool(fleet, spawner, max_concurrent=1)
            spawner.hold("fleet", "offline")
            _, fleet_done = pool.submit_manual(rs["fleet"], owner=ME)
            slot = "2026-12-02T09:00:00Z"
            assert own.claim(
                "offline", slot, run_id="off-1", trigger=Trigger.SCHEDULE,
                status=RunStatus.QUEUED, now=T0,
            )  # fmt: skip
            pool.enqueue(Pending("off-1", rs["offline"], Trigger.SCHEDULE, slot, ledger=own))
            await settle()
            assert spawner.started == ["fleet"]  # one pool, one max_concurrent
            assert pool.recording_in(own) == 1
            spawner.release("fleet")
            await fleet_done
            await settle()
            assert spawner.started == ["fleet", "offline"]
            assert spawner.workers[1].job.lease_until is None
            spawner.release("offline")
            while pool.running:
                await settle()
            assert pool.recording_in(own) == 0
            assert [(r.run_id, r.status) for r in own.history("offline")] == [("off-1", "ok")]
            assert fleet.history("offline") == []
            assert [r.status for r in fleet.history("fleet")] == ["ok"]

    run(body)
