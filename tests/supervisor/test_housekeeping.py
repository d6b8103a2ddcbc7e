"""The daemon's housekeeping on a real state dir and ledger file: old outputs and run logs go,
the newest of each stays, nothing is followed through a symlink a sandbox could have planted,
and batches compact the ledger and hand its freed pages back until there is nothing left.
"""

from __future__ import annotations

import os
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from routines import proposals
from routines.ledger import Ledger, iso
from routines.ledger.rundays import compaction_line
from routines.runs import RunStatus, Trigger
from routines.schedule.tz import machine_timezone
from routines.spec.config import LedgerSettings
from routines.spec.paths import paths
from supervisor.engine import housekeeping
from supervisor.engine.clock import FakeClock
from supervisor.engine.housekeeping import BATCH_ROWS, Housekeeper
from supervisor.engine.retention import cutoffs, prune_routine, routine_dirs

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
OLD_OUT = "2026-08-01-0600.md"  # 124 days before NOW
OLD_LOG = "20260801T060000-brief-aaaaaa.jsonl"


def files(d: Path) -> set[str]:
    return {p.name for p in d.iterdir()}


def test_old_outputs_and_logs_go_the_newest_and_everything_else_stays(tmp_path: Path) -> None:
    state = tmp_path / "state"
    brief = state / "brief"
    (brief / "runs").mkdir(parents=True)
    keep = {"memory.md", "last-run.json", "2026-11-30-0600.md", "notes.md", "runs"}
    for name in (*keep - {"runs"}, OLD_OUT, "2026-07-01-0600-2.md"):
        (brief / name).write_text("x")
    logs = {OLD_LOG, "20261130T060000-brief-bbbbbb.jsonl", "garbage.jsonl"}
    for name in logs:
        (brief / "runs" / name).write_text("{}\n")
    # A routine whose outputs are all old keeps its newest one (brief and logs show it).
    quiet = state / "quiet"
    (quiet / "runs").mkdir(parents=True)
    for name in ("2026-01-01-0600.md", "2026-02-01-0600.md"):
        (quiet / name).write_text("x")
    (quiet / "runs" / "20260201T060000-quiet-cccccc.jsonl").write_text("{}\n")
    removed = prune_routine(str(state), "brief", cutoffs(NOW, 90))
    removed += prune_routine(str(state), "quiet", cutoffs(NOW, 90))
    assert removed == 4
    assert files(brief) == keep
    assert files(brief / "runs") == logs - {OLD_LOG}
    assert files(quiet) == {"2026-02-01-0600.md", "runs"}
    assert files(quiet / "runs") == {"20260201T060000-quiet-cccccc.jsonl"}


def test_no_symlink_is_followed(tmp_path: Path) -> None:
    state = tmp_path / "state"
    outside = tmp_path / "outside"
    (outside / "runs").mkdir(parents=True)
    victims = [outside / OLD_OUT, outside / "runs" / OLD_LOG, outside / "2026-06-01-0600.md"]
    for v in victims:
        v.write_text("precious")
    (state / "shared").mkdir(parents=True)
    # A routine dir that is a link, a runs dir that is a link, and old-named links to files.
    (state / "linked").symlink_to(outside)
    planted = state / "planted"
    planted.mkdir()
    (planted / "runs").symlink_to(outside / "runs")
    (planted / OLD_OUT).symlink_to(outside / OLD_OUT)
    (planted / "2026-05-01-0600.md").symlink_to(outside / "2026-06-01-0600.md")
    (planted / "2026-11-30-0600.md").write_text("new")
    assert routine_dirs(str(state)) == ["planted"]  # not the link, not shared
    assert prune_routine(str(state), "linked", cutoffs(NOW, 90)) == 0
    assert prune_routine(str(state), "planted", cutoffs(NOW, 90)) == 0
    assert all(v.read_text() == "precious" for v in victims)
    assert files(planted) == {"runs", OLD_OUT, "2026-05-01-0600.md", "2026-11-30-0600.md"}


