"""The run fence across real processes on a real file: two processes claiming the same slot at
the same moment, 100 times, and exactly one wins each time; first opens racing each other."""

from __future__ import annotations

import multiprocessing as mp
import sqlite3
from datetime import UTC, datetime, timedelta
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

import pytest

from routines.ledger import LEDGER_VERSION, Ledger
from routines.runs import RunStatus, Trigger

ROUNDS = 100
# fork: the children need nothing but this module's functions and a path. They open their own
# connection after the fork (a SQLite connection must never cross a fork).
CTX = mp.get_context("fork")


def _claimer(path: str, who: str, barrier: Barrier, out: Any) -> None:
    wins: list[int] = []
    try:
        with Ledger(Path(path)) as led:
            base = datetime(2024, 6, 1, tzinfo=UTC)
            for i in range(ROUNDS):
                barrier.wait(timeout=60)  # both processes claim slot i together
                slot = (base + timedelta(hours=i)).strftime("%Y-%m-%dT%H:%M:%SZ")
                if led.claim(
                    "day-brief",
                    slot,
                    run_id=f"{who}-{i}",
                    trigger=Trigger.SCHEDULE,
                    status=RunStatus.QUEUED,
                    now=datetime.now(UTC),
                ):
                    wins.append(i)
        out.put((who, wins, None))
    except BaseException as exc:  # report, never hang the parent
        barrier.abort()
        out.put((who, wins, repr(exc)))


def test_two_processes_claiming_the_same_slot_exactly_one_wins(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    Ledger(path).close()
    barrier = CTX.Barrier(2)
    out = CTX.Queue()
    procs = [CTX.Process(target=_claimer, args=(str(path), w, barrier, out)) for w in "ab"]
    for p in procs:
        p.start()
    results = {}
    for _ in procs:
        who, wins, error = out.get(timeout=120)
        assert error is None, f"claimer {who} failed: {error}"
        results[who] = wins
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    a, b = set(results["a"]), set(results["b"])
    assert a.isdisjoint(b), f"slots won twice: {sorted(a & b)}"
    assert a | b == set(range(ROUNDS)), f"slots nobody won: {sorted(set(range(ROUNDS)) - a - b)}"
    # The file agrees: one claim and one run row per slot, each the winner's.
    db = sqlite3.connect(path)
    claims = db.execute("SELECT slot, run_id FROM claims").fetchall()
    runs = {r[0] for r in db.execute("SELECT run_id FROM runs").fetchall()}
    cursor = db.execute("SELECT cursor FROM routine_state").fetchone()[0]
    db.close()
    assert len(claims) == ROUNDS
    winners = {f"a-{i}" for i in a} | {f"b-{i}" for i in b}
    assert {run_id for _, run_id in claims} == winners == runs
    last = (datetime(2024, 6, 1, tzinfo=UTC) + timedelta(hours=ROUNDS - 1)).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )
    assert cursor == last


def _opener(path: str, barrier: Barrier, out: Any) -> None:
    try:
        barrier.wait(timeout=60)
        with Ledger(Path(path)) as led:
            out.put(("ok", led.version))
    except BaseException as exc:
        out.put(("error", repr(exc)))


@pytest.mark.slow
def test_processes_opening_a_new_ledger_together_all_succeed(tmp_path: Path) -> None:
    # The daemon starting while a CLI command opens the ledger for the first time: nobody may
    # fail with "database is locked" (SQLite does not wait by itself while switching to WAL).
    for round_ in range(20):
        path = tmp_path / f"ledger-{round_}.db"
        barrier = CTX.Barrier(4)
        out = CTX.Queue()
        procs = [CTX.Process(target=_opener, args=(str(path), barrier, out)) for _ in range(4)]
        for p in procs:
            p.start()
        results = [out.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(timeout=30)
        assert results == [("ok", LEDGER_VERSION)] * 4, f"round {round_}: {results}"
