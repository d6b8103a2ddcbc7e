"""What happens after a worker ends (supervisor/engine/finish.py), on a real ledger and real files:
the
final status, the output moved in by rename, last-run.json, the failure streak and the
notifications; and the pool's refusal of a run whose day's budget is spent, which starts no worker.
"""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ipc import Result
from routines.ledger import Ledger
from routines.runs import Outcome, RunEnd, RunStatus, Trigger
from routines.spec import Routine
from routines.spec.config import Config
from routines.spec.paths import paths
from routines.spec.registry import scan
from routines.store import read_json
from supervisor.engine.clock import FakeClock
from supervisor.engine.finish import Notification, final_status, finish_run, notifications_for
from supervisor.engine.limits import REPORT_GRACE_SEC, allowance_for, run_limit
from supervisor.engine.pool import Pool
from supervisor.engine.scheduler import Pending
from supervisor.engine.spawn import StopReason, UsageTotals, WorkerOutcome
from tests.supervisor.daemonkit import command_routine, write_routine

T0 = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


def routine(name: str = "rec", text: str | None = None) -> Routine:
    write_routine(name, text or command_routine("true"))
    r = scan(paths()).get(name)
    assert r is not None and r.routine is not None, r
    return r.routine


def ok_with_output(run_id: str, r: Routine, text: str = "# Title\n\nbody\n") -> WorkerOutcome:
    scratch = paths().scratch(r.name, run_id)
    scratch.mkdir(parents=True)
    (scratch / "2026-12-02-0900.md").write_text(text)
    result = Result(
        status=RunStatus.OK, outcome=Outcome.DONE, summary="body", output_file="2026-12-02-0900.md"
    )
    return WorkerOutcome(result, 0, UsageTotals(input=10, output=5, dollars=0.25))


def finish(ledger: Ledger, r: Routine, run_id: str, out: WorkerOutcome, **kw: Any) -> Any:
    ledger.record_run(
        r.name, run_id=run_id, trigger=Trigger.SCHEDULE, status=RunStatus.RUNNING, now=T0
    )
    return finish_run(
        ledger,
        paths(),
        r,
        run_id=run_id,
        trigger=Trigger.SCHEDULE,
        slot="2026-12-02T09:00:00Z",
        started_at=T0,
        out=out,
        timeout_sec=600,
        now=T0 + timedelta(seconds=3),
        **kw,
    )


def failed(why: str = "exit 1") -> WorkerOutcome:
    return WorkerOutcome(Result(status=RunStatus.FAILED, summary=why, error=why), 0, UsageTotals())


def test_the_output_is_moved_in_by_rename_and_last_run_json_written() -> None:
    r = routine()
    out = ok_with_output("run-1", r)
    scratch_file = paths().scratch(r.name, "run-1") / "2026-12-02-0900.md"
    inode = scratch_file.stat().st_ino
    with Ledger(paths().ledger) as ledger:
        fin = finish(ledger, r, "run-1", out, note="stands in for 3 missed runs")
        row = ledger.run("run-1")
    stored = paths().routine_state(r.name) / "2026-12-02-0900.md"
    assert fin.output == stored and stored.stat().st_ino == inode  # moved, not copied
    assert stored.read_text() == "# Title\n\nbody\n"
    assert not paths().scratch(r.name, "run-1").exists()
    assert row is not None
    assert (row.status, row.outcome, row.dollars) == ("ok", "done", 0.25)
    assert row.output_file == str(stored)
    assert row.detail == "stands in for 3 missed runs; body"
    last = read_json(paths().last_run(r.name))
    assert (last["run_id"], last["status"], last["output_file"], last["duration_sec"]) == (
        "run-1",
        "ok",
        str(stored),
        3.0,
    )
    assert last["error"] is None and last["slot"] == "2026-12-02T09:00:00Z"
    # Written by temp file and rename: nothing else is left beside it.
    names = sorted(p.name for p in paths().routine_state(r.name).iterdir())
    assert names == [".scratch", "2026-12-02-0900.md", "last-run.json"]


def test_two_outputs_of_one_minute_do_not_overwrite_each_other() -> None:
    r = routine()
    with Ledger(paths().ledger) as ledger:
        first = finish(ledger, r, "run-1", ok_with_output("run-1", r, "one"))
        second = finish(ledger, r, "run-2", ok_with_output("run-2", r, "two"))
    assert first.output is not None and second.output is not None
    assert (first.output.name, second.output.name) == ("2026-12-02-0900.md", "2026-12-02-0900-2.md")
    assert (first.output.read_text(), second.output.read_text()) == ("one", "two")


def test_a_file_output_is_copied_to_its_path(tmp_path: Path) -> None:
    target = tmp_path / "out" / "report.md"
    r = routine(
        "filed",
        command_routine("true", extra=f'[output]\ntype = "file"\npath = "{target}"\n'),
    )
    with Ledger(paths().ledger) as ledger:
        fin = finish(ledger, r, "run-1", ok_with_output("run-1", r, "# Report\n"))
    assert fin.status == "ok"
    assert target.read_text() == "# Report\n"
    assert fin.output is not None and fin.output.read_text() == "# Report\n"


