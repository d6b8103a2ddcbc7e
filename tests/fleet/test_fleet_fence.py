"""A lease fences execution, and a hung database never freezes a daemon: real daemons, real
PostgreSQL, real workers running real sandboxed commands.

Each execution of the routine writes `start`, a `beat` every quarter second and `end` lines,
with an execution id, the time and its scratch dir (which names its machine), to a log outside
its workspace that the test reads as it is written (tests/supervisor/gates.py; the workspace
is an overlay while the command runs): what ran is counted apart from the ledger, and an
execution that was killed ends at its last beat. The assertion that
matters: no two executions of one routine overlap, and the execution that lost its lease is
recorded `interrupted (lease lost)`, never `ok` thrown away."""

from __future__ import annotations

import itertools
import os
import signal
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from supervisor.cli.client import connect
from tests.fleet.fleetkit import Machine, fleet_rows, minute_boundary, wait_logged
from tests.fleet.pgcluster import Cluster
from tests.fleet.test_fleet_daemons import place
from tests.supervisor.daemonkit import command_routine, release, sid
from tests.supervisor.gates import channel, gate, gate_home

MINUTE = timedelta(minutes=1)
BEATS = 48  # 12 s of beats: the run outlives the 3 s lease many times over


MACHINES: list[Machine] = []  # this test's, whose logs a timeout shows


def wait_for(predicate: Any, what: str) -> Any:
    return wait_logged(predicate, what, MACHINES)


def log(name: str) -> Path:
    """Routine `name`'s log in its gate, one for every machine (they share the test's home)."""
    path = gate(name) / "log"
    channel(path)
    return path


def mark(name: str) -> str:
    """A shell function `mark WHAT`: a line in the log. Its working directory is its run's
    scratch dir, VINOS_HOME/routines/scratch/NAME/RUN-ID: the run id, and the machine."""
    return f'mark() {{ echo "$1 $id $(date +%s.%N) $PWD" >> {log(name)}; }}; id=$(basename "$PWD")'


def counted(beats: int = BEATS, name: str = "long") -> str:
    """The routine: the same file on every machine."""
    return command_routine(
        f"{mark(name)}; mark start; i=0; "
        f"while [ $i -lt {beats} ]; do mark beat; sleep 0.25; i=$((i+1)); done; mark end",
        timeout=300,
        extra=gate_home(name),
    )


@dataclass(frozen=True)
class Execution:
    machine: str
    id: str
    start: float
    last: float
    ended: bool


def executions(*ms: Machine, name: str = "long") -> list[Execution]:
    seen: dict[tuple[str, str], list[tuple[str, float]]] = {}
    for line in channel(log(name)).lines():
        what, ex_id, at, where = line.split()
        for m in ms:
            if where.startswith(f"{m.paths.home}/"):
                seen.setdefault((m.name, ex_id), []).append((what, float(at)))
    out = []
    for (machine, ex_id), marks in seen.items():
        times = [t for _, t in marks]
        out.append(Execution(machine, ex_id, min(times), max(times), marks[-1][0] == "end"))
    return sorted(out, key=lambda e: e.start)


def assert_no_overlap(found: list[Execution]) -> None:
    for before, after in itertools.pairwise(found):
        assert after.start > before.last, f"two executions at once: {before} and {after}"


def running_on(dsn: str) -> str | None:
    for row, machine in fleet_rows(dsn, "long"):
        if row.status == "running":
            return machine
    return None


def two(tmp: Path, mp: pytest.MonkeyPatch, dsn: str, clock: Path) -> dict[str, Machine]:
    ms = {n: Machine(tmp, mp, n, dsn, clock_file=clock, real_worker=True) for n in ("a", "b")}
    MACHINES[:] = ms.values()
    for m in ms.values():
        m.write("long", counted())
    return ms


def ping(m: Machine) -> int:
    """The daemon's pid from `ping`, failing if it takes over 5 s (it should take far
    under one; bench/ measures it)."""
    with connect(m.paths.control_socket, timeout=5) as c:
        return int(c.request("ping")["pid"])


@pytest.mark.slow
def test_a_daemon_stopped_past_its_lease_has_its_run_killed_before_another_machine_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_dsn: str, not_root: None
) -> None:
    clock = tmp_path / "clock"
    start = minute_boundary()
    place(clock, start - timedelta(seconds=20))
    ms = two(tmp_path, monkeypatch, pg_dsn, clock)
    for m in ms.values():
        m.start()
    place(clock, start + timedelta(seconds=1))
    name = wait_for(lambda: running_on(pg_dsn), what="the first slot to run")
    wait_for(lambda: executions(*ms.values()), what="its command to start")
    stopped, other = ms[name], ms["b" if name == "a" else "a"]
    os.kill(stopped.daemon.pid, signal.SIGSTOP)  # the daemon, not its worker
    try:
        wait_for(
            lambda: [r for r, _ in fleet_rows(pg_dsn, "long") if r.status == "interrupted"],
            what="the other machine to end the run once its lease lapsed",
        )
        place(clock, start + MINUTE + timedelta(seconds=1))
        wait_for(lambda: len(executions(*ms.values())) == 2, what="the next slot elsewhere")
    finally:
        os.kill(stopped.daemon.pid, signal.SIGCONT)
    wait_for(
        lambda: [r for r, _ in fleet_rows(pg_dsn, "long") if r.status == "ok"],
        what="the next slot to finish",
    )
    found = executions(*ms.values())
    assert_no_overlap(found)
    first, second = found
    assert (first.machine, first.ended) == (name, False)  # killed, never ran to its end
    assert (second.machine, second.ended) == (other.name, True)
    rows = {r.slot: r for r, _ in fleet_rows(pg_dsn, "long")}
    assert rows[sid(start)].status == "interrupted"
    assert "lease lost" in (rows[sid(start)].detail or "")
    assert rows[sid(start + MINUTE)].status == "ok"
    for m in ms.values():
        ping(m)  # the stopped one is back and answers
        assert m.daemon.stop() == 0


