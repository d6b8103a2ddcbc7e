"""The ledger contract, run on the three stores: SQLite (`Ledger`, one machine), PostgreSQL
(`PgLedger`, a fleet) against a real cluster, and memory (`MemoryLedger`, the reference). What
the supervisor relies on: the fence (a slot claimed once; the cursor's compare-and-set; never
backwards), run rows, state and cursors, strikes, budgets, compaction through the pure fold,
migrations, and the requests for a person (proposals) and paused runs' conversations."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Protocol
from zoneinfo import ZoneInfo

import psycopg
import pytest

from routines import proposals
from routines.ledger import Ledger, LedgerError, RoutineState, iso
from routines.ledger.api import Store, Vacuum
from routines.ledger.memory import MemoryData, MemoryLedger
from routines.ledger.postgres import PgLedger
from routines.proposals import Decider, ProposalState
from routines.runs import Ended, Outcome, RunEnd, RunStatus, Strike, Trigger
from routines.spec.config import LedgerSettings
from supervisor.engine.clock import FakeClock
from supervisor.engine.housekeeping import Housekeeper
from tests.helpers import at

T0 = datetime(2026, 6, 1, 10, 0, tzinfo=UTC)
NY = ZoneInfo("America/New_York")
UTCZ = ZoneInfo("UTC")


class Contract(Store, Protocol):
    """A store as these tests drive it: the daemon's `Store`, and the methods only tests call
    (every store has them; the protocol the daemon uses does not)."""

    def is_claimed(self, routine: str, slot: str) -> bool: ...
    def advance_cursor(self, routine: str, slot: str) -> None: ...
    def oldest_run_start(self) -> str | None: ...


# The memory store's ledgers, by the name a test's `backend` gives it: connections opened with
# one name share its rows, as two connections to one SQLite file or database do.
_MEMORY: dict[str, MemoryData] = {}


@pytest.fixture(params=["sqlite", "postgresql", "memory"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "ledger.db")
    elif request.param == "memory":
        name = f"memory:{tmp_path}"
        _MEMORY[name] = MemoryData()
        yield name
        del _MEMORY[name]
    else:
        dsn: str = request.getfixturevalue("pg_dsn")
        yield dsn


def open_backend(where: str, machine: str = "m1") -> Contract:
    if where.startswith("host="):
        return PgLedger(where, machine)
    if where.startswith("memory:"):
        return MemoryLedger(_MEMORY[where])  # one machine's ledger, as SQLite's
    return Ledger(Path(where))


@pytest.fixture
def led(backend: str) -> Iterator[Contract]:
    ledger = open_backend(backend)
    try:
        yield ledger
    finally:
        ledger.close()


def sid(instant: datetime) -> str:
    return instant.strftime("%Y-%m-%dT%H:%M:%SZ")


def claim(led: Contract, slot: str, routine: str = "brief", **kw: object) -> bool:
    return led.claim(
        routine,
        slot,
        run_id=str(kw.pop("run_id", f"{routine}-{slot}")),
        trigger=Trigger.SCHEDULE,
        status=RunStatus(str(kw.pop("status", "queued"))),
        now=kw.pop("now", T0),  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )


def spend_id(routine: str, hour: int, dollars: float = 0.1) -> str:
    """The run id `spend` gives a run of `routine` at T0 + `hour` hours."""
    return f"{routine}-{iso(T0 + timedelta(hours=hour))}-{dollars}"


def spend(
    led: Contract, routine: str, when: datetime, dollars: float, status: str = "ok", **tokens: int
) -> str:
    """A finished run of `routine` started at `when` that cost `dollars` (and `tokens`)."""
    run_id = f"{routine}-{iso(when)}-{dollars}"
    led.record_run(
        routine, run_id=run_id, trigger=Trigger.MANUAL, status=RunStatus.RUNNING, now=when
    )
    end = RunEnd(RunStatus(status), dollars=dollars, **tokens)  # type: ignore[arg-type]
    led.finish_run(run_id, end, now=when + timedelta(seconds=30))
    return run_id


# -- the fence ------------------------------------------------------------------------------


def test_a_slot_is_claimed_once_with_its_row_and_cursor(led: Contract) -> None:
    slot = sid(T0)
    assert claim(led, slot, detail="on time", owner=(1234, 99.5))
    assert not claim(led, slot, run_id="other")
    assert not claim(led, slot, run_id="running", status="running")
    assert not claim(led, slot, run_id="skipped", status="skipped")
    assert led.is_claimed("brief", slot)
    assert not led.is_claimed("brief", sid(T0 + timedelta(days=1)))
    assert not led.is_claimed("digest", slot)
    [active] = led.active_runs()
    assert (active.run_id, active.status, active.slot) == (f"brief-{slot}", "queued", slot)
    assert (active.owner_pid, active.owner_started) == (1234, 99.5)
    [row] = led.history("brief")
    assert (row.trigger, row.detail, row.started_at, row.finished_at, row.duration_sec) == (
        "schedule",
        "on time",
        iso(T0),
        None,
        None,
    )
    assert (row.dollars, row.input_tokens, row.output_tokens, row.tool_calls) == (0, 0, 0, 0)
    assert led.state("brief").cursor == slot
    assert led.run("other") is None
    assert claim(led, slot, routine="digest")  # the same slot of another routine: its own


def test_the_cursor_compare_and_set_refuses_a_stale_plan(led: Contract) -> None:
    first, second = sid(T0), sid(T0 + timedelta(minutes=1))
    assert not claim(led, first, expect_cursor=sid(T0 - timedelta(days=1)))  # no state yet
    assert claim(led, first, expect_cursor=None)
    assert not claim(led, second, expect_cursor=None)  # planned before `first` was claimed
    assert not led.is_claimed("brief", second)
    assert led.run(f"brief-{second}") is None  # refused: nothing written
    assert claim(led, second, expect_cursor=first)
    assert led.state("brief").cursor == second


def test_the_cursor_never_moves_backwards(led: Contract) -> None:
    later, earlier = sid(T0 + timedelta(hours=1)), sid(T0)
    assert claim(led, later)
    assert claim(led, earlier)
    led.advance_cursor("brief", earlier)
    assert led.state("brief").cursor == later
    led.advance_cursor("brief", sid(T0 + timedelta(hours=2)))
    assert led.state("brief").cursor == sid(T0 + timedelta(hours=2))


def test_a_claim_moves_the_cursor_and_keeps_the_rest_of_the_state(led: Contract) -> None:
    led.enable(
        "brief",
        file_enabled=False,
        file_identity="f1",
        cursor=sid(T0 - timedelta(days=31)),
        fingerprint="f",
    )
    led.set_failure_streak("brief", 2)
    assert claim(led, sid(T0))
    s = led.state("brief")
    assert (s.cursor, s.failure_streak, s.enabled_override) == (sid(T0), 2, True)


def test_an_event_is_claimed_once_and_never_moves_the_cursor(led: Contract) -> None:
    assert claim(led, sid(T0))
    assert claim(led, "after:20261207T060001-up-a1b2c3", run_id="e1")
    assert not claim(led, "after:20261207T060001-up-a1b2c3", run_id="e2")
    assert led.state("brief").cursor == sid(T0)  # an event's id is no instant
    assert [r.slot for r in led.history("brief") if r.run_id == "e1"] == [
        "after:20261207T060001-up-a1b2c3"
    ]


def test_record_run_writes_a_row_without_a_claim(led: Contract) -> None:
    led.record_run(
        "brief", run_id="manual-1", trigger=Trigger.MANUAL, status=RunStatus.QUEUED, now=T0
    )
    assert led.run("manual-1") is not None
    assert not led.is_claimed("brief", "")
    assert led.state("brief") == RoutineState("brief")


def test_a_claim_whose_run_row_fails_leaves_neither_claim_nor_cursor(led: Contract) -> None:
    """A claim, its run row and the cursor are one transaction: a run id used already fails
    the run row after the claim and the cursor were written, and neither survives; the store
    takes the next claim as before. A reused run id is the caller's bug: it raises, never
    reads as "claimed before"."""
    assert claim(led, sid(T0), run_id="dup")
    later = sid(T0 + timedelta(days=1))
    with pytest.raises((sqlite3.IntegrityError, psycopg.IntegrityError, ValueError)):
        claim(led, later, run_id="dup")
    assert not led.is_claimed("brief", later)
    assert led.state("brief").cursor == sid(T0)
    assert [r.run_id for r in led.history("brief")] == ["dup"]
    assert claim(led, later, run_id="fresh")


def test_a_write_by_one_connection_is_read_by_another(backend: str) -> None:
    """Two connections to one store (the daemon and a CLI): what one commits, the other reads
    at once, the fence included."""
    one, two = open_backend(backend), open_backend(backend)
    try:
        assert claim(one, sid(T0), run_id="x")
        assert two.is_claimed("brief", sid(T0))
        assert not claim(two, sid(T0), run_id="y")
        two.finish_run("x", RunEnd(RunStatus.OK), now=T0 + timedelta(seconds=1))
        row = one.run("x")
        assert row is not None and row.status == "ok"
    finally:
        one.close()
        two.close()


def test_skipped_and_missed_claims_are_finished_zero_cost_rows(led: Contract) -> None:
    assert claim(led, sid(T0), status="missed", detail="3 missed runs")
    [row] = led.history("brief")
    assert (row.status, row.detail, row.dollars, row.finished_at, row.duration_sec) == (
        "missed",
        "3 missed runs",
        0,
        iso(T0),
        0.0,
    )
    assert led.active_runs() == []
    assert led.last_runs()["brief"].status == "missed"


def test_old_claims_are_pruned_and_the_cursor_keeps_them_away(led: Contract) -> None:
    now = T0 + timedelta(days=60)
    ages = {
        "old": timedelta(days=46),
        "edge": timedelta(days=45, seconds=1),
        "kept": timedelta(days=44, hours=23),
        "new": timedelta(0),
    }
    slots = {k: sid(now - age) for k, age in ages.items()}
    for k, age in ages.items():
        assert led.claim("brief", slots[k], run_id=k, trigger=Trigger.SCHEDULE,
                         status=RunStatus.QUEUED, now=now - age)  # fmt: skip
    assert led.prune_claims(now) == 2
    assert {k: led.is_claimed("brief", s) for k, s in slots.items()} == {
        "old": False,
        "edge": False,
        "kept": True,
        "new": True,
    }
    # The run rows and the cursor stay: only the fence entries go.
    assert len(led.history("brief")) == 4
    assert led.state("brief").cursor == slots["new"]
    assert led.prune_claims(now) == 0


# -- runs -----------------------------------------------------------------------------------


def test_a_run_starts_and_finishes_with_its_fields(led: Contract) -> None:
    assert claim(led, sid(T0), owner=(123, 4.5))
    run_id = f"brief-{sid(T0)}"
    led.start_run(run_id, now=T0 + timedelta(seconds=1), worker_pid=77)
    end = RunEnd(
        RunStatus.OK,
        outcome=Outcome.DONE,
        dollars=0.25,
        tools_used=("shell", "read"),
        escalated=True,
        input_tokens=10,
    )
    assert led.finish_run(run_id, end, now=T0 + timedelta(seconds=31))
    row = led.run(run_id)
    assert row is not None
    assert (row.status, row.outcome, row.dollars, row.tools_used, row.escalated) == (
        "ok",
        "done",
        0.25,
        ["shell", "read"],
        1,
    )
    assert row.duration_sec == pytest.approx(30.0)
    assert led.active_runs() == []
    last = led.last_runs()["brief"]
    assert (last.run_id, last.status, last.outcome) == (run_id, "ok", "done")
    # One ending only: a second one (an error path after ok) changes nothing.
    assert not led.finish_run(run_id, RunEnd(RunStatus.FAILED), now=T0 + timedelta(minutes=1))
    assert led.run(run_id).status == "ok"  # type: ignore[union-attr]
    # A row recorded finished (a skipped slot) is not active either.
    assert claim(led, sid(T0 + timedelta(hours=1)), run_id="sk", status="skipped")
    assert not led.finish_run("sk", RunEnd(RunStatus.FAILED), now=T0 + timedelta(hours=1))
    assert led.run("sk").status == "skipped"  # type: ignore[union-attr]
    with pytest.raises(KeyError):
        led.finish_run("missing", RunEnd(RunStatus.OK), now=T0)


def test_a_paused_run_holds_no_slot_and_goes_on_once(led: Contract) -> None:
    assert claim(led, sid(T0), owner=(123, 4.5))
    run_id = f"brief-{sid(T0)}"
    led.start_run(run_id, now=T0 + timedelta(seconds=1), worker_pid=77)
    paused = RunEnd(RunStatus.NEEDS_YOU, detail="waiting for you: send-reply", dollars=0.1)
    assert led.finish_run(run_id, paused, now=T0 + timedelta(seconds=5))
    # Not active (no process, no concurrency slot), but listed as paused, its cost kept.
    assert led.active_runs() == []
    [p] = led.paused_runs()
    assert (p.run_id, p.routine, p.status) == (run_id, "brief", "needs_you")
    assert led.run(run_id).dollars == 0.1  # type: ignore[union-attr]
    # It goes on once: of two answers racing, one moves it; its detail keeps both parts.
    later = T0 + timedelta(minutes=5)
    assert led.end_pause(run_id, RunStatus.RESUMED, "; approved by cli: resumed", now=later)
    assert not led.end_pause(run_id, RunStatus.EXPIRED, "; expired", now=later)
    row = led.run(run_id)
    assert row is not None
    assert (row.status, row.detail) == (
        "resumed",
        "waiting for you: send-reply; approved by cli: resumed",
    )
    assert led.paused_runs() == []
    assert not led.end_pause("missing", RunStatus.EXPIRED, "", now=later)
    # The routine's last run says how its pause ended (list's LAST), not "needs_you".
    last = led.last_runs()["brief"]
    assert (last.run_id, last.status) == (run_id, "resumed")


def test_every_field_of_a_finished_run_round_trips(led: Contract) -> None:
    assert claim(led, "s", run_id="r1")
    started = T0 + timedelta(seconds=5)
    led.start_run("r1", now=started, worker_pid=4321)
    (active,) = led.active_runs()
    assert (active.status, active.worker_pid) == ("running", 4321)
    end = RunEnd(
        status=RunStatus.OK,
        outcome=Outcome.DONE,
        detail="brief written",
        route="local->premium",
        model="claude-sonnet-4-6",
        escalated=True,
        escalated_reason="low_confidence",
        input_tokens=1200,
        output_tokens=300,
        local_input_tokens=900,
        local_output_tokens=20,
        tool_calls=3,
        tools_used=("read_files", "run_shell"),
        dollars=0.0081,
        output_file="/x/2024-06-01-1000.md",
    )
    led.finish_run("r1", end, now=started + timedelta(seconds=90))
    row = led.run("r1")
    assert row is not None
    assert row.as_json() == {
        "id": row.id,
        "routine": "brief",
        "run_id": "r1",
        "slot": "s",
        "trigger": "schedule",
        "status": "ok",
        "outcome": "done",
        "detail": "brief written",
        "started_at": iso(started),
        "finished_at": iso(started + timedelta(seconds=90)),
        "duration_sec": 90.0,
        "route": "local->premium",
        "model": "claude-sonnet-4-6",
        "escalated": 1,
        "escalated_reason": "low_confidence",
        "input_tokens": 1200,
        "output_tokens": 300,
        "local_input_tokens": 900,
        "local_output_tokens": 20,
        "tool_calls": 3,
        "tools_used": ["read_files", "run_shell"],
        "dollars": 0.0081,
        "output_file": "/x/2024-06-01-1000.md",
        "parent_run_id": None,
        "tried_model": None,
    }
    assert led.active_runs() == []


def test_a_kept_local_answer_records_the_model_that_answered_and_the_one_it_tried(
    led: Contract,
) -> None:
    """auto wanted the premium leg and could not reach it: `model` is the local model whose
    answer was kept, `tried_model` the premium model, each in its own column."""
    assert claim(led, "s", run_id="r1")
    led.start_run("r1", now=T0, worker_pid=4321)
    end = RunEnd(
        status=RunStatus.OK,
        outcome=Outcome.NEEDS_ATTENTION,
        detail="wanted to escalate: low_confidence; no premium key",
        route="local",
        model="qwen2.5-7b-instruct",
        escalated=False,
        escalated_reason="low_confidence",
        tried_model="claude-sonnet-4-6",
    )
    led.finish_run("r1", end, now=T0 + timedelta(seconds=30))
    row = led.run("r1")
    assert row is not None
    assert (row.model, row.tried_model, row.escalated) == (
        "qwen2.5-7b-instruct",
        "claude-sonnet-4-6",
        0,
    )


def test_a_given_duration_and_empty_tools_are_kept(led: Contract) -> None:
    led.record_run("brief", run_id="r", trigger=Trigger.MANUAL, status=RunStatus.RUNNING, now=T0)
    end = RunEnd(status=RunStatus.TIMEOUT, duration_sec=600.0, tools_used=())
    led.finish_run("r", end, now=T0 + timedelta(hours=1))
    row = led.run("r")
    assert row is not None
    assert (row.status, row.duration_sec, row.tools_used) == ("timeout", 600.0, [])


def test_last_runs_is_each_routines_newest_finished_run(led: Contract) -> None:
    spend(led, "a", at("2024-06-01 06:00"), 0.01, status="failed")
    spend(led, "a", at("2024-06-02 06:00"), 0.02, status="ok")
    assert claim(led, "s1", routine="a", now=at("2024-06-03 06:00"), status="skipped")
    assert claim(led, "s2", routine="a", now=at("2024-06-04 06:00"), status="running")
    spend(led, "b", at("2024-06-01 06:00"), 0.0, status="timeout")
    last = led.last_runs()
    assert {k: (v.status, v.started_at) for k, v in last.items()} == {
        "a": ("ok", iso(at("2024-06-02 06:00"))),
        "b": ("timeout", iso(at("2024-06-01 06:00"))),
    }


def test_history_is_newest_first_and_runs_between_is_bounded(led: Contract) -> None:
    for i in range(5):
        spend(led, "a" if i % 2 else "b", T0 + timedelta(hours=i), 0.1)
    assert [r.started_at for r in led.history(limit=3)] == [
        iso(T0 + timedelta(hours=h)) for h in (4, 3, 2)
    ]
    assert {r.routine for r in led.history("a")} == {"a"}
    got = led.runs_between(T0 + timedelta(hours=1), T0 + timedelta(hours=3))
    assert [r.started_at for r in got] == [iso(T0 + timedelta(hours=h)) for h in (2, 1)]
    # Two runs that started at once: the later recorded first.
    led.record_run(
        "a",
        run_id="tie",
        trigger=Trigger.MANUAL,
        status=RunStatus.QUEUED,
        now=T0 + timedelta(hours=3),
    )
    assert [r.run_id for r in led.history("a", limit=2)] == ["tie", spend_id("a", 3)]
    assert led.history("nobody") == []


def test_a_thread_is_its_first_run_then_every_reply_below_it(led: Contract) -> None:
    """`reply RUN TEXT` runs name the run they continue; `thread` of any run of the
    conversation is the whole of it, depth first, oldest first."""

    def record(run_id: str, minutes: int, parent: str | None) -> None:
        led.record_run("brief", run_id=run_id, trigger=Trigger.REPLY if parent else
                       Trigger.MANUAL, status=RunStatus.OK, now=T0 + timedelta(minutes=minutes),
                       parent_run_id=parent)  # fmt: skip

    record("root", 0, None)
    record("r1", 1, "root")
    record("r2", 2, "root")
    record("r1a", 3, "r1")
    record("other", 4, None)
    want = ["root", "r1", "r1a", "r2"]
    for member in want:
        assert [r.run_id for r in led.thread(member)] == want
    assert [r.run_id for r in led.thread("other")] == ["other"]
    assert [r.run_id for r in led.replies_to(["root", "r1"])] == ["r1", "r2", "r1a"]
    assert led.thread("unknown") == []


def test_last_started_here_is_the_newest_finished_run_of_this_machine(backend: str) -> None:
    """Since when the decisions on a machine's proposals are news to its next run."""
    here, there = open_backend(backend), open_backend(backend, machine="m2")
    try:
        assert here.last_started_here("brief") is None
        spend(here, "brief", T0, 0.1)
        spend(there, "brief", T0 + timedelta(hours=1), 0.1)  # another machine's, on a fleet
        here.record_run("brief", run_id="q", trigger=Trigger.MANUAL, status=RunStatus.QUEUED,
                        now=T0 + timedelta(hours=2))  # fmt: skip
        newest = T0 if isinstance(here, PgLedger) else T0 + timedelta(hours=1)
        assert here.last_started_here("brief") == iso(newest)
        assert there.last_started_here("brief") == iso(T0 + timedelta(hours=1))
    finally:
        here.close()
        there.close()