def test_batches_compact_vacuum_and_prune_until_nothing_is_left() -> None:
    p = paths()
    ledger = Ledger(p.ledger)
    start = NOW - timedelta(days=200)
    rows = 24 * 200  # hourly, up to NOW
    with ledger.transaction() as db:
        db.executemany(
            "INSERT INTO runs (run_id, routine, started_at, finished_at, status, dollars, "
            "detail, duration_sec) VALUES (?, 'brief', ?, ?, 'ok', 0.001, ?, 1.0)",
            [
                (
                    f"r{i}",
                    (start + timedelta(hours=i)).strftime("%Y-%m-%dT%H:%M:%S.000000Z"),
                    (start + timedelta(hours=i)).strftime("%Y-%m-%dT%H:%M:%S.000000Z"),
                    f"run {i}: " + "x" * 2000,  # room for the file to shrink
                )
                for i in range(rows)
            ],
        )
    (p.state_dir / "brief").mkdir()
    (p.state_dir / "brief" / OLD_OUT).write_text("old")
    (p.state_dir / "brief" / "2026-12-01-0600.md").write_text("new")
    before = p.ledger.stat().st_size
    keeper = Housekeeper(ledger, str(p.state_dir), LedgerSettings(), FakeClock(NOW))
    steps = []
    while True:
        step = keeper.step()
        steps.append(step)
        if not step.more:
            break
        assert len(steps) < 1000
    whole = sum(1 for r in ledger._db.execute("SELECT 1 FROM runs"))
    assert sum(s.compacted for s in steps) == rows - whole
    line = compaction_line(NOW, ZoneInfo(machine_timezone()), 90)
    assert whole == sum(1 for i in range(rows) if start + timedelta(hours=i) >= line) > 2000
    assert all(s.compacted == BATCH_ROWS for s in steps[: (rows - whole) // BATCH_ROWS])
    assert sum(s.pruned for s in steps) == 1 and files(p.state_dir / "brief") == {
        "2026-12-01-0600.md"
    }
    ledger._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert ledger._db.execute("PRAGMA freelist_count").fetchone()[0] == 0
    assert p.ledger.stat().st_size < before / 2
    # Done: the next step finds nothing to fold, free or delete.
    assert keeper.step() == type(step)(0, 0, 0, False)
    ledger.close()
    db = sqlite3.connect(p.ledger)
    assert db.execute("SELECT SUM(runs), SUM(nanodollars) FROM run_days").fetchone() == (
        rows - whole,
        (rows - whole) * 1_000_000,
    )
    db.close()
    assert os.stat(p.state_dir / "brief" / "2026-12-01-0600.md").st_size == 3


def test_a_clock_far_ahead_compacts_and_deletes_nothing_until_it_is_back() -> None:
    p = paths()
    ledger = Ledger(p.ledger)
    ledger.record_run("brief", run_id="r1", trigger=Trigger.MANUAL, status=RunStatus.OK, now=NOW)
    (p.state_dir / "brief").mkdir()
    for name in ("2026-12-02-0600.md", "2026-12-03-0600.md"):
        (p.state_dir / "brief" / name).write_text("x")
    clock = FakeClock(NOW)
    keeper = Housekeeper(ledger, str(p.state_dir), LedgerSettings(), clock)
    assert keeper.step().more is False
    clock.advance(timedelta(days=400))  # an RTC or a hand set a year ahead
    assert keeper.step() == type(keeper.step())(0, 0, 0, False)
    assert len(ledger.history("brief")) == 1 and len(files(p.state_dir / "brief")) == 2
    clock.set(NOW + timedelta(minutes=5))  # corrected
    keeper.step()
    assert len(ledger.history("brief")) == 1
    # Time really passing (boot time with it) lets it act: a fresh start a year later does.
    later = Housekeeper(ledger, str(p.state_dir), LedgerSettings(), FakeClock(NOW + timedelta(400)))
    assert later.step().compacted == 1
    assert files(p.state_dir / "brief") == {"2026-12-03-0600.md"}
    ledger.close()


def test_a_prune_pass_runs_once_a_day(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(housekeeping, "PRUNE_EVERY_SEC", 600.0)  # a day, shortened
    p = paths()
    (p.state_dir / "brief").mkdir(parents=True)
    (p.state_dir / "brief" / "2026-12-03-0600.md").write_text("new")
    clock = FakeClock(NOW)
    keeper = Housekeeper(Ledger(p.ledger), str(p.state_dir), LedgerSettings(), clock)
    assert keeper.step().pruned == 0
    (p.state_dir / "brief" / OLD_OUT).write_text("old")
    clock.advance(timedelta(seconds=599))
    assert keeper.step().pruned == 0  # not yet: the pass of the day is done
    clock.advance(timedelta(seconds=2))
    assert keeper.step().pruned == 1
    keeper.ledger.close()


def test_an_unwritable_routine_dir_does_not_stop_the_others(not_root: None) -> None:
    p = paths()
    for name in ("a-locked", "b-open"):
        (p.state_dir / name).mkdir(parents=True)
        (p.state_dir / name / OLD_OUT).write_text("old")
        (p.state_dir / name / "2026-12-03-0600.md").write_text("new")
    (p.state_dir / "a-locked").chmod(0o555)
    try:
        keeper = Housekeeper(Ledger(p.ledger), str(p.state_dir), LedgerSettings(), FakeClock(NOW))
        assert keeper.step().pruned == 1
        assert files(p.state_dir / "b-open") == {"2026-12-03-0600.md"}
        assert OLD_OUT in files(p.state_dir / "a-locked")
        keeper.ledger.close()
    finally:
        (p.state_dir / "a-locked").chmod(0o755)


def test_decided_proposals_past_retention_go_in_batches_and_waiting_ones_stay(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(housekeeping, "PROPOSAL_BATCH", 2)
    p = paths()
    ledger = Ledger(p.ledger)

    def proposal(state: str, days_ago: int, expires_days: int = 7) -> int:
        at = NOW - timedelta(days=days_ago)
        pid = proposals.add(ledger, routine="mail", run_id=f"r-{state}-{days_ago}",
                            action="send-reply", command="cat", input="Hi\n", summary=state,
                            fingerprint="f", now=at, expires_after=expires_days * 86400,
                            )  # fmt: skip
        if state != "waiting":
            with ledger.transaction() as db:
                db.execute(
                    "UPDATE proposals SET state = ?, decided_at = ?, decided_by = 'cli' "
                    "WHERE id = ?",
                    (state, iso(at + timedelta(hours=1)), pid),
                )
        return pid

    gone = {proposal(s, 200) for s in ("done", "denied", "expired", "invalidated")}
    gone.add(proposal("denied", 91))
    recent = proposal("denied", 10)  # within keep_runs_days (90)
    running = proposal("running", 200)  # its command is running: never deleted
    waiting = proposal("waiting", 200, expires_days=400)  # a long approvals_expire
    expired_now = proposal("waiting", 100)  # expired long ago, unmarked: marked now, kept
    keeper = Housekeeper(ledger, str(p.state_dir), LedgerSettings(), FakeClock(NOW))
    steps = []
    while True:
        steps.append(keeper.step())
        if not steps[-1].more:
            break
        assert len(steps) < 100
    assert [s.proposals for s in steps] == [2, 2, 1]
    left = {r[0]: r[1] for r in ledger._db.execute("SELECT id, state FROM proposals")}
    assert set(left) == {recent, running, waiting, expired_now} and not (set(left) & gone)
    assert (left[expired_now], left[waiting]) == ("expired", "waiting")
    # 91 days on, the denial and the expiry (marked at NOW) are past retention in turn.
    later = Housekeeper(ledger, str(p.state_dir), LedgerSettings(), FakeClock(NOW + timedelta(91)))
    assert later.step().proposals == 2
    assert {r[0] for r in ledger._db.execute("SELECT id FROM proposals")} == {running, waiting}
    ledger.close()


def test_conversations_kept_for_a_pause_go_after_retention_but_a_paused_runs_stays(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(housekeeping, "PROPOSAL_BATCH", 2)
    p = paths()
    ledger = Ledger(p.ledger)
    old = iso(NOW - timedelta(days=200))
    ledger.record_run("mail", run_id="r-paused", trigger=Trigger.MANUAL,
                      status=RunStatus.NEEDS_YOU, now=NOW - timedelta(days=200))  # fmt: skip
    for run_id in ("r-paused", "r-1", "r-2", "r-3"):
        ledger.save_conversation(run_id, "mail", "{}", old)
    ledger.save_conversation("r-new", "mail", "{}", iso(NOW - timedelta(days=10)))
    keeper = Housekeeper(ledger, str(p.state_dir), LedgerSettings(), FakeClock(NOW))
    for _ in range(100):
        if not keeper.step().more:
            break
    kept = [r for r in ("r-paused", "r-1", "r-2", "r-3", "r-new") if ledger.conversation(r)]
    assert kept == ["r-paused", "r-new"]
    ledger.close()
