"""A seeded, time-compressed chaos run of three real fleet daemons on a real PostgreSQL, with
real workers and sandboxed commands: daemons killed (kill -9) and restarted, daemons stopped
(SIGSTOP) past their lease, the database stopped and hung. Whatever happens:

- no overlap: no two executions of one routine run at once (counted from the commands' own
  start/beat/end lines, apart from the ledger);
- no double slot: no slot of a routine has two runs;
- no lost record: every execution has its run row, with a final status;
- no phantom failure: nothing is `failed` (the command cannot fail); an execution that ran to
  its end is `ok` or was fenced (`interrupted`, lease lost), one killed is `interrupted`.

VINOS_CHAOS_SEED picks another sequence of events (the seed is in the failure message)."""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from routines.ledger import RunRow
from routines.runs import ACTIVE
from tests.fleet.fleetkit import Machine, fleet_rows, minute_boundary
from tests.fleet.pgcluster import Cluster
from tests.fleet.test_fleet_daemons import place
from tests.fleet.test_fleet_fence import assert_no_overlap, counted, executions
from tests.supervisor.daemonkit import wait_for

MINUTE = timedelta(minutes=1)
ROUTINES = ("r1", "r2")
STEPS = 10
EVENTS = ("calm", "kill9", "sigstop", "db-stop", "db-hang")


# Its own deadline, the sum of its parts: three daemons started, a storm of STEPS fixed
# minutes (1.5 s + up to 5 s of event each: 65 s at most), up to 90 s for the last runs to
# settle (a run of 20 beats begun in the last minute, a lease lost at a stop), three stops.
# That is close to the suite's 120 s a test when the machine is idle, and over it at load 10:
# the 89 s it took at load 14 here, a slow daemon start or settle away from a timeout.
@pytest.mark.timeout(360)
@pytest.mark.slow
def test_chaos_no_overlap_no_double_slot_no_lost_record_no_phantom_failure(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    pg_cluster: Cluster,
    pg_dsn: str,
    not_root: None,
) -> None:
    seed = int(os.environ.get("VINOS_CHAOS_SEED") or 25)
    rng = random.Random(seed)
    clock = tmp_path / "clock"
    start = minute_boundary()
    place(clock, start - timedelta(seconds=20))
    ms = [
        Machine(tmp_path, monkeypatch, n, pg_dsn, clock_file=clock, real_worker=True)
        for n in ("a", "b", "c")
    ]
    texts = {name: counted(beats=rng.choice((6, 12, 20)), name=name) for name in ROUTINES}
    for m in ms:
        for name, text in texts.items():  # one file on every machine (else: divergent)
            m.write(name, text)
        m.start()
    story = f"seed {seed}: " + " ".join(_storm(rng, ms, pg_cluster, clock, start))

    def settled() -> bool:
        found = fleet_rows(pg_dsn)
        return bool(found) and not any(r.status in ACTIVE for r, _ in found)

    wait_for(settled, timeout=90, what=f"every run to end ({story})")
    _check([r for r, _ in fleet_rows(pg_dsn)], ms, story)
    print(story)
    for m in ms:
        assert m.daemon.stop() == 0, story


def _storm(
    rng: random.Random, ms: list[Machine], pg_cluster: Cluster, clock: Path, start: datetime
) -> list[str]:
    """STEPS minutes of the shared clock, one random event in each; what happened."""
    happened: list[str] = []
    for step in range(STEPS):
        place(clock, start + step * MINUTE + timedelta(seconds=1))
        time.sleep(1.5)  # the slot is claimed and its commands start
        event = rng.choice(EVENTS)
        victim = rng.choice(ms)
        happened.append(f"{step}:{event}:{victim.name}")
        if event == "kill9":
            victim.daemon.kill9()
            time.sleep(2)
            victim.daemon.start()
        elif event == "sigstop":
            os.kill(victim.daemon.pid, signal.SIGSTOP)
            time.sleep(5)  # past the 3 s lease and its kill time
            os.kill(victim.daemon.pid, signal.SIGCONT)
        elif event == "db-stop":
            pg_cluster.stop()
            time.sleep(4)
            pg_cluster.restart()
        elif event == "db-hang":
            pids = pg_cluster.hang()
            time.sleep(5)
            pg_cluster.unhang(pids)
        else:
            time.sleep(3)
    return happened


def _check(rows: list[RunRow], ms: list[Machine], story: str) -> None:
    by_id = {r.run_id: r for r in rows}
    slots = Counter((r.routine, r.slot) for r in rows if r.slot)
    assert max(slots.values()) == 1, f"a slot ran twice: {slots} ({story})"
    failed = [(r.run_id, r.detail) for r in rows if r.status == "failed"]
    assert not failed, f"a phantom failure: {failed} ({story})"
    for name in ROUTINES:
        found = executions(*ms, name=name)
        assert found, f"{name} never ran ({story})"
        assert_no_overlap(found)
        for ex in found:
            row = by_id.get(ex.id)
            assert row is not None, f"{ex} has no run row ({story})"
            if ex.ended:
                # `interrupted` for an execution that ran to its end: its daemon was stopped
                # past its lease and another machine ended the run first, and that final row
                # is never rewritten (docs/fleet.md, "A run that ended while its daemon was
                # stopped"); or its command wrote `end` just before its deadline and was still
                # exiting at it. Not tightened to the first alone: the second is a race of
                # milliseconds this test cannot rule out. A command that ends inside its lease
                # keeps its result when no machine took the lease (test_fleet_fence.py).
                assert row.status in ("ok", "interrupted"), (ex, row.status, story)
                if row.status == "interrupted":
                    assert "lease lost" in (row.detail or ""), (ex, row.detail, story)
            else:
                assert row.status == "interrupted", (ex, row.status, story)
    for r in rows:  # every ok row was an execution that ran to its end
        if r.status == "ok":
            ended = {e.id for n in ROUTINES for e in executions(*ms, name=n) if e.ended}
            assert r.run_id in ended, (r.run_id, story)