# -- state, strikes -------------------------------------------------------------------------


def test_state_round_trips_and_overrides_follow_the_file(led: Contract) -> None:
    assert led.state("x") == RoutineState("x")
    led.disable("x", file_enabled=True, file_identity="f1")
    led.set_failure_streak("x", 2)
    led.set_cursor("x", sid(T0), "fp1")
    st = led.state("x")
    assert (st.failure_streak, st.cursor, st.schedule_fingerprint) == (2, sid(T0), "fp1")
    assert st.enabled(True, "f1") is False  # the override holds while the file says what it said
    assert st.enabled(False, "f1") is False
    led.disable("x", file_enabled=False, file_identity="f1")
    assert led.state("x").enabled(True, "f1") is True  # the file changed since: it wins
    led.set_failure_streak("y", 1)
    assert led.states() == {"x": led.state("x"), "y": RoutineState("y", failure_streak=1)}
    # enable clears the streak and owes nothing from before: the cursor only moves forward.
    led.enable(
        "x",
        file_enabled=True,
        file_identity="f1",
        cursor=sid(T0 - timedelta(hours=1)),
        fingerprint="fp2",
    )
    st = led.state("x")
    assert (st.failure_streak, st.cursor, st.schedule_fingerprint) == (0, sid(T0), "fp2")
    assert st.enabled(True, "f1") is True
    led.set_cursor("x", sid(T0 - timedelta(days=3)))  # a clock that was wrong: anywhere
    assert led.state("x").cursor == sid(T0 - timedelta(days=3))


