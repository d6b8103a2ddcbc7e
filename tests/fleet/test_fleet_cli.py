"""`vinos-routine fleet join | status | leave`, and `history` and `list` on a fleet, as real
processes against a real PostgreSQL database."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from routines.ledger import Ledger, LedgerUnavailable, Unavailable
from routines.ledger.api import open_ledger
from routines.ledger.postgres import PgLedger
from routines.runs import RunEnd, RunStatus, Trigger, fingerprint
from routines.spec.loader import load_file
from tests.fleet.fleetkit import Machine, fleet_rows, minute_boundary, minutely
from tests.fleet.pgcluster import Cluster
from tests.supervisor.daemonkit import command_routine, sid, wait_for

MINUTE = timedelta(minutes=1)


def place(clock: Path, instant: datetime) -> None:
    tmp = clock.with_suffix(".tmp")
    tmp.write_text(repr((instant - datetime.now(UTC)).total_seconds()))
    tmp.replace(clock)


def local_history(m: Machine, slot: datetime) -> None:
    """What a machine that ran alone has: a slot claimed and run, a run left running by a
    daemon that died, a manual run, a cursor and a failure streak."""
    routine = load_file(m.paths.routines_dir / "tick.toml")
    with Ledger(m.paths.ledger) as led:
        prev = slot - MINUTE
        led.claim("tick", sid(prev), run_id="r-prev", trigger=Trigger.SCHEDULE,
                  status=RunStatus.QUEUED, now=prev)  # fmt: skip
        led.finish_run("r-prev", RunEnd(RunStatus.FAILED, detail="boom"), now=prev + MINUTE / 2)
        led.claim("tick", sid(slot), run_id="r-slot", trigger=Trigger.SCHEDULE,
                  status=RunStatus.QUEUED, now=slot)  # fmt: skip
        led.start_run("r-slot", now=slot, worker_pid=1)  # its daemon died mid-run
        led.record_run("tick", run_id="r-manual", trigger=Trigger.MANUAL,
                       status=RunStatus.QUEUED, now=slot - 2 * MINUTE)  # fmt: skip
        led.finish_run("r-manual", RunEnd(RunStatus.OK, dollars=0.5), now=slot - MINUTE)
        led.set_cursor("tick", sid(slot), fingerprint(routine.schedule))
        led.set_failure_streak("tick", 1)


@pytest.mark.slow
def test_fleet_join_from_a_machine_with_history_copies_it_and_runs_nothing_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_dsn: str, not_root: None
) -> None:
    clock = tmp_path / "clock"
    slot = minute_boundary()
    a = Machine(tmp_path, monkeypatch, "a", pg_dsn, clock_file=clock)
    b = Machine(tmp_path, monkeypatch, "b", pg_dsn, clock_file=clock)
    for m in (a, b):
        m.write("tick", minutely())
    local_history(a, slot)

    out = a.daemon.cli("fleet", "join")
    assert out.returncode == 0, out.stderr
    assert "a joined the fleet" in out.stdout
    assert "copied 3 run(s) (1 left running, now interrupted), 2 claim(s)" in out.stdout
    again = a.daemon.cli("fleet", "join")
    assert "copied 0 run(s)" in again.stdout, again.stdout  # nothing twice

    found = {r.run_id: (r, m) for r, m in fleet_rows(pg_dsn)}
    assert {k: (r.status, m) for k, (r, m) in found.items()} == {
        "r-prev": ("failed", "a"),
        "r-slot": ("interrupted", "a"),
        "r-manual": ("ok", "a"),
    }
    with PgLedger(pg_dsn, "observer") as fleet:
        st = fleet.state("tick")
        assert (st.cursor, st.failure_streak) == (sid(slot), 1)
        assert fleet.is_claimed("tick", sid(slot))
        assert (
            fleet.spent_on_day("tick", slot.date(), __import__("zoneinfo").ZoneInfo("UTC")) == 0.5
        )

    # b starts just after the slot a had claimed: it resumes from the shared cursor, never
    # runs that slot again, and runs the next one.
    place(clock, slot + timedelta(seconds=30))
    b.start()
    place(clock, slot + MINUTE + timedelta(seconds=1))
    wait_for(lambda: [r for r, m in fleet_rows(pg_dsn) if m == "b" and r.status == "ok"])
    assert b.daemon.stop() == 0
    slots = Counter(r.slot for r, _ in fleet_rows(pg_dsn) if r.slot)
    assert slots == {sid(slot - MINUTE): 1, sid(slot): 1, sid(slot + MINUTE): 1}

    history = a.daemon.cli("history", "tick")
    assert history.returncode == 0, history.stderr
    header, *lines = history.stdout.splitlines()
    assert header.split()[:4] == ["RUN", "STARTED", "(UTC)", "MACHINE"]
    by_machine = Counter(line.split()[3] for line in lines)
    assert by_machine == {"a": 3, "b": 1}
    assert "(output on b)" in history.stdout  # outputs stay where they were made
    as_json = [
        json.loads(x) for x in a.daemon.cli("history", "tick", "--json").stdout.split("\n") if x
    ]
    assert {x["machine"] for x in as_json} == {"a", "b"}
    # brief shows this machine's outputs and says where the others are.
    day = (slot + MINUTE).astimezone().date().isoformat()
    brief = json.loads(a.daemon.cli("brief", "--date", day, "--json").stdout)
    assert brief["elsewhere"] == {"b": 1}
    assert "On other machines (outputs stay where they were made): 1 on b" in (
        a.daemon.cli("brief", "--date", day, "--list").stdout
    )


def test_fleet_status_list_and_leave_show_machines_and_divergence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_dsn: str
) -> None:
    a = Machine(tmp_path, monkeypatch, "a", pg_dsn)
    a.write("tick", minutely())
    a.write("tock", minutely())
    assert a.daemon.cli("fleet", "join").returncode == 0
    with PgLedger(pg_dsn, "c") as c:  # another machine, up, whose tock differs
        c.register("0.1.0", 1)
        c.publish_definitions({"tock": "f" * 16})

    status = a.daemon.cli("fleet", "status", "--json")
    assert status.returncode == 0, status.stderr
    data = json.loads(status.stdout)
    assert data["machine"] == "a"
    assert {m["machine"]: (m["up"], m["left"]) for m in data["machines"]} == {
        "a": (True, False),
        "c": (True, False),
    }
    assert data["divergent"] == {"tock": [["a"], ["c"]]}
    text = a.daemon.cli("fleet", "status").stdout
    assert "divergent: tock runs nowhere until its files agree (a / c)" in text

    listing = a.daemon.cli("list")
    assert "tock: not run on this machine: the routine file differs between machines" in (
        listing.stdout
    )
    assert json.loads(a.daemon.cli("list", "--json").stdout)[0]["not_here"] is None  # tick

    left = a.daemon.cli("fleet", "leave", "c")
    assert left.returncode == 0, left.stderr
    data = json.loads(a.daemon.cli("fleet", "status", "--json").stdout)
    assert {m["machine"]: m["left"] for m in data["machines"]} == {"a": False, "c": True}
    assert data["divergent"] == {}
    again = a.daemon.cli("fleet", "leave", "c")
    assert again.returncode == 1 and "c is not in the fleet" in again.stderr

    # The other commands use the fleet's ledger too: a disable is seen by every machine.
    assert a.daemon.cli("disable", "tick").returncode == 0
    with PgLedger(pg_dsn, "observer") as fleet:
        assert fleet.state("tick").enabled_override is False


def test_fleet_commands_without_a_fleet_say_how_to_set_one_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VINOS_FLEET_DATABASE", raising=False)
    from tests.supervisor.daemonkit import DaemonProcess

    d = DaemonProcess(tmp_path)
    d.env.pop("VINOS_FLEET_DATABASE", None)
    out = d.cli("fleet", "status")
    assert out.returncode == 1
    assert "no fleet configured: add to" in out.stderr and "[fleet]" in out.stderr


@pytest.mark.slow
def test_a_fresh_fleet_machine_runs_every_command_and_status_shows_the_daemons_pause(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    pg_cluster: Cluster,
    pg_dsn: str,
    not_root: None,
) -> None:
    """`fleet join` on a machine that never ran alone creates no local ledger: no command may
    mistake that for a ledger deleted under the daemon, and during an outage `status` prints
    the daemon's own answer (paused) and exits 0."""
    m = Machine(tmp_path, monkeypatch, "fresh", pg_dsn)
    # Due once a year, never during the test: a scheduled run of a minutely routine that
    # starts as the minute turns would make `run tick` "already running".
    m.write("tick", command_routine("echo hi", schedule='cron = "0 3 1 1 *"', missed="skip"))
    joined = m.daemon.cli("fleet", "join")
    assert joined.returncode == 0, joined.stderr
    assert not m.paths.ledger.exists()
    m.start()
    for args in (["list"], ["status"], ["run", "tick"], ["history", "tick"], ["fleet", "status"]):
        out = m.daemon.cli(*args)
        assert out.returncode == 0, (args, out.stderr)
        assert "is gone" not in out.stderr
    [(row, machine)] = [(r, m) for r, m in fleet_rows(pg_dsn) if r.trigger == "manual"]
    assert (row.routine, row.status, machine) == ("tick", "ok", "fresh")
    assert row.run_id is not None and row.run_id in m.daemon.cli("history", "tick").stdout

    pg_cluster.stop()
    try:
        wait_for(
            lambda: "paused" in (m.daemon.request("status")["status"] or ""),
            what="the daemon to pause",
        )
        out = m.daemon.cli("status")
        assert out.returncode == 0, out.stderr
        assert "paused: the fleet database is unreachable" in out.stdout
        as_json = m.daemon.cli("status", "--json")
        assert as_json.returncode == 0, as_json.stderr
        assert json.loads(as_json.stdout)["daemon"] is True
    finally:
        pg_cluster.restart()
    assert m.daemon.stop() == 0


