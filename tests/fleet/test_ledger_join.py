"""`fleet join` at the ledger's level (routines/ledger/fleetjoin.py): a machine's SQLite
history copied into a real PostgreSQL fleet database through the ledger's own insert."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path

from routines.ledger import Ledger
from routines.ledger.fleetjoin import join
from routines.ledger.postgres import PgLedger
from routines.runs import Outcome, RunEnd, RunStatus, Trigger

T0 = datetime(2026, 6, 1, 10, 0, tzinfo=UTC)


def test_a_joined_run_keeps_every_column_its_row_had_and_its_reply_its_thread(
    tmp_path: Path, pg_dsn: str
) -> None:
    with Ledger(tmp_path / "ledger.db") as local:
        local.record_run("mail", run_id="first", trigger=Trigger.MANUAL,
                         status=RunStatus.RUNNING, now=T0)  # fmt: skip
        end = RunEnd(
            RunStatus.OK,
            outcome=Outcome.DONE,
            detail="answered",
            route="auto",
            model="local",
            escalated=True,
            escalated_reason="hard",
            input_tokens=10,
            output_tokens=20,
            local_input_tokens=3,
            local_output_tokens=4,
            tool_calls=2,
            tools_used=("read", "write"),
            dollars=0.25,
            output_file="out.md",
            tried_model="premium",
        )
        local.finish_run("first", end, now=T0 + timedelta(seconds=40))
        local.record_run("mail", run_id="reply", trigger=Trigger.REPLY, status=RunStatus.QUEUED,
                         now=T0 + timedelta(minutes=5), parent_run_id="first")  # fmt: skip
        local.finish_run("reply", RunEnd(RunStatus.OK), now=T0 + timedelta(minutes=6))
        mine = {r.run_id: r for r in local.history(None, 10)}
        with PgLedger(pg_dsn, "a") as fleet:
            report = join(fleet, local, T0 + timedelta(hours=1))
            assert report.runs == 2
            theirs = {r.row.run_id: r for r in fleet.fleet_history(None, 10)}
            assert [r.run_id for r in fleet.thread("reply")] == ["first", "reply"]
    for run_id, row in mine.items():
        copied = theirs[run_id]
        assert copied.machine == "a"
        assert dataclasses.replace(copied.row, id=row.id) == row
