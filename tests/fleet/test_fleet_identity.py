"""One daemon per fleet machine name (routines/ledger/fleet.py `register`): a second live daemon
under a name in use is refused, naming the other's host and pid; `fleet status` shows the
conflict; the first goes on running its routines; a daemon restarted after a crash under its
own name is not refused. Real daemons on a real PostgreSQL."""

from __future__ import annotations

import json
import os
import socket
from datetime import timedelta
from pathlib import Path

import pytest

from tests.fleet.fleetkit import Machine, fleet_rows, minute_boundary, minutely
from tests.fleet.test_fleet_daemons import place
from tests.supervisor.daemonkit import sid, wait_for

MINUTE = timedelta(minutes=1)


@pytest.mark.slow
def test_a_second_daemon_under_a_machine_name_in_use_is_refused_and_nothing_wedges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_dsn: str, not_root: None
) -> None:
    clock = tmp_path / "clock"
    start = minute_boundary()
    place(clock, start - timedelta(seconds=20))
    first = Machine(tmp_path, monkeypatch, "s1", pg_dsn, clock_file=clock, machine="s")
    second = Machine(tmp_path, monkeypatch, "s2", pg_dsn, clock_file=clock, machine="s")
    for m in (first, second):
        m.write("tick", minutely())
    first.start()
    wait_for(lambda: "(this one)" in first.daemon.cli("fleet", "status").stdout, what="s up")

    joined = second.daemon.cli("fleet", "join")  # the join is refused as the daemon is
    assert joined.returncode == 1
    assert "the machine name 's' is in use by another running daemon" in joined.stderr
    second.daemon.start(wait=False)
    assert second.daemon.proc is not None
    assert second.daemon.proc.wait(60) == 1
    said = second.daemon.log()
    assert "the machine name 's' is in use by another running daemon" in said
    assert f"host {socket.gethostname()}, pid {first.daemon.pid}" in said

    out = first.daemon.cli("fleet", "status", "--json")
    assert out.returncode == 0, out.stderr
    [row] = json.loads(out.stdout)["machines"]
    assert (row["machine"], row["pid"], row["up"]) == ("s", first.daemon.pid, True)
    assert "a second daemon" in row["conflict"] and "refused" in row["conflict"]
    text = first.daemon.cli("fleet", "status").stdout
    assert "conflict: s: a second daemon" in text

    # Nothing wedges: the first daemon runs the next slots as ever.
    for i in range(2):
        place(clock, start + i * MINUTE + timedelta(seconds=1))
        wait_for(
            lambda i=i: sum(r.status == "ok" for r, _ in fleet_rows(pg_dsn)) == i + 1,
            what=f"slot {i}",
        )
    assert {(r.slot, m) for r, m in fleet_rows(pg_dsn)} == {
        (sid(start), "s"),
        (sid(start + MINUTE), "s"),
    }

    # A daemon killed under its name restarts under it at once: its pid is gone.
    first.daemon.kill9()
    first.daemon.start()
    assert first.daemon.pid != os.getpid()
    place(clock, start + 2 * MINUTE + timedelta(seconds=1))
    wait_for(
        lambda: sum(r.status == "ok" for r, _ in fleet_rows(pg_dsn)) == 3, what="after restart"
    )
    assert first.daemon.stop() == 0