def gated(name: str = "long") -> str:
    """A routine whose command ends when the test creates `go` in its gate (daemonkit's
    `release`): it ends at a moment the test chooses (while its daemon is stopped), not after
    some time."""
    return command_routine(
        f"{mark(name)}; mark start; while [ ! -e {gate(name)}/go ]; do sleep 0.05; done; mark end",
        timeout=300,
        extra=gate_home(name),
    )


def lapsed_leases(dsn: str, margin_sec: float) -> int:
    """Leases whose expiry is more than `margin_sec` behind the server's clock: ones another
    machine could end now."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM leases WHERE expires_at + make_interval(secs => %s) < now()",
            (margin_sec,),
        ).fetchone()
    return int(row[0]) if row else 0


@pytest.mark.slow
def test_a_run_that_ends_inside_its_lease_while_its_daemon_is_stopped_keeps_its_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_dsn: str, not_root: None
) -> None:
    """The daemon is stopped (SIGSTOP) past its lease's expiry and kill margin; its run's
    command ends before the worker's deadline; no other machine takes the lease meanwhile. On
    waking, the renewal finds its lease in place and the daemon records the real `ok`: only a
    run still executing at its deadline is stopped. (A run another machine ended first stays
    `interrupted`: its row is final, docs/fleet.md "A run that ended while its daemon was
    stopped", and the test above.)"""
    clock = tmp_path / "clock"
    start = minute_boundary()
    place(clock, start - timedelta(seconds=20))
    m = Machine(tmp_path, monkeypatch, "a", pg_dsn, clock_file=clock, real_worker=True)
    MACHINES[:] = [m]
    # A 12 s lease (worker deadline 8 s): room for the command to end after the daemon is
    # stopped and before its deadline, however loaded the machine.
    m.daemon.timings["fleet_lease_sec"] = 12
    m.write("long", gated())
    m.start()
    place(clock, start + timedelta(seconds=1))
    wait_for(lambda: executions(m), what="the command to start")
    os.kill(m.daemon.pid, signal.SIGSTOP)  # the daemon, not its worker
    try:
        release("long")
        wait_for(lambda: executions(m)[0].ended, what="the command to end")
        wait_for(lambda: lapsed_leases(pg_dsn, 2.0), what="the lease to lapse past its margin")
    finally:
        os.kill(m.daemon.pid, signal.SIGCONT)
    wait_for(
        lambda: [r.status for r, _ in fleet_rows(pg_dsn, "long") if r.finished_at],
        what="the run's end to be recorded",
    )
    [(row, machine)] = fleet_rows(pg_dsn, "long")
    assert (row.status, machine) == ("ok", "a"), row
    ping(m)
    assert m.daemon.stop() == 0


@pytest.mark.slow
def test_a_hung_database_never_freezes_a_daemon_and_its_runs_stop_at_their_deadline(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    pg_cluster: Cluster,
    pg_dsn: str,
    not_root: None,
) -> None:
    clock = tmp_path / "clock"
    start = minute_boundary()
    place(clock, start - timedelta(seconds=20))
    ms = two(tmp_path, monkeypatch, pg_dsn, clock)
    for m in ms.values():
        m.start()
    place(clock, start + timedelta(seconds=1))
    name = wait_for(lambda: running_on(pg_dsn), what="the first slot to run")
    wait_for(lambda: executions(*ms.values()), what="its command to start")
    pids = pg_cluster.hang()
    try:
        hung_until = time.monotonic() + 12  # four leases: every renewal in it fails
        answers = 0
        while time.monotonic() < hung_until:
            for m in ms.values():
                assert ping(m) == m.daemon.pid  # the control socket answers throughout
                answers += 1
            time.sleep(0.25)
        # The run's worker was not renewed: it killed its command on its own.
        [ex] = executions(*ms.values())
        assert not ex.ended
        assert answers > 20
    finally:
        pg_cluster.unhang(pids)
    wait_for(
        lambda: [r for r, _ in fleet_rows(pg_dsn, "long") if r.status == "interrupted"],
        what="the run to be recorded once the database answers",
    )
    place(clock, start + MINUTE + timedelta(seconds=1))
    wait_for(
        lambda: [r for r, _ in fleet_rows(pg_dsn, "long") if r.status == "ok"],
        what="the next slot to run and finish",
    )
    found = executions(*ms.values())
    assert_no_overlap(found)
    assert [e.ended for e in found] == [False, True]
    assert found[0].machine == name
    rows = {r.slot: r for r, _ in fleet_rows(pg_dsn, "long")}
    assert rows[sid(start)].status == "interrupted"
    assert "lease lost" in (rows[sid(start)].detail or "")
    stopped_answering = [m for m in ms.values() if "not answering" in m.daemon.log()]
    assert stopped_answering, "the hang is an outage, logged"
    for m in ms.values():
        assert m.daemon.stop() == 0