def test_an_override_is_bound_to_its_file_follows_its_edits_and_dies_with_it(
    led: Contract,
) -> None:
    led.enable("x", file_enabled=False, file_identity="f1", cursor=sid(T0), fingerprint="fp")
    assert led.state("x").enabled(False, "f1") is True
    # Another file under the name (a draft after `remove`, a user file over a system one)
    # starts from what it says.
    assert led.state("x").enabled(False, "f2") is False
    # An edit of f1 by its person (the daemon saw it change at its path) keeps the state.
    assert led.rebind_override("x", "f1", "f2") is True
    assert led.state("x").enabled(False, "f2") is True
    assert led.state("x").enabled(False, "f1") is False
    # Only from the file it is bound to, and never where there is no override.
    assert led.rebind_override("x", "f1", "f3") is False
    assert led.rebind_override("nothing", "f1", "f3") is False
    assert led.rebind_override("x", None, "f3") is False  # bound already: not a legacy row
    led.set_failure_streak("x", 2)
    led.clear_override("x")
    st = led.state("x")
    assert (st.enabled_override, st.file_identity, st.failure_streak) == (None, None, 0)
    assert st.cursor == sid(T0)  # what it handled stays handled
    assert st.enabled(False, "f2") is False and not st.overridden


def test_state_round_trips_every_column(led: Contract) -> None:
    led.disable(
        "a",
        file_enabled=True,
        file_identity="f1",
        reason="failed 3 times in a row",
        failure_streak=3,
    )
    led.set_cursor("a", "2024-06-01T06:00:00Z", "fp1")
    assert led.state("a") == RoutineState(
        "a",
        enabled_override=False,
        file_enabled_seen=True,
        file_identity="f1",
        failure_streak=3,
        disabled_reason="failed 3 times in a row",
        cursor="2024-06-01T06:00:00Z",
        schedule_fingerprint="fp1",
    )
    # An edited schedule resets the cursor (it may move anywhere, even back); a wrong clock
    # puts it back and keeps the fingerprint.
    led.set_cursor("a", None, "fp2")
    assert (led.state("a").cursor, led.state("a").schedule_fingerprint) == (None, "fp2")
    led.set_cursor("a", "2024-05-01T06:00:00Z")
    assert (led.state("a").cursor, led.state("a").schedule_fingerprint) == (
        "2024-05-01T06:00:00Z",
        "fp2",
    )


