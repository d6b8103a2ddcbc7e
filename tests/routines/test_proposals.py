"""routines.proposals on a real SQLite ledger: one decision per proposal, by conditional
UPDATEs, also between processes released at once by a barrier."""

from __future__ import annotations

import multiprocessing as mp
import sqlite3
from datetime import UTC, datetime, timedelta
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

import pytest

from routines import proposals
from routines.ledger import Ledger
from routines.ledger.migrate_sqlite import LEDGER_VERSION, STEPS, V1
from routines.proposals import Decider, ProposalState

CTX = mp.get_context("fork")
NOW = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)


@pytest.fixture
def ledger(tmp_path: Path) -> Any:
    with Ledger(tmp_path / "ledger.db") as led:
        yield led


def add(led: Ledger, *, routine: str = "inbox", fp: str = "v1", expires: int = 3600) -> int:
    return proposals.add(
        led,
        routine=routine,
        run_id="r1",
        action="send-reply",
        command="msmtp -t",
        input="hi",
        summary="s",
        fingerprint=fp,
        now=NOW,
        expires_after=expires,
    )


def test_claim_then_finish_then_nothing_else(ledger: Ledger) -> None:
    pid = add(ledger)
    won, why = proposals.claim(ledger, pid, by=Decider.CLI, now=NOW, current="v1")
    assert why is None and won is not None and won.state is ProposalState.RUNNING
    again = proposals.claim(ledger, pid, by=Decider.CLI, now=NOW, current="v1")
    assert again[1] is not None and again[1].startswith("it was already approved by cli")
    proposals.finish(ledger, pid, exit_status=0, output="x" * 40_000, now=NOW)
    done = proposals.get(ledger, pid)
    assert done is not None and (done.state, done.exit_status) == (ProposalState.DONE, 0)
    assert done.output is not None and done.output.endswith("(7,232 more characters)")
    assert proposals.deny(ledger, pid, why="late", now=NOW)[1] == (
        f"it was already approved by cli at {done.decided_at} and ran"
    )


def test_expired_and_edited_proposals_cannot_be_claimed(ledger: Ledger) -> None:
    old, edited = add(ledger, expires=60), add(ledger)
    later = NOW + timedelta(seconds=61)
    assert proposals.claim(ledger, old, by=Decider.CLI, now=later, current="v1")[1] == (
        "it expired at 2026-12-03T09:01:00.000000Z"
    )
    assert proposals.claim(ledger, edited, by=Decider.CLI, now=NOW, current="v2")[1] == (
        "the routine file was edited since it was proposed (invalidated)"
    )
    assert proposals.expire(ledger, later) == 1
    assert proposals.invalidate(ledger, "inbox", "v2", later) == 1
    states = [proposals.get(ledger, i).state for i in (old, edited)]  # type: ignore[union-attr]
    assert states == [ProposalState.EXPIRED, ProposalState.INVALIDATED]
    assert proposals.waiting(ledger) == []


def test_invalidate_one_leaves_the_others_waiting(ledger: Ledger) -> None:
    a, b = add(ledger), add(ledger)
    assert proposals.invalidate(ledger, "inbox", None, NOW, only=a) == 1
    assert [w.id for w in proposals.waiting(ledger)] == [b]


def test_decided_since_is_what_the_next_run_hears(ledger: Ledger) -> None:
    a, b, c = add(ledger), add(ledger), add(ledger)
    proposals.deny(ledger, a, why="no", now=NOW)
    proposals.claim(ledger, b, by=Decider.AUTO, now=NOW + timedelta(minutes=5), current="v1")
    proposals.finish(ledger, b, exit_status=0, output="", now=NOW + timedelta(minutes=5))
    proposals.note(ledger, c, "unsigned: auto_approve ignored")
    since = "2026-12-03T09:01:00Z"
    assert [p.id for p in proposals.decided_since(ledger, "inbox", None)] == [a, b]
    assert [p.id for p in proposals.decided_since(ledger, "inbox", since)] == [b]
    assert proposals.get(ledger, c).why == "unsigned: auto_approve ignored"  # type: ignore[union-attr]
    assert proposals.decided_since(ledger, "other", None) == []


def _claimer(path: str, pid: int, barrier: Barrier, out: Any) -> None:
    try:
        with Ledger(Path(path)) as led:
            barrier.wait(timeout=60)
            _, why = proposals.claim(led, pid, by=Decider.CLI, now=NOW, current="v1")
            out.put("won" if why is None else why)
    except BaseException as exc:
        out.put(repr(exc))


def test_processes_racing_to_approve_one_proposal_exactly_one_wins(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    for _ in range(10):
        with Ledger(path) as led:
            pid = add(led)
        barrier, out = CTX.Barrier(4), CTX.Queue()
        procs = [
            CTX.Process(target=_claimer, args=(str(path), pid, barrier, out)) for _ in range(4)
        ]
        for p in procs:
            p.start()
        results = sorted(out.get(timeout=60) for _ in procs)
        for p in procs:
            p.join(timeout=30)
        assert results.count("won") == 1, results
        assert all(r.startswith("it was already approved by cli") for r in results if r != "won")


def test_a_v5_ledger_gains_the_proposals_table(tmp_path: Path) -> None:
    """The ledger of the release before (schema 5), made with plain sqlite3 by the steps that
    made it, keeps its runs and gains an empty proposals table."""
    path = tmp_path / "ledger.db"
    db = sqlite3.connect(path)
    db.execute(V1)
    for step in range(2, 6):
        columns, statements = STEPS[step]
        for column in columns:
            db.execute(f"ALTER TABLE runs ADD COLUMN {column}")
        for statement in statements:
            db.execute(statement)
    db.execute(
        "INSERT INTO runs (run_id, routine, trigger, status, started_at) "
        "VALUES ('r0', 'inbox', 'manual', 'ok', '2026-12-01T07:00:00.000000Z')"
    )
    db.execute("PRAGMA user_version = 5")
    db.commit()
    db.close()
    with Ledger(path) as led:
        assert led.version == LEDGER_VERSION
        assert [r.run_id for r in led.history("inbox")] == ["r0"]
        assert proposals.waiting(led) == []
        pid = add(led)
        assert [w.id for w in proposals.waiting(led)] == [pid]