def test_an_output_that_cannot_be_moved_in_is_a_delivery_problem_beside_ok(
    not_root: None,
) -> None:
    r = routine()
    with Ledger(paths().ledger) as ledger:
        ledger.set_failure_streak(r.name, 2)
    out = ok_with_output("run-1", r)
    state = paths().routine_state(r.name)
    state.chmod(0o555)
    try:
        with Ledger(paths().ledger) as ledger:
            fin = finish(ledger, r, "run-1", out)
            streak = ledger.state(r.name).failure_streak
    finally:
        state.chmod(0o755)
    kept = state / ".scratch" / "run-1"
    assert fin.status == "ok" and fin.output is None and not fin.disabled
    assert fin.detail.startswith("body; output not delivered: could not save it: Permission denied")
    assert fin.detail.endswith(f"; it is kept in {kept}")
    assert streak == 0  # an ok run resets the streak; it never adds a strike
    assert [n.title for n in fin.notifications] == [f"{r.name}: output not delivered"]
    assert [p.name for p in state.iterdir()] == [".scratch"]
    assert (kept / "2026-12-02-0900.md").read_text() == "# Title\n\nbody\n"


def stopped(reason: StopReason) -> WorkerOutcome:
    return WorkerOutcome(None, -15, UsageTotals(), stopped=reason)


def reported(**kw: Any) -> WorkerOutcome:
    return WorkerOutcome(Result(**kw), 0, UsageTotals())


@pytest.mark.parametrize(
    ("out", "status", "detail"),
    [
        (stopped(StopReason.TIMEOUT), "timeout", "stopped after 600s (run_timeout_sec)"),
        (stopped(StopReason.SHUTDOWN), "interrupted", "the daemon stopped while it ran"),
        (
            stopped(StopReason.BUDGET),
            "budget",
            "stopped by the supervisor: the run spent past its allowance",
        ),
        (WorkerOutcome(None, -9, UsageTotals(), error="killed"), "failed", "killed"),
        (reported(status="weird"), "failed", "the worker reported an unknown status 'weird'"),
        (reported(status="failed", summary="s", error="e"), "failed", "e"),
        (reported(status="budget", summary="spent"), "budget", "spent"),
        (reported(status="ok", summary="fine"), "ok", "fine"),
        # Blocked calls are said beside how it ended: never a clean-looking run.
        (
            reported(status="ok", summary="fine", refused_calls=2),
            "ok",
            "fine · 2 tool calls refused",
        ),
        (reported(status="ok", refused_calls=1), "ok", "1 tool call refused"),
        (
            reported(status="failed", error="e", refused_calls=1),
            "failed",
            "e · 1 tool call refused",
        ),
        (
            reported(status="needs_you", summary="waiting for you: send-reply"),
            "needs_you",
            "waiting for you: send-reply",
        ),
    ],
)
def test_final_status(out: WorkerOutcome, status: str, detail: str) -> None:
    assert final_status(out, 600) == (status, detail)


def test_three_strikes_and_what_does_not_count() -> None:
    r = routine("flaky", command_routine("true", extra="[output]\nnotify = true\n"))
    runs = iter(range(100))

    def end(out: WorkerOutcome) -> Any:
        return finish(ledger, r, f"run-{next(runs)}", out)

    shutdown, budget, timeout = (
        stopped(s) for s in (StopReason.SHUTDOWN, StopReason.BUDGET, StopReason.TIMEOUT)
    )
    with Ledger(paths().ledger) as ledger:
        end(failed())
        end(timeout)  # a timeout counts like a failure
        for out in (shutdown, budget):  # interrupted and budget do not count
            fin = end(out)
            assert not fin.disabled
        assert ledger.state("flaky").failure_streak == 2
        end(WorkerOutcome(Result(status=RunStatus.OK, summary="fine"), 0, UsageTotals()))
        assert ledger.state("flaky").failure_streak == 0  # ok resets
        end(failed())
        end(failed())
        fin = end(failed("the command exited with code 3"))
        state = ledger.state("flaky")
    assert fin.disabled
    assert (state.failure_streak, state.enabled_override) == (3, False)
    assert state.disabled_reason == "3 failed runs in a row; last: the command exited with code 3"
    assert state.enabled(True, r.identity) is False
    titles = [(n.title, n.urgency) for n in fin.notifications]
    assert titles == [("flaky failed", "normal"), ("flaky disabled", "critical")]
    assert "vinos-routine enable flaky" in fin.notifications[-1].body


def test_notifications_for_finished_runs() -> None:
    quiet = routine("quiet")
    loud = routine("loud", command_routine("true", extra="[output]\nnotify = true\n"))
    assert notifications_for(quiet, RunStatus.OK, Outcome.DONE, "fine", "# T\n\nbody") == []
    assert notifications_for(loud, RunStatus.OK, Outcome.DONE, "fine", "# T\n\nbody") == [
        Notification("loud: done", "body", "low")
    ]
    assert notifications_for(loud, RunStatus.OK, Outcome.NEEDS_ATTENTION, "x", "# T\n\nlook") == [
        Notification("loud: needs attention", "look", "normal")
    ]
    assert notifications_for(loud, RunStatus.TIMEOUT, None, "stopped after 5s", "") == [
        Notification("loud timeout", "stopped after 5s", "normal")
    ]
    assert notifications_for(loud, RunStatus.INTERRUPTED, None, "x", "") == []


