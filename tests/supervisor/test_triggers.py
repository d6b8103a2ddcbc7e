"""supervisor/engine/triggers.py on the memory ledger (the contract's reference store) and a real
SQLite
file: events claimed like slots, coalesced while busy, `after` read from the ledger."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from routines.ledger import Ledger, iso
from routines.ledger.api import LedgerAPI
from routines.ledger.memory import MemoryLedger
from routines.ledger.model import RunRow
from routines.runs import Outcome, RunEnd, RunStatus, Trigger, slot_id
from routines.spec.loader import load_text
from routines.spec.registry import Entry, Registry
from routines.spec.routine import Origin
from supervisor.engine.triggers import (
    TriggerBook,
    after_since,
    coalesce,
    fire_event,
    matches,
    watch_event,
)

NOW = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
OWNER = (1, 1.0)

FOLLOWER = """[routine]
kind = "command"
enabled = true
[trigger]
after = ["up"]
fire = true
[command]
run = "echo hi"
"""
UP = """[routine]
kind = "command"
enabled = true
[schedule]
cron = "* * * * *"
[command]
run = "echo up"
"""


def registry(*names_texts: tuple[str, str]) -> Registry:
    entries = {}
    for name, text in names_texts:
        path = Path(f"/r/{name}.toml")
        entries[name] = Entry(name, path, Origin.USER, (0, 0, 0), load_text(text, path))
    return Registry(entries)


@pytest.fixture(params=["memory", "sqlite"])
def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> LedgerAPI:
    if request.param == "memory":
        return MemoryLedger()
    return Ledger(tmp_path / "ledger.db")


def upstream_run(ledger: LedgerAPI, run_id: str, at: datetime, outcome: Outcome | None) -> None:
    ledger.record_run("up", run_id=run_id, trigger=Trigger.MANUAL, status=RunStatus.RUNNING,
                      now=at)  # fmt: skip
    ledger.finish_run(run_id, RunEnd(RunStatus.OK, outcome=outcome), now=at + timedelta(seconds=1))


def test_an_event_claim_leaves_the_cursor(ledger: LedgerAPI) -> None:
    ledger.set_cursor("down", slot_id(NOW), "fp")
    ev = fire_event("down", "hi")
    assert ledger.claim("down", ev.slot, run_id="r1", trigger=Trigger.FIRE,
                        status=RunStatus.QUEUED, now=NOW)  # fmt: skip
    assert ledger.state("down").cursor == slot_id(NOW)  # an event id is no instant
    assert not ledger.claim("down", ev.slot, run_id="r2", trigger=Trigger.FIRE,
                            status=RunStatus.QUEUED, now=NOW)  # fmt: skip


def test_after_is_found_in_the_ledger_once_and_carries_no_run_from_before(
    ledger: LedgerAPI,
) -> None:
    upstream_run(ledger, "old", NOW - timedelta(hours=1), Outcome.DONE)
    book = TriggerBook(ledger, OWNER)
    book.sync(registry(("down", FOLLOWER), ("up", UP)), {}, NOW)
    assert book.scan_after() == 0  # ended before the follower was tracked: owes nothing
    upstream_run(ledger, "new", NOW + timedelta(seconds=5), Outcome.DONE)
    upstream_run(ledger, "quiet", NOW + timedelta(seconds=9), Outcome.NOTHING_TO_DO)
    assert book.scan_after() == 1
    queued = book.due(NOW + timedelta(seconds=20), lambda _: False)
    assert [(p.trigger, p.slot) for p in queued] == [(Trigger.AFTER, "after:new")]
    assert book.scan_after() == 0 and book.due(NOW, lambda _: False) == []
    # A daemon started again (a new book) owes nothing it claimed already.
    again = TriggerBook(ledger, OWNER)
    again.sync(registry(("down", FOLLOWER), ("up", UP)), {}, NOW + timedelta(minutes=1))
    assert again.scan_after() == 0


def test_events_held_while_busy_make_one_run_and_the_rest_are_recorded_coalesced(
    ledger: LedgerAPI,
) -> None:
    book = TriggerBook(ledger, OWNER)
    book.sync(registry(("down", FOLLOWER)), {}, NOW)
    events = [fire_event("down", t) for t in ("a", "b", "c")]
    assert all(book.offer(e) for e in events)
    assert not book.offer(events[0])  # the same event twice is one event
    assert book.due(NOW, lambda _: True) == []  # busy: held
    (run,) = book.due(NOW, lambda _: False)
    assert run.slot == events[-1].slot and run.event is not None and run.event.text == "c"
    got = {r.slot: (r.status, r.detail) for r in ledger.history("down")}
    assert got[events[0].slot] == (RunStatus.SKIPPED, f"fired: coalesced into run {run.run_id}")
    assert got[events[1].slot][0] == RunStatus.SKIPPED
    assert got[events[2].slot][0] == RunStatus.QUEUED
    assert not book.offer(events[1])  # handled


def test_a_lost_claim_drops_that_event_and_keeps_the_older_ones(ledger: LedgerAPI) -> None:
    book = TriggerBook(ledger, OWNER)
    book.sync(registry(("down", FOLLOWER)), {}, NOW)
    old, new = fire_event("down", "old"), fire_event("down", "new")
    ledger.claim(
        "down", new.slot, run_id="elsewhere", trigger=Trigger.FIRE, status=RunStatus.QUEUED, now=NOW
    )  # fmt: skip  (another machine won it)
    book.offer(old)
    book.offer(new)
    assert book.due(NOW, lambda _: False) == []
    (run,) = book.due(NOW, lambda _: False)
    assert run.slot == old.slot


def test_coalescing_watch_events_hands_the_run_every_changed_path() -> None:
    a, b = watch_event("w", "/h/a.pdf", 1), watch_event("w", "/h/b.pdf", 2)
    plan = coalesce([a, b])
    assert plan.folded == (a,)
    assert plan.run.input is not None and plan.run.input.text == "/h/a.pdf\n/h/b.pdf"
    assert watch_event("w", "/h/a.pdf", 1).slot == a.slot  # one write seen twice: one event
    assert watch_event("w", "/h/a.pdf", 3).slot != a.slot


def test_matches_counts_a_command_success_as_done() -> None:
    assert matches(_row("ok", None), [Outcome.DONE])
    assert not matches(_row("ok", None), [Outcome.NEEDS_ATTENTION])
    assert matches(_row("ok", "needs-attention"), [Outcome.DONE, Outcome.NEEDS_ATTENTION])
    assert not matches(_row("failed", None), [Outcome.DONE])


def _row(status: str, outcome: str | None) -> RunRow:
    fields = dict.fromkeys(RunRow.__dataclass_fields__)
    fields |= {"id": 1, "routine": "up", "status": RunStatus(status),
               "outcome": Outcome(outcome) if outcome else None}  # fmt: skip
    return RunRow(**fields)  # type: ignore[arg-type]


def test_after_since_resumes_from_the_newest_after_run() -> None:
    assert after_since([], NOW) == iso(NOW)
    a = _row("ok", None)
    mine = replace(a, trigger=Trigger.AFTER, started_at="2026-12-07T08:00:00.000000Z")
    other = replace(a, trigger=Trigger.FIRE, started_at="2026-12-07T08:30:00.000000Z")
    assert after_since([other, mine], NOW) == "2026-12-07T08:00:00.000000Z"


def test_a_follower_enabled_later_owes_nothing_from_while_it_was_off(ledger: LedgerAPI) -> None:
    book = TriggerBook(ledger, OWNER)
    reg = registry(("down", FOLLOWER), ("up", UP))
    book.sync(reg, {}, NOW)
    upstream_run(ledger, "first", NOW + timedelta(seconds=5), Outcome.DONE)
    book.scan_after()
    assert len(book.due(NOW + timedelta(seconds=10), lambda _: False)) == 1
    book.sync(registry(("up", UP)), {}, NOW + timedelta(minutes=1))  # down is off
    upstream_run(ledger, "while-off", NOW + timedelta(minutes=2), Outcome.DONE)
    book.sync(reg, {}, NOW + timedelta(minutes=3))  # and on again
    assert book.scan_after() == 0