def test_enable_clears_the_streak_and_owes_nothing_from_before(led: Contract) -> None:
    led.disable(
        "a",
        file_enabled=True,
        file_identity="f1",
        reason="3 failed runs in a row",
        failure_streak=3,
    )
    led.set_cursor("a", "2024-06-01T06:00:00Z", "fp1")
    led.enable(
        "a", file_enabled=True, file_identity="f1", cursor="2024-06-05T08:00:00Z", fingerprint="fp1"
    )
    assert led.state("a") == RoutineState(
        "a",
        enabled_override=True,
        file_enabled_seen=True,
        file_identity="f1",
        failure_streak=0,
        disabled_reason=None,
        cursor="2024-06-05T08:00:00Z",
        schedule_fingerprint="fp1",
    )
    # The cursor never moves back on enable (a slot already handled is not owed again).
    led.enable(
        "a",
        file_enabled=False,
        file_identity="f1",
        cursor="2024-06-04T00:00:00Z",
        fingerprint="fp2",
    )
    s = led.state("a")
    assert (s.cursor, s.schedule_fingerprint, s.file_enabled_seen) == (
        "2024-06-05T08:00:00Z",
        "fp2",
        False,
    )
    # disable keeps the streak unless it is given (a new draft starts from 0).
    led.set_failure_streak("a", 2)
    led.disable("a", file_enabled=True, file_identity="f1")
    assert (led.state("a").failure_streak, led.state("a").enabled(True, "f1")) == (2, False)
    led.disable("a", file_enabled=True, file_identity="f1", failure_streak=0)
    assert led.state("a").failure_streak == 0


def test_three_strikes_state_is_shared_by_every_connection(backend: str) -> None:
    one, two = open_backend(backend, "m1"), open_backend(backend, "m2")
    try:
        one.set_failure_streak("flaky", 1)
        two.set_failure_streak("flaky", 2)
        two.disable(
            "flaky", file_enabled=True, file_identity="f1", reason="3 failed", failure_streak=3
        )
        st = one.state("flaky")
        assert (st.failure_streak, st.enabled_override, st.disabled_reason) == (
            3,
            False,
            "3 failed",
        )
    finally:
        one.close()
        two.close()


def test_a_strike_is_written_with_the_end_it_counts(led: Contract) -> None:
    rule = Strike(
        file_enabled=True, file_identity="flaky.toml", reason="3 failed runs in a row; last: exit 1"
    )

    def end(n: int, status: RunStatus) -> Ended:
        assert claim(led, sid(T0 + timedelta(hours=n)), routine="flaky")
        run_id = f"flaky-{sid(T0 + timedelta(hours=n))}"
        return led.finish_run(run_id, RunEnd(status), now=T0 + timedelta(hours=n), strike=rule)

    assert end(0, RunStatus.FAILED) is Ended.ENDED
    assert led.state("flaky").failure_streak == 1
    assert end(1, RunStatus.OK) is Ended.ENDED  # ok resets
    assert led.state("flaky").failure_streak == 0
    assert end(2, RunStatus.TIMEOUT) is Ended.ENDED
    assert end(3, RunStatus.INTERRUPTED) is Ended.ENDED  # neither counts nor resets
    assert end(4, RunStatus.FAILED) is Ended.ENDED
    assert led.state("flaky").failure_streak == 2
    assert end(5, RunStatus.FAILED) is Ended.DISABLED
    st = led.state("flaky")
    assert (st.failure_streak, st.enabled(True, "flaky.toml"), st.disabled_reason) == (
        3,
        False,
        rule.reason,
    )
    # A second ending of a run writes nothing, its strike included.
    again = f"flaky-{sid(T0 + timedelta(hours=5))}"
    assert led.finish_run(again, RunEnd(RunStatus.FAILED), now=T0, strike=rule) is (
        Ended.NOT_ACTIVE
    )
    assert led.state("flaky").failure_streak == 3


@pytest.fixture(params=["sqlite", "postgresql"])
def sql_backend(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "ledger.db")
    dsn: str = request.getfixturevalue("pg_dsn")
    return dsn