def test_status_on_a_fleet_machine_asks_its_daemon_and_never_the_hung_database(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    pg_cluster: Cluster,
    pg_dsn: str,
    not_root: None,
) -> None:
    """The CLI asks its daemon, as on any machine, instead of reading the fleet's database
    itself, which waited out its call deadline on the frozen server (3.5 to 4.2 s): under
    strace, `status` connects to the control socket and never to PostgreSQL, hung or not."""
    m = Machine(tmp_path, monkeypatch, "hung", pg_dsn)
    m.write("tick", command_routine("echo hi", schedule='cron = "0 3 1 1 *"', missed="skip"))
    m.start()
    strace = shutil.which("strace")
    assert strace is not None, "strace is part of the test image"

    def connects(paused: bool) -> list[str]:
        """What one `status` connected to; it printed whether the daemon is paused."""
        trace = tmp_path / f"status-{paused}.trace"
        out = subprocess.run(
            [strace, "-f", "-qq", "-e", "trace=connect", "-o", str(trace),
             sys.executable, "-m", "supervisor", "status"],
            env=m.daemon.env, capture_output=True, text=True, check=False, timeout=60,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert ("paused" in out.stdout) is paused, out.stdout
        return [line for line in trace.read_text().splitlines() if "connect(" in line]

    assert not [c for c in connects(paused=False) if ".s.PGSQL" in c or ":5432" in c]
    pids = pg_cluster.hang()
    try:
        wait_for(
            lambda: "paused" in (m.daemon.request("status")["status"] or ""),
            what="the daemon to pause",
        )
        seen = connects(paused=True)
        assert any(str(m.daemon.paths.control_socket) in c for c in seen), seen
        assert not [c for c in seen if ".s.PGSQL" in c or ":5432" in c], seen
    finally:
        pg_cluster.unhang(pids)
    assert m.daemon.stop() == 0


@dataclass(frozen=True)
class _Address:
    database: str
    machine: str


def test_the_clis_fleet_connection_fails_as_an_outage_on_a_hung_server(
    pg_cluster: Cluster, pg_dsn: str, not_root: None
) -> None:
    """The CLI's ledger (open_ledger) has the daemon's client-side deadline: connected, then
    the server frozen (SIGSTOP of the postmaster and its backends), a read fails as
    LedgerUnavailable (UNREACHABLE) within seconds instead of waiting on the frozen server
    for ever. The call runs in a thread so that, without a deadline, the test fails at its
    own generous wait rather than hang."""
    ledger = open_ledger(Path("/nonexistent/ledger.db"), _Address(pg_dsn, "cli"))
    outcome: list[BaseException | None] = []

    def read() -> None:
        try:
            ledger.history(None, 10)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    pids = pg_cluster.hang()
    try:
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(30)
        assert not reader.is_alive(), "the CLI's read waited on the frozen server"
    finally:
        pg_cluster.unhang(pids)
    [exc] = outcome
    assert isinstance(exc, LedgerUnavailable) and exc.reason is Unavailable.UNREACHABLE, exc
    assert "not answering" in str(exc)
    ledger.close()
