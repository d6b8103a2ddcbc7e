"""The run fence, catch-up and the three strikes with the history compacted under them: none of
them reads old run rows (claims, the cursor and the failure streak live elsewhere), so a year
folded into day rows changes nothing they decide. Real ledger file, FakeClock, no daemon.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from ipc import Result
from routines.ledger import Ledger
from routines.ledger.rundays import compaction_line
from routines.runs import RunStatus, Trigger
from routines.spec.paths import paths
from routines.spec.registry import scan
from supervisor.engine.finish import finish_run
from supervisor.engine.scheduler import Scheduler
from supervisor.engine.spawn import UsageTotals, WorkerOutcome
from tests.supervisor.daemonkit import command_routine, write_routine

T0 = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
OLD = T0 - timedelta(days=120)
UTC_ZONE = ZoneInfo("UTC")


def never_busy(name: str) -> bool:
    return False


def end(ledger: Ledger, name: str, run_id: str, status: str, at: datetime) -> Any:
    r = scan(paths()).get(name)
    assert r is not None and r.routine is not None
    result = Result(
        status=RunStatus(status), summary="", error="boom" if status == "failed" else ""
    )
    return finish_run(
        ledger,
        paths(),
        r.routine,
        run_id=run_id,
        trigger=Trigger.SCHEDULE,
        slot=None,
        started_at=at,
        out=WorkerOutcome(result, 0, UsageTotals()),
        timeout_sec=600,
        now=at + timedelta(seconds=5),
    )


def compact_all(ledger: Ledger, now: datetime) -> int:
    total = 0
    while n := ledger.compact(compaction_line(now, UTC_ZONE, 90), UTC_ZONE, 50):
        total += n
    return total


def test_fence_catch_up_and_strikes_hold_over_compacted_history() -> None:
    write_routine("hourly", command_routine("true", schedule='cron = "0 * * * *"'))
    reg = scan(paths())
    ledger = Ledger(paths().ledger)
    sched = Scheduler(ledger, (1, 1.0))
    sched.sync(reg, ledger.states(), OLD - timedelta(minutes=30))
    # Three hours of runs 120 days ago: two of them failed, the last one too.
    ran: list[str] = []
    for h in range(3):
        now = OLD + timedelta(hours=h, seconds=5)
        [p] = sched.due(now, never_busy)
        ledger.start_run(p.run_id, now=now, worker_pid=None)
        fin = end(ledger, "hourly", p.run_id, "ok" if h == 0 else "failed", now)
        assert p.slot is not None  # a scheduled run has its slot
        ran.append(p.slot)
    assert not fin.disabled and ledger.state("hourly").failure_streak == 2
    assert compact_all(ledger, T0) == 3
    assert ledger.history("hourly") == []
    [day] = ledger.days("hourly")
    assert (day.runs, day.counts["ok"], day.counts["failed"]) == (3, 1, 2)

    # Fence: a clock set back to then, and a new process, claim none of those slots again.
    again = Scheduler(ledger, (2, 2.0))
    again.sync(reg, ledger.states(), OLD - timedelta(minutes=30))
    for h in range(3):
        assert again.due(OLD + timedelta(hours=h, seconds=5), never_busy) == []
    assert all(ledger.is_claimed("hourly", s) for s in ran)

    # Catch-up: back at T0 (120 days later), one run stands in for everything missed.
    back = Scheduler(ledger, (3, 3.0))
    back.sync(reg, ledger.states(), T0 + timedelta(minutes=10))
    [p] = back.due(T0 + timedelta(minutes=10), never_busy)
    assert p.trigger == "catch_up" and p.detail.startswith("stands in for ")
    missed = int(p.detail.split()[3].replace(",", "").rstrip("+"))
    assert missed > 2000  # about 120 days of hourly slots, bounded by the planner

    # Strikes: the streak survived the compaction; this third failure disables the routine.
    ledger.start_run(p.run_id, now=T0 + timedelta(minutes=10), worker_pid=None)
    fin = end(ledger, "hourly", p.run_id, "failed", T0 + timedelta(minutes=10))
    assert fin.disabled
    state = ledger.state("hourly")
    assert (state.failure_streak, state.enabled_override) == (3, False)
    assert ledger.last_runs()["hourly"].run_id == p.run_id
    ledger.close()