def test_a_strike_that_cannot_be_written_leaves_the_run_unended(sql_backend: str) -> None:
    """One transaction: when the streak's write fails, the end is not written either (the
    daemon keeps the result and writes both later). A trigger refuses routine_state's writes
    (the memory store has no partial writes to show)."""
    led = open_backend(sql_backend)
    try:
        assert claim(led, sid(T0), routine="flaky")
        led.set_failure_streak("flaky", 1)
        if isinstance(led, PgLedger):
            with led.transaction() as cur:
                cur.execute(
                    "CREATE FUNCTION no_state() RETURNS trigger LANGUAGE plpgsql AS "
                    "$$ BEGIN RAISE EXCEPTION 'no state'; END $$"
                )
                cur.execute(
                    "CREATE TRIGGER no_state BEFORE UPDATE ON routine_state "
                    "FOR EACH ROW EXECUTE FUNCTION no_state()"
                )
        else:
            db = sqlite3.connect(sql_backend)
            db.execute(
                "CREATE TRIGGER no_state BEFORE UPDATE ON routine_state "
                "BEGIN SELECT RAISE(ABORT, 'no state'); END"
            )
            db.commit()
            db.close()
        rule = Strike(file_enabled=True, file_identity="flaky.toml", reason="3 failed")
        run_id = f"flaky-{sid(T0)}"
        with pytest.raises(Exception, match="no state"):
            led.finish_run(run_id, RunEnd(RunStatus.FAILED), now=T0, strike=rule)
        row = led.run(run_id)
        assert row is not None and row.status == "queued"  # not ended without its strike
        assert led.state("flaky").failure_streak == 1
    finally:
        if isinstance(led, PgLedger):
            with led.transaction() as cur:
                cur.execute("DROP TRIGGER IF EXISTS no_state ON routine_state")
                cur.execute("DROP FUNCTION IF EXISTS no_state()")
        led.close()


# -- money ----------------------------------------------------------------------------------


def test_budgets_count_every_connections_spending_by_the_routines_day(backend: str) -> None:
    one, two = open_backend(backend, "m1"), open_backend(backend, "m2")
    try:
        morning = datetime(2026, 6, 1, 5, 0, tzinfo=UTC)  # 01:00 in New York
        spend(one, "brief", morning, 0.5)
        spend(two, "brief", morning + timedelta(hours=2), 0.25)
        spend(two, "brief", morning - timedelta(hours=2), 9.0)  # the day before, in New York
        assert one.spent_on_day("brief", date(2026, 6, 1), NY) == pytest.approx(0.75)
        assert two.spent_today("brief", NY, morning + timedelta(hours=3)) == pytest.approx(0.75)
        [t] = one.totals(morning - timedelta(days=1), morning + timedelta(days=1))
        assert (t["routine"], t["runs"], t["dollars"]) == ("brief", 3, pytest.approx(9.75))
    finally:
        one.close()
        two.close()


def test_spent_today_for_many_routines_is_each_ones_spent_today_in_its_own_zone(
    backend: str,
) -> None:
    """`spent_today_many` (what `list` asks for every routine at once) answers, for each
    routine, exactly what `spent_today` answers for it alone: its own zone's day, every
    machine's runs, 0 for a routine with none today or none at all."""
    one, two = open_backend(backend, "m1"), open_backend(backend, "m2")
    try:
        now = datetime(2026, 6, 1, 5, 0, tzinfo=UTC)  # 01:00 in New York, 05:00 in UTC
        spend(one, "brief", now - timedelta(minutes=30), 0.5)  # today in both zones
        spend(two, "brief", now - timedelta(minutes=20), 0.25)
        spend(one, "digest", now - timedelta(hours=2), 2.0)  # yesterday in New York only
        spend(two, "sweep", now - timedelta(days=1), 7.0)  # yesterday everywhere
        zones = {"brief": NY, "digest": NY, "digest-utc": UTCZ, "sweep": UTCZ, "idle": UTCZ}
        spend(one, "digest-utc", now - timedelta(hours=2), 3.0)  # today in UTC
        got = two.spent_today_many(zones, now)
        assert got == {n: pytest.approx(one.spent_today(n, z, now)) for n, z in zones.items()}
        assert got == {
            "brief": pytest.approx(0.75),
            "digest": 0.0,
            "digest-utc": pytest.approx(3.0),
            "sweep": 0.0,
            "idle": 0.0,
        }
        assert one.spent_today_many({}, now) == {}
    finally:
        one.close()
        two.close()


def test_spent_today_uses_the_routines_own_midnight(led: Contract) -> None:
    # New York is UTC-4 in June: its 1 June runs from 04:00 UTC to 04:00 UTC on 2 June.
    spend(led, "a", at("2024-06-01 03:59:59"), 1.0)  # 31 May 23:59:59 in New York
    spend(led, "a", at("2024-06-01 04:00"), 2.0)  # 1 June 00:00 in New York
    spend(led, "a", at("2024-06-02 03:59:59"), 4.0)  # 1 June 23:59:59 in New York
    spend(led, "a", at("2024-06-02 04:00"), 8.0)  # 2 June 00:00 in New York
    spend(led, "b", at("2024-06-01 12:00"), 16.0)  # another routine
    noon_ny = at("2024-06-01 12:00", "America/New_York")
    assert led.spent_today("a", NY, noon_ny) == pytest.approx(6.0)
    assert led.spent_today("a", NY, at("2024-06-02 03:00")) == pytest.approx(6.0)
    assert led.spent_today("a", NY, at("2024-06-02 04:00")) == pytest.approx(8.0)
    # The same rows by the UTC calendar.
    assert led.spent_today("a", UTCZ, at("2024-06-01 12:00")) == pytest.approx(3.0)
    assert led.spent_on_day("a", date(2024, 6, 2), UTCZ) == pytest.approx(12.0)
    assert led.spent_on_day("a", date(2024, 5, 31), NY) == pytest.approx(1.0)


def test_spent_on_a_23_hour_day_spring_forward(led: Contract) -> None:
    # 10 March 2024 in New York: 00:00 EST (05:00 UTC) to 24:00 EDT (04:00 UTC on 11 March).
    spend(led, "a", at("2024-03-10 04:59:59"), 1.0)  # 9 March 23:59:59 EST
    spend(led, "a", at("2024-03-10 05:00"), 2.0)  # 10 March 00:00 EST
    spend(led, "a", at("2024-03-10 07:30"), 4.0)  # 10 March 03:30 EDT, after the gap
    spend(led, "a", at("2024-03-11 03:59:59"), 8.0)  # 10 March 23:59:59 EDT
    spend(led, "a", at("2024-03-11 04:00"), 16.0)  # 11 March 00:00 EDT
    assert led.spent_on_day("a", date(2024, 3, 10), NY) == pytest.approx(14.0)
    assert led.spent_on_day("a", date(2024, 3, 9), NY) == pytest.approx(1.0)
    assert led.spent_on_day("a", date(2024, 3, 11), NY) == pytest.approx(16.0)


def test_spent_on_a_25_hour_day_fall_back(led: Contract) -> None:
    # 3 November 2024 in New York: 00:00 EDT (04:00 UTC) to 24:00 EST (05:00 UTC on 4 Nov).
    spend(led, "a", at("2024-11-03 03:59:59"), 1.0)  # 2 Nov 23:59:59 EDT
    spend(led, "a", at("2024-11-03 05:30"), 2.0)  # 01:30 EDT, the first one
    spend(led, "a", at("2024-11-03 06:30"), 4.0)  # 01:30 EST, the second one
    spend(led, "a", at("2024-11-04 04:30"), 8.0)  # 3 Nov 23:30 EST (would be 4 Nov in EDT)
    spend(led, "a", at("2024-11-04 05:00"), 16.0)  # 4 Nov 00:00 EST
    assert led.spent_on_day("a", date(2024, 11, 3), NY) == pytest.approx(14.0)
    assert led.spent_on_day("a", date(2024, 11, 4), NY) == pytest.approx(16.0)
    assert led.spent_today("a", NY, at("2024-11-04 04:59")) == pytest.approx(14.0)


