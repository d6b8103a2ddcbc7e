"""The daemon's one-line state (process title, systemd STATUS=, `status`), as a pure function."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from routines.ledger import LedgerUnavailable, Unavailable
from supervisor.engine.finish import Notification
from supervisor.engine.health import Ground, Health
from supervisor.engine.statusline import status_line

NOW = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


def test_what_runs_waits_and_comes_next() -> None:
    soon = NOW + timedelta(hours=2)
    later = NOW + timedelta(days=3)
    assert status_line(running=0, queued=0, next_fires=[], now=NOW) == (
        "0 running · nothing scheduled"
    )
    line = status_line(running=1, queued=2, next_fires=[("backup", soon)], now=NOW)
    assert line == f"1 running · 2 queued · next backup {soon.astimezone():%H:%M}"
    line = status_line(running=0, queued=0, next_fires=[("weekly", later)], now=NOW)
    assert line == f"0 running · next weekly {later.astimezone():%a %H:%M}"


def test_what_stopped_it_comes_first() -> None:
    lost = "/h/ledger.db was deleted while the daemon ran; it stopped scheduling, so …"
    assert status_line(
        running=1, queued=0, next_fires=[], now=NOW, health=Health.LOST, reason=lost
    ) == ("stopped scheduling: /h/ledger.db was deleted while the daemon ran")
    assert status_line(
        running=1, queued=0, next_fires=[], now=NOW, health=Health.DISK_FULL, unwritten=3
    ) == ("paused: the disk is full (3 finished run(s) wait to be recorded)")


def test_every_pause_names_its_reason() -> None:
    line = {
        h: status_line(running=0, queued=0, next_fires=[], now=NOW, health=h)
        for h in Health
        if h not in (Health.OK, Health.LOST)
    }
    assert line[Health.READ_ONLY] == (
        "paused: the ledger is read-only (0 finished run(s) wait to be recorded)"
    )
    assert line[Health.UNREACHABLE].startswith("paused: the fleet database is unreachable")
    assert line[Health.UNEXPECTED].startswith("paused: the ledger gave an unexpected database")
    assert len(set(line.values())) == len(line)  # each says which it is


def test_a_full_disk_pause_says_whose_disk_to_free(tmp_path: Path) -> None:
    """This machine's (SQLite's error or the OS's): the state dir's disk; a fleet database
    server's (its own error): in its own words, never this machine's state dir."""
    notes: list[Notification] = []
    here = Ground({}, tmp_path, notes.append, 30.0)
    try:
        raise LedgerUnavailable(Unavailable.DISK_FULL, "x") from OSError(28, "No space left")
    except LedgerUnavailable as exc:
        here.unavailable(exc)
    assert here.reason is not None and f"the disk holding {tmp_path}" in here.reason
    server = Ground({}, tmp_path, notes.append, 30.0)
    try:
        raise LedgerUnavailable(
            Unavailable.DISK_FULL,
            "db: the database server has no space left; free some on its disk",
        ) from RuntimeError("could not extend file")
    except LedgerUnavailable as exc:
        server.unavailable(exc)
    assert server.reason is not None and "free some on its disk" in server.reason
    assert str(tmp_path) not in server.reason
    assert [n.title for n in notes] == ["vinos-routine: the disk is full"] * 2
