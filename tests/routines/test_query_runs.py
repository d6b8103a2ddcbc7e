"""The read model's run rows (routines.query.runs) as data, from the memory ledger: a routine's
history with its compacted days, one run, a conversation's runs with their depth, and the runs
of a day as `brief` and the dashboard's brief page get them. On a fleet the same functions read
the fleet's ledger: tests/fleet/test_fleet_cli.py, tests/fleet/test_fleet_dashboard.py."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from routines.ledger.memory import MemoryLedger
from routines.query.runs import Quiet, day_runs, one_run, run_history, thread_runs
from routines.runs import Outcome, RunEnd, RunStatus, Trigger

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
UTC_ZONE = ZoneInfo("UTC")


def ran(
    ledger: MemoryLedger,
    name: str,
    at: datetime,
    status: RunStatus = RunStatus.OK,
    *,
    outcome: Outcome | None = Outcome.DONE,
    detail: str = "",
    output: str | None = None,
    parent: str | None = None,
) -> str:
    run_id = f"{at:%Y%m%dT%H%M%S}-{name}"
    trigger = Trigger.REPLY if parent else Trigger.SCHEDULE
    ledger.record_run(
        name, run_id=run_id, trigger=trigger, status=RunStatus.RUNNING, now=at, parent_run_id=parent
    )
    end = RunEnd(status, outcome=outcome, detail=detail, output_file=output, dollars=0.5)
    ledger.finish_run(run_id, end, now=at + timedelta(seconds=30))
    return run_id


def test_history_is_the_newest_runs_then_the_compacted_days_that_fill_the_limit() -> None:
    ledger = MemoryLedger()
    old = [ran(ledger, "news", NOW - timedelta(days=40 - n)) for n in range(3)]
    new = [ran(ledger, "news", NOW - timedelta(hours=3 - n)) for n in range(3)]
    ran(ledger, "mail", NOW - timedelta(hours=1))
    assert ledger.compact(NOW - timedelta(days=30), UTC_ZONE) == 3
    h = run_history(ledger, "news", 5)
    assert [r.run_id for r in h.runs] == new[::-1]  # newest first, only this routine's
    assert (h.machines, h.this) == (None, None)  # one machine: no machine column
    assert [d.day for d in h.days] == ["2026-10-26", "2026-10-25"]  # two of the three days
    assert all(r.run_id not in old for r in h.runs)
    assert run_history(ledger, "news", 2).days == ()  # runs fill it: no day rows
    assert run_history(ledger, "news", 5, days=False).days == ()


def test_one_run_is_the_ledgers_row_or_none() -> None:
    ledger = MemoryLedger()
    run_id = ran(ledger, "news", NOW, detail="three items")
    row = one_run(ledger, run_id)
    assert row is not None and (row.routine, row.status, row.detail) == (
        "news",
        "ok",
        "three items",
    )
    assert one_run(ledger, "no-such-run") is None
    assert one_run(None, run_id) is None  # no ledger yet


def test_a_thread_is_each_run_of_the_routine_with_its_depth_and_what_was_said() -> None:
    ledger = MemoryLedger()
    first = ran(ledger, "mail", NOW)
    reply = ran(ledger, "mail", NOW + timedelta(minutes=5), parent=first)
    again = ran(ledger, "mail", NOW + timedelta(minutes=9), parent=reply)
    rows = thread_runs(ledger, "mail", again, lambda r: f"said to {r.run_id}")
    assert [(t.row.run_id, t.depth, t.said) for t in rows] == [
        (first, 0, ""),  # the first run: nobody replied to start it
        (reply, 1, f"said to {reply}"),
        (again, 2, f"said to {again}"),
    ]
    assert thread_runs(ledger, "news", again, lambda r: "") == []  # another routine's


def test_the_runs_of_a_day_say_what_failed_what_was_quiet_and_each_outputs_run() -> None:
    ledger = MemoryLedger()
    wrote = ran(ledger, "news", NOW - timedelta(hours=2), output="/s/news/2026-12-03-1000.md")
    late = ran(ledger, "news", NOW - timedelta(hours=13), output="/s/news/2026-12-02-2300.md")
    broke = ran(ledger, "mail", NOW - timedelta(hours=1), RunStatus.FAILED, detail="imap")
    ran(ledger, "inbox", NOW - timedelta(hours=4), outcome=Outcome.NOTHING_TO_DO, detail="none")
    ran(ledger, "inbox", NOW - timedelta(hours=3), outcome=Outcome.NOTHING_TO_DO, detail="still")
    waits = ran(ledger, "ask", NOW - timedelta(minutes=5), RunStatus.NEEDS_YOU, outcome=None)
    d = day_runs(ledger, [date(2026, 12, 3)], UTC_ZONE)
    assert wrote in {r.run_id for r in d.runs} and late not in {r.run_id for r in d.runs}
    # An output is named in its routine's zone: yesterday's file still finds its run.
    assert d.by_output["/s/news/2026-12-02-2300.md"].run_id == late
    assert [r.run_id for r in d.failed] == [broke]
    assert d.quiet == (Quiet("inbox", 2, "still", (NOW - timedelta(hours=3)).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ")),)  # fmt: skip
    assert d.paused == frozenset({waits}) and d.needs_you == 1
    assert d.elsewhere == {}  # one machine
    assert [r.run_id for r in day_runs(ledger, [date(2026, 12, 2)], UTC_ZONE).runs] == [late]