def test_totals_per_routine_biggest_spender_first(led: Contract) -> None:
    spend(led, "a", at("2024-06-01 06:00"), 0.10, input_tokens=100, output_tokens=10,
          local_input_tokens=5, local_output_tokens=1)  # fmt: skip
    spend(led, "a", at("2024-06-02 06:00"), 0.20)
    spend(led, "b", at("2024-06-01 07:00"), 0.50, input_tokens=7)
    spend(led, "c", at("2024-06-01 08:00"), 0.0)
    # skipped and missed rows are not runs
    assert claim(led, "s", routine="c", now=at("2024-06-01 09:00"), status="skipped")
    assert claim(led, "t", routine="c", now=at("2024-06-01 10:00"), status="missed")
    spend(led, "a", at("2024-06-03 06:00"), 9.0)  # outside the window
    totals = led.totals(at("2024-06-01 00:00"), at("2024-06-03 00:00"))
    assert [(t["routine"], t["runs"], round(t["dollars"], 6)) for t in totals] == [
        ("b", 1, 0.5),
        ("a", 2, 0.3),
        ("c", 1, 0.0),
    ]
    assert (totals[1]["input_tokens"], totals[1]["output_tokens"]) == (100, 10)
    assert (totals[1]["local_input_tokens"], totals[1]["local_output_tokens"]) == (5, 1)
    assert totals[0]["input_tokens"] == 7


def test_dollars_by_day_in_a_zone(led: Contract) -> None:
    spend(led, "a", at("2024-06-01 03:00"), 1.0)  # 31 May in New York
    spend(led, "b", at("2024-06-01 05:00"), 2.0)
    spend(led, "a", at("2024-06-02 02:00"), 4.0)  # still 1 June in New York
    days = [date(2024, 5, 31), date(2024, 6, 1), date(2024, 6, 2)]
    assert led.dollars_by_day(days, NY) == pytest.approx(
        {date(2024, 5, 31): 1.0, date(2024, 6, 1): 6.0, date(2024, 6, 2): 0.0}
    )
    assert led.dollars_by_day(days, UTCZ) == pytest.approx(
        {date(2024, 5, 31): 0.0, date(2024, 6, 1): 3.0, date(2024, 6, 2): 4.0}
    )


def test_compaction_folds_old_runs_and_keeps_the_sums(led: Contract) -> None:
    base = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    for i in range(30):
        spend(led, f"r{i % 3}", base + timedelta(hours=7 * i), 0.001 * (i + 1),
              status="ok" if i % 4 else "failed")  # fmt: skip
    window = (base - timedelta(days=1), base + timedelta(days=30))
    days = [date(2026, 3, d) for d in range(1, 11)]
    before_totals = led.totals(*window)
    before_days = led.dollars_by_day(days, UTCZ)
    line = base + timedelta(days=5)
    folded = 0
    while n := led.compact(line, UTCZ, limit=7):
        folded += n
    assert folded == sum(1 for i in range(30) if base + timedelta(hours=7 * i) < line)
    assert led.totals(*window) == before_totals
    assert led.dollars_by_day(days, UTCZ) == before_days
    assert all(
        r.started_at is not None and r.started_at >= iso(line) for r in led.history(limit=99)
    )
    compacted = led.days(limit=99)
    assert sum(d.runs for d in compacted) == folded
    assert led.oldest_run_start() is not None and led.oldest_run_start() >= iso(line)  # type: ignore[operator]


def test_housekeeping_compacts_on_both_and_gives_pages_back_only_on_sqlite(
    led: Contract, tmp_path: Path
) -> None:
    """Maintenance is every backend's; giving pages back is SQLite's alone (`Vacuum`), so
    PostgreSQL (whose autovacuum does it) implements no no-op for it."""
    base = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    for i in range(12):
        spend(led, "r0", base + timedelta(hours=i), 0.01)
    clock = FakeClock(base + timedelta(days=200))
    keeper = Housekeeper(led, str(tmp_path), LedgerSettings(), clock)
    while keeper.step().more:
        pass
    assert led.history("r0") == []
    assert sum(d.runs for d in led.days("r0")) == 12
    assert isinstance(led, Vacuum) == isinstance(led, Ledger)


# -- migrations -----------------------------------------------------------------------------


def test_reopening_migrates_nothing_and_keeps_everything(backend: str) -> None:
    with_data = open_backend(backend)
    assert claim(with_data, sid(T0))
    with_data.close()
    again = open_backend(backend)
    try:
        assert again.is_claimed("brief", sid(T0))
    finally:
        again.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def schema_backend(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The stores with a schema (and so a version): the memory store has none."""
    if request.param == "sqlite":
        return str(tmp_path / "ledger.db")
    dsn: str = request.getfixturevalue("pg_dsn")
    return dsn


def test_a_ledger_from_a_newer_version_is_refused(schema_backend: str) -> None:
    backend = schema_backend
    open_backend(backend).close()
    if backend.startswith("host="):
        with psycopg.connect(backend, autocommit=True) as conn:
            conn.execute("UPDATE ledger_meta SET value = '99' WHERE key = 'version'")
    else:
        import sqlite3

        db = sqlite3.connect(backend)
        db.execute("PRAGMA user_version = 99")
        db.close()
    with pytest.raises(LedgerError, match="newer vinos-routine"):
        open_backend(backend)


# The tables both backends share, and what PostgreSQL adds to them: `machine`, the machine
# that claimed a slot or ran a run (a fleet's history says which; SQLite's is one machine's).
SHARED_TABLES = (
    "runs",
    "claims",
    "routine_state",
    "run_days",
    "ledger_migrations",
    "proposals",
    "conversations",
)
PG_ONLY_COLUMNS = {"runs": {"machine"}, "claims": {"machine"}}


def test_sqlite_and_postgresql_share_one_schema(pg_dsn: str, tmp_path: Path) -> None:
    """Both backends run the same query texts (routines/ledger/sql.py), so a column added to
    one schema and not the other is a query that fails on one backend only: each shared
    table has the same column names in both, PostgreSQL's `machine` aside."""
    import sqlite3

    Ledger(tmp_path / "ledger.db").close()
    db = sqlite3.connect(tmp_path / "ledger.db")
    try:
        lite_tables = {
            r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }
        lite = {t: {r[1] for r in db.execute(f"PRAGMA table_info({t})")} for t in lite_tables}
    finally:
        db.close()
    with psycopg.connect(pg_dsn) as conn:
        rows = conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema()"
        ).fetchall()
    pg: dict[str, set[str]] = {}
    for table, column in rows:
        pg.setdefault(table, set()).add(column)
    # Every table both have is a shared one (a new one must be added to SHARED_TABLES).
    assert lite.keys() & pg.keys() == set(SHARED_TABLES)
    for table in SHARED_TABLES:
        assert pg[table] - PG_ONLY_COLUMNS.get(table, set()) == lite[table], table


# -- PostgreSQL only: machines racing, leases ----------------------------------------------