def agent(name: str, on_exceed: str) -> Routine:
    return routine(
        name,
        f"""[routine]
enabled = false
[schedule]
cron = "0 6 * * *"
timezone = "UTC"
[agent]
route = "anthropic"
system = "s"
[budget]
max_dollars_per_day = 0.50
on_exceed = "{on_exceed}"
""",
    )


def test_the_budget_refusal_shows_enough_digits_to_tell_the_amounts_apart() -> None:
    r = agent("spent", "skip")  # max_dollars_per_day = 0.50
    assert allowance_for(r, 0.5004).detail == "daily budget spent: $0.5004 of $0.5000"
    assert allowance_for(r, 0.61).detail == "daily budget spent: $0.61 of $0.50"


@pytest.mark.parametrize("on_exceed", ["skip", "notify"])
def test_a_run_whose_day_is_spent_is_refused_without_a_worker(
    tmp_path: Path, on_exceed: str
) -> None:
    r = agent("spent", on_exceed)
    started = tmp_path / "worker-started"
    clock = FakeClock(T0)
    notes: list[Notification] = []
    with Ledger(paths().ledger) as ledger:
        ledger.record_run(
            r.name, run_id="earlier", trigger=Trigger.SCHEDULE, status=RunStatus.RUNNING, now=T0
        )
        ledger.finish_run("earlier", now=T0, end=RunEnd(status=RunStatus.OK, dollars=0.5))
        ledger.set_failure_streak(r.name, 2)
        ledger.record_run(
            r.name, run_id="now", trigger=Trigger.MANUAL, status=RunStatus.QUEUED, now=T0
        )

        async def go() -> Any:
            pool = Pool(
                ledger=ledger,
                paths=paths(),
                config=Config(),
                clock=clock,
                notify=notes.append,
                on_change=lambda: None,
                # Would leave a file behind if it were ever started.
                worker_argv=[sys.executable, "-c", f"open({str(started)!r}, 'w')"],
            )
            done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            pending = Pending("now", r, Trigger.MANUAL, None, "manual run")
            pending.on_done.append(done)
            pool.enqueue(pending)
            return await done

        fin = asyncio.run(go())
        row = ledger.run("now")
        streak = ledger.state(r.name).failure_streak
    assert fin.status == "budget"
    assert fin.detail == "daily budget spent: $0.50 of $0.50"
    assert row is not None and (row.status, row.dollars) == ("budget", 0.0)
    assert streak == 2  # budget is not a strike
    assert not started.exists()
    assert not os.path.exists(paths().scratch(r.name, "now"))
    if on_exceed == "notify":
        assert notes == [Notification("spent: budget", "daily budget spent: $0.50 of $0.50")]
    else:
        assert notes == []


def test_a_file_output_path_expands_date_and_home(monkeypatch: pytest.MonkeyPatch) -> None:
    from supervisor.engine.finish import file_output_path

    monkeypatch.setenv("HOME", "/home/ana")
    out = WorkerOutcome(
        Result(status=RunStatus.OK, output_file="2026-07-25-0600.md"), 0, UsageTotals()
    )
    assert file_output_path("~/briefs/{{date}}.md", out) == Path("/home/ana/briefs/2026-07-25.md")
    assert file_output_path("/srv/x/{{date}}-{{date}}.md", out) == Path(
        "/srv/x/2026-07-25-2026-07-25.md"
    )


AGENT = """[routine]
enabled = false
[schedule]
cron = "0 6 * * *"
timezone = "UTC"
[agent]
route = "ollama"
system = "Think."
run_timeout_sec = 5
"""


def test_the_workers_own_timeout_wins_over_the_backstop() -> None:
    """Which message a user sees must not depend on the machine's speed: the backstop waits
    REPORT_GRACE_SEC past the limit the worker keeps itself, and a worker's own `timeout`
    report that reached the pipe is recorded even when the backstop's kill ended it."""
    r = routine("slow", AGENT)
    limit = run_limit(r)
    assert limit.seconds == 5 + REPORT_GRACE_SEC
    assert limit.key == "run_timeout_sec = 5, and the worker did not report"
    said = Result(
        status=RunStatus.TIMEOUT, error="the run reached its time limit (run_timeout_sec = 5)"
    )
    both = WorkerOutcome(said, -15, UsageTotals(), stopped=StopReason.TIMEOUT)
    assert final_status(both, limit.seconds, limit.key) == (
        "timeout",
        "the run reached its time limit (run_timeout_sec = 5)",
    )
    silent = WorkerOutcome(None, -15, UsageTotals(), stopped=StopReason.TIMEOUT)
    assert final_status(silent, limit.seconds, limit.key) == (
        "timeout",
        "stopped after 15s (run_timeout_sec = 5, and the worker did not report)",
    )