def test_two_machines_claiming_one_routine_at_once_one_wins_each_round(pg_dsn: str) -> None:
    """Two connections plan the same routine from the same cursor, 50 rounds, each claiming a
    different slot: the compare-and-set under the row lock lets exactly one through."""
    a, b = PgLedger(pg_dsn, "a"), PgLedger(pg_dsn, "b")
    wins: dict[str, list[int]] = {"a": [], "b": []}
    cursor: str | None = None
    try:
        barrier = threading.Barrier(2)
        for i in range(50):

            def go(led: PgLedger, who: str, slot: str, expect: str | None, i: int = i) -> None:
                barrier.wait(10)
                if led.claim("race", slot, run_id=f"{who}-{i}", trigger=Trigger.SCHEDULE,
                             status=RunStatus.SKIPPED, now=T0, expect_cursor=expect):  # fmt: skip
                    wins[who].append(i)

            base = T0 + timedelta(hours=i)
            ts = [
                threading.Thread(target=go, args=(a, "a", sid(base), cursor)),
                threading.Thread(
                    target=go, args=(b, "b", sid(base + timedelta(minutes=1)), cursor)
                ),
            ]
            for t in ts:
                t.start()
            for t in ts:
                t.join(30)
            cursor = a.state("race").cursor
        assert sorted(wins["a"] + wins["b"]) == list(range(50))
    finally:
        a.close()
        b.close()


@pytest.mark.slow  # waits out a lease of seconds
def test_a_lapsed_lease_interrupts_its_run_once_and_a_renewed_one_lives(pg_dsn: str) -> None:
    # Leases of seconds, and polling: a fraction of a second lapsed between two statements on
    # a loaded machine. Both claim with LEASE; only "alive" renews (to ten minutes) at once.
    # Waiting past both first expiries shows the lapsed one ends once and the renewed lives,
    # however slow each statement is.
    lease = 3.0
    dead = PgLedger(pg_dsn, "dead", lease_sec=lease)
    alive = PgLedger(pg_dsn, "alive", lease_sec=lease)
    try:
        assert claim(dead, sid(T0), routine="r1")
        assert claim(alive, sid(T0), routine="r2")
        alive.lease_sec = 600
        alive.renew()
        claimed = time.monotonic()
        assert alive.busy_elsewhere() in ({"r1": "dead"}, {})  # {} once its lease lapsed
        ended: list[tuple[str, str, str]] = []
        stop = claimed + lease + 30
        while not ended and time.monotonic() < stop:
            ended = alive.expire_leases(T0)
            time.sleep(0.1)
        assert ended == [("r1", f"r1-{sid(T0)}", "dead")]
        while time.monotonic() < claimed + lease + 1:  # past r2's first expiry too
            time.sleep(0.1)
        assert alive.expire_leases(T0) == []  # once; and the renewed lease lives
        r1 = alive.run(f"r1-{sid(T0)}")
        assert r1 is not None and r1.status == "interrupted" and "dead" in (r1.detail or "")
        r2 = alive.run(f"r2-{sid(T0)}")
        assert r2 is not None and r2.status == "queued"
        assert alive.busy_elsewhere() == {} and dead.busy_elsewhere() == {"r2": "alive"}
        assert not claim(alive, sid(T0), routine="r1")  # never replayed
    finally:
        dead.close()
        alive.close()


@pytest.mark.slow  # waits out a lease of a second
def test_a_runs_own_end_replaces_the_interrupted_of_its_lapsed_lease(pg_dsn: str) -> None:
    """Another machine ended the runs of "away" when their leases lapsed (its database was
    away); "away" then writes the ends it kept. One that came before it was marked is how the
    run really ended, and replaces the interruption; one after it, or an interruption, does
    not."""
    away = PgLedger(pg_dsn, "away", lease_sec=1.0)
    other = PgLedger(pg_dsn, "other")
    try:
        for routine in ("early", "late", "cut"):
            assert claim(away, sid(T0), routine=routine)
            away.start_run(f"{routine}-{sid(T0)}", now=T0, worker_pid=1)
        marked = T0 + timedelta(minutes=2)
        ended: list[tuple[str, str, str]] = []
        stop = time.monotonic() + 30
        while len(ended) < 3 and time.monotonic() < stop:
            ended += other.expire_leases(marked)
            time.sleep(0.1)
        assert sorted(r for r, _, _ in ended) == ["cut", "early", "late"]
        rule = Strike(file_enabled=True, file_identity="flaky.toml", reason="3 failed")
        ok = RunEnd(RunStatus.OK, outcome=Outcome.DONE, dollars=0.5)
        assert away.finish_run(f"early-{sid(T0)}", ok, now=T0 + timedelta(minutes=1), strike=rule)
        assert not away.finish_run(f"late-{sid(T0)}", ok, now=marked + timedelta(seconds=1))
        cut = RunEnd(RunStatus.INTERRUPTED, "lease lost")
        assert not away.finish_run(f"cut-{sid(T0)}", cut, now=T0 + timedelta(minutes=1))
        early = other.run(f"early-{sid(T0)}")
        assert early is not None
        assert (early.status, early.outcome, early.dollars) == ("ok", "done", 0.5)
        assert early.finished_at == iso(T0 + timedelta(minutes=1))
        assert other.last_runs()["early"].status == "ok"
        for late in ("late", "cut"):
            row = other.run(f"{late}-{sid(T0)}")
            assert row is not None and row.status == "interrupted", late
        # Once written, the run's end is final like any other.
        failed = RunEnd(RunStatus.FAILED)
        assert not away.finish_run(f"early-{sid(T0)}", failed, now=T0 + timedelta(seconds=61))
    finally:
        away.close()
        other.close()


def test_the_definitions_digest_changes_exactly_when_the_definitions_do(pg_dsn: str) -> None:
    a, b = PgLedger(pg_dsn, "a"), PgLedger(pg_dsn, "b")
    try:
        for m in (a, b):
            m.register("0.1.0", 1)
        a.publish_definitions({"x": "1", "y": "1"})
        b.publish_definitions({"x": "1"})
        first = a.definitions_token()
        assert a.definitions() == {"x": {"a": "1", "b": "1"}, "y": {"a": "1"}}
        b.publish_definitions({"x": "1"})  # unchanged
        assert a.definitions_token() == first
        b.publish_definitions({"x": "2"})
        second = a.definitions_token()
        assert second != first
        b.leave()
        assert a.definitions_token() not in (first, second)
        assert a.definitions() == {"x": {"a": "1"}, "y": {"a": "1"}}
    finally:
        a.close()
        b.close()


def test_data_version_changes_when_another_connection_writes(backend: str) -> None:
    """The daemon re-reads the states only when this changed (an idle tick reads nothing)."""
    one, two = open_backend(backend, "m1"), open_backend(backend, "m2")
    try:
        one.set_cursor("r", sid(T0))
        before = one.data_version
        assert one.data_version == before  # nothing written
        two.set_failure_streak("r", 1)
        after = one.data_version
        assert after != before
        assert claim(two, sid(T0 + timedelta(hours=1)), routine="r")
        assert one.data_version != after
    finally:
        one.close()
        two.close()


def test_keep_runs_max_folds_beyond_a_routines_newest_runs_and_prunes_claims(
    led: Contract,
) -> None:
    base = datetime(2026, 3, 1, 6, 0, tzinfo=UTC)
    slots = [base + timedelta(days=i, hours=h) for i in range(10) for h in (0, 12)]
    for when in slots:  # two runs a day, at 06:00 and 18:00
        assert led.claim("r", sid(when), run_id=f"r-{sid(when)}", trigger=Trigger.SCHEDULE,
                         status=RunStatus.SKIPPED, now=when)  # fmt: skip
    # Nothing is older than `before`; keep_max = 5 folds the days before that of the 5th
    # newest run (day 7's 18:00): day 7 stays whole, both its runs.
    folded = 0
    while n := led.compact(base - timedelta(days=30), UTCZ, limit=4, keep_max=5):
        folded += n
    assert folded == 14
    assert [r.slot for r in led.history("r", 99)] == [sid(t) for t in reversed(slots[14:])]
    assert sum(d.runs for d in led.days("r", 99)) == 14
    assert len(led.days("r", 99)) == 7  # one row a day
    led.prune_claims(base, keep_max=5)
    assert [led.is_claimed("r", sid(t)) for t in slots] == [False] * 15 + [True] * 5
    assert led.state("r").cursor == sid(slots[-1])
    # A stale plan from before the prune loses its compare-and-set: the cursor is past every
    # pruned claim, so none of their slots is claimed twice.
    stale = sid(slots[14])
    assert not led.claim("r", stale, run_id="again", trigger=Trigger.SCHEDULE,
                         status=RunStatus.QUEUED, now=base, expect_cursor=stale)  # fmt: skip


# -- requests for a person (proposals) and paused conversations ----------------------------


def propose_at(led: Contract, run_id: str, when: datetime, routine: str = "drafter") -> int:
    return proposals.add(
        led,
        routine=routine,
        run_id=run_id,
        action="send-reply",
        command="cat",
        input="Hi Bob\n\0 ünïcode",
        summary="Reply to Bob",
        fingerprint="f1",
        now=when,
        expires_after=3600,
    )


def test_a_proposal_round_trips_and_is_decided_once(led: Contract) -> None:
    first = propose_at(led, "r1", T0)
    second = propose_at(led, "r1", T0 + timedelta(seconds=1))
    assert second > first
    p = proposals.get(led, first)
    assert p is not None
    assert (p.routine, p.run_id, p.action, p.command, p.input, p.summary, p.fingerprint) == (
        "drafter", "r1", "send-reply", "cat", "Hi Bob\n\0 ünïcode", "Reply to Bob", "f1"
    )  # fmt: skip
    assert (p.created_at, p.expires_at, p.state) == (
        iso(T0),
        iso(T0 + timedelta(hours=1)),
        ProposalState.WAITING,
    )
    assert proposals.get(led, 10_000) is None
    assert [x.id for x in proposals.of_run(led, "r1")] == [first, second]  # oldest first
    assert [x.id for x in proposals.waiting(led)] == [second, first]  # newest first
    assert proposals.waiting(led, "other") == []
    assert proposals.waiting_count(led, T0) == 2
    # Claimed once: a second claim, a deny or a stale fingerprint loses, with the reason.
    now = T0 + timedelta(minutes=1)
    assert proposals.claim(led, first, by=Decider.CLI, now=now, current="f2")[1] == (
        "the routine file was edited since it was proposed (invalidated)"
    )
    won, why = proposals.claim(led, first, by=Decider.CLI, now=now, current="f1")
    assert why is None and won is not None and won.state is ProposalState.RUNNING
    assert proposals.claim(led, first, by=Decider.AUTO, now=now, current="f1")[0] == won
    assert proposals.deny(led, first, why="no", now=now)[1] is not None
    proposals.finish(led, first, exit_status=0, output="sent\n", now=now)
    done = proposals.get(led, first)
    assert done is not None
    assert (done.state, done.decided_by, done.exit_status, done.output, done.finished_at) == (
        ProposalState.DONE, "cli", 0, "sent\n", iso(now)
    )  # fmt: skip
    denied, why = proposals.deny(led, second, why="not now", now=now)
    assert why is None and denied is not None
    assert (denied.state, denied.why, denied.decided_at) == (
        ProposalState.DENIED,
        "not now",
        iso(now),
    )
    assert [x.id for x in proposals.decided_since(led, "drafter", None)] == [first, second]
    assert proposals.decided_since(led, "drafter", iso(now)) == []
    assert proposals.waiting_count(led, now) == 0


def test_proposals_expire_invalidate_take_a_note_and_are_pruned(led: Contract) -> None:
    a = propose_at(led, "r1", T0)
    b = propose_at(led, "r2", T0 + timedelta(hours=2))
    c = propose_at(led, "r3", T0 + timedelta(hours=2), routine="other")
    proposals.note(led, b, "x" * 600)
    assert len((proposals.get(led, b) or pytest.fail()).why or "") == 500
    later = T0 + timedelta(hours=2, minutes=1)
    assert proposals.waiting_count(led, later) == 2  # a is past its expiry, not yet marked
    assert proposals.expire(led, later) == 1
    assert (proposals.get(led, a) or pytest.fail()).state is ProposalState.EXPIRED
    # Only the routine's, only another fingerprint, only `only` when given.
    assert proposals.invalidate(led, "drafter", "f1", later) == 0
    assert proposals.invalidate(led, "other", None, later, only=b) == 0
    assert proposals.invalidate(led, "other", None, later, only=c) == 1
    assert proposals.invalidate(led, "drafter", None, later) == 1
    gone = proposals.get(led, b) or pytest.fail()
    assert (gone.state, gone.decided_by, gone.why) == (
        ProposalState.INVALIDATED,
        "runtime",
        proposals.EDITED,
    )
    assert [x.id for x in proposals.for_routine(led, "drafter")] == [b, a]
    assert [x.id for x in proposals.for_routine(led, "drafter", limit=1)] == [b]
    # Decided ones older than `before` go, a batch at a time; a waiting one never does.
    d = propose_at(led, "r4", T0)
    assert proposals.prune(led, later + timedelta(days=1), limit=2) == 2
    assert proposals.prune(led, later + timedelta(days=1)) == 1
    assert [x.id for x in proposals.waiting(led)] == [d]


def test_a_paused_runs_conversation_is_kept_replaced_and_pruned(backend: str) -> None:
    one, two = open_backend(backend, "m1"), open_backend(backend, "m2")
    try:
        body = '{"version": 1, "turns": ["ünïcode \\u0000"]}'
        one.save_conversation("r1", "drafter", body, iso(T0))
        assert two.conversation("r1") == body  # any machine reads it
        assert two.conversation("r2") is None
        two.save_conversation("r1", "drafter", "{}", iso(T0 + timedelta(hours=1)))
        assert one.conversation("r1") == "{}"
        one.save_conversation("r2", "drafter", "[]", iso(T0))
        one.save_conversation("r3", "drafter", "[]", iso(T0))
        # Older than `before`, but a still paused run's stays.
        assert one.prune_conversations(iso(T0 + timedelta(minutes=1)), ["r2"], 10) == 1
        assert [one.conversation(r) for r in ("r1", "r2", "r3")] == ["{}", "[]", None]
        assert one.prune_conversations(iso(T0 + timedelta(days=1)), [], 1) == 1
        assert one.prune_conversations(iso(T0 + timedelta(days=1)), [], 1) == 1
        assert one.prune_conversations(iso(T0 + timedelta(days=1)), [], 1) == 0
    finally:
        one.close()
        two.close()
