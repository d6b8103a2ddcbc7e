"""The scheduler on a real ledger file, its clock a FakeClock: the run fence, cursors, clock jumps
and restarts, without a daemon: a slot is claimed once, ever, by one process.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

from routines.ledger import Ledger
from routines.spec.paths import paths
from routines.spec.registry import Registry, scan
from supervisor.engine.clock import FakeClock
from supervisor.engine.plan import MISSED_CAP
from supervisor.engine.scheduler import Scheduler
from tests.helpers import identity
from tests.supervisor.daemonkit import REPO, command_routine, sid, write_routine

T0 = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def registry(**routines: str) -> Registry:
    for name, text in routines.items():
        write_routine(name, text)
    return scan(paths())


def claims(ledger: Ledger, name: str) -> list[str]:
    return [
        r[0]
        for r in ledger._db.execute(
            "SELECT slot FROM claims WHERE routine = ? ORDER BY slot", (name,)
        )
    ]


def never_busy(name: str) -> bool:
    return False


def test_two_schedulers_on_one_ledger_claim_each_of_200_slots_once() -> None:
    reg = registry(tick=command_routine("true"))
    a_ledger, b_ledger = Ledger(paths().ledger), Ledger(paths().ledger)
    a, b = Scheduler(a_ledger, (1, 1.0)), Scheduler(b_ledger, (2, 2.0))
    clock = FakeClock(T0)
    a.sync(reg, a_ledger.states(), clock.now())
    b.sync(reg, b_ledger.states(), clock.now())
    rng = random.Random(6)
    won = {"a": 0, "b": 0}
    for _ in range(200):
        clock.advance(MINUTE)
        # Both see the slot come due, in either order, sometimes one of them twice.
        order = rng.choice([("a", "b"), ("b", "a"), ("a", "b", "a"), ("b", "a", "b")])
        for who in order:
            sched = a if who == "a" else b
            won[who] += len(sched.due(clock.now() + timedelta(seconds=1), never_busy))
    slots = claims(a_ledger, "tick")
    assert len(slots) == len(set(slots)) == 200
    assert slots == [sid(T0 + i * MINUTE) for i in range(1, 201)]
    assert won["a"] + won["b"] == 200 and won["a"] > 0 and won["b"] > 0
    history = a_ledger.history("tick", 1000)
    assert len(history) == 200
    assert Counter(r.slot for r in history).most_common(1)[0][1] == 1
    assert {(r.trigger, r.status, r.detail) for r in history} == {("schedule", "queued", "")}


def test_two_processes_racing_on_one_ledger_claim_each_of_200_slots_once(
    tmp_path: Path,
) -> None:
    write_routine("race", command_routine("true"))
    # The ledger, and the routine's cursor at T0, made once before the race: the race is on the
    # claims. (Two schedulers starting at once on one new routine each reset its cursor to
    # their start, and a reset written after the other's first claims moved it back: a
    # catch-up then stood in for two slots. One daemon per ledger keeps that from happening.)
    with Ledger(paths().ledger) as ledger:
        Scheduler(ledger, (os.getpid(), 0.0)).sync(scan(paths()), ledger.states(), T0)
        assert ledger.state("race").cursor == sid(T0)
    go = tmp_path / "go"
    argv = [
        sys.executable,
        str(REPO / "tests/supervisor/schedhelper.py"),
        "walk",
        T0.isoformat(),
        "200",
        str(go),
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    go.touch()
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outs]
    won = [int(out) for out, _ in outs]
    with Ledger(paths().ledger) as ledger:
        rows = Counter((r.status, r.trigger) for r in ledger.history("race", 1000))
    assert sum(won) == 200, (won, rows, [err for _, err in outs])
    with Ledger(paths().ledger) as ledger:
        slots = claims(ledger, "race")
        history = ledger.history("race", 1000)
    assert slots == [sid(T0 + i * MINUTE) for i in range(1, 201)]
    assert sorted(r.slot or "" for r in history) == slots  # one run row per slot, no more


def test_the_clock_set_back_never_reruns_a_claimed_slot() -> None:
    reg = registry(r=command_routine("true", schedule='cron = "*/15 * * * *"'))
    ledger = Ledger(paths().ledger)
    sched = Scheduler(ledger, (1, 1.0))
    clock = FakeClock(T0 + timedelta(minutes=1))
    sched.sync(reg, ledger.states(), clock.now())
    clock.set(T0 + timedelta(minutes=15, seconds=3))
    [first] = sched.due(clock.now(), never_busy)
    clock.set(T0 + timedelta(minutes=30, seconds=3))
    [second] = sched.due(clock.now(), never_busy)
    assert (first.slot, second.slot) == (sid(T0 + 15 * MINUTE), sid(T0 + 30 * MINUTE))

    clock.set(clock.now() - timedelta(hours=1))  # an NTP step back
    for _ in range(8):  # walk back up to where it was, and a little past
        assert sched.due(clock.now(), never_busy) == []
        clock.advance(timedelta(minutes=8))
    assert clock.now() > T0 + 30 * MINUTE
    assert ledger.state("r").cursor == sid(T0 + 30 * MINUTE)
    clock.set(T0 + timedelta(minutes=45, seconds=2))
    [third] = sched.due(clock.now(), never_busy)
    assert third.slot == sid(T0 + 45 * MINUTE)
    assert claims(ledger, "r") == [sid(T0 + m * MINUTE) for m in (15, 30, 45)]

    # A restart while the clock is behind resumes the stored cursor: still nothing reruns.
    again = Scheduler(ledger, (2, 2.0))
    again.sync(reg, ledger.states(), T0)
    assert again.due(T0 + 46 * MINUTE, never_busy) == []
    assert again.next_wake() == T0 + 60 * MINUTE


def test_three_hours_jump_over_a_quarter_hourly_routine() -> None:
    reg = registry(
        catchup=command_routine("true", schedule='cron = "*/15 * * * *"'),
        skipper=command_routine("true", schedule='cron = "*/15 * * * *"', missed="skip"),
    )
    ledger = Ledger(paths().ledger)
    sched = Scheduler(ledger, (1, 1.0))
    start = T0 + timedelta(minutes=7, seconds=30)  # mid-interval
    sched.sync(reg, ledger.states(), start)
    pending = sched.due(start + timedelta(hours=3), never_busy)
    assert [(p.routine.name, p.trigger, p.slot, p.detail) for p in pending] == [
        ("catchup", "catch_up", sid(T0 + timedelta(hours=3)), "stands in for 12 missed runs")
    ]
    [missed] = ledger.history("skipper")
    assert (missed.status, missed.slot, missed.detail) == (
        "missed",
        sid(T0 + timedelta(hours=3)),
        "12 missed runs",
    )
    [caught] = ledger.history("catchup")
    assert (caught.status, caught.trigger) == ("queued", "catch_up")


def test_years_ahead_then_corrected_is_bounded_and_owes_nothing_more() -> None:
    reg = registry(
        often=command_routine("true"),
        **{"often-skip": command_routine("true", missed="skip")},
    )
    ledger = Ledger(paths().ledger)
    sched = Scheduler(ledger, (1, 1.0))
    sched.sync(reg, ledger.states(), T0)
    ahead = T0 + timedelta(days=3 * 365, seconds=30)
    pending = sched.due(ahead, never_busy)
    # The newest slot is on time: it runs, standing in for (or after a row for) the rest.
    assert [(p.routine.name, p.trigger, p.detail) for p in pending] == [
        ("often", "catch_up", f"stands in for {MISSED_CAP:,}+ missed runs"),
        ("often-skip", "schedule", ""),
    ]
    [missed] = [r for r in ledger.history("often-skip") if r.status == "missed"]
    assert missed.detail == f"{MISSED_CAP:,}+ missed runs"
    assert len(ledger.history(None, 100)) == 3  # bounded: not a row per missed minute

    # Corrected: nothing is owed from before now, the routines resume at their next slot
    # (not in three years), and the claimed future slot cannot run again.
    assert sched.due(T0 + timedelta(minutes=5, seconds=30), never_busy) == []
    assert ledger.state("often").cursor == sid(T0 + timedelta(minutes=5, seconds=30))
    resumed = sched.due(T0 + timedelta(minutes=6, seconds=1), never_busy)
    assert [(p.routine.name, p.slot) for p in resumed] == [
        ("often", sid(T0 + 6 * MINUTE)),
        ("often-skip", sid(T0 + 6 * MINUTE)),
    ]
    assert sched.due(ahead, never_busy) == []


def test_busy_routine_records_one_skip_and_is_not_caught_up() -> None:
    reg = registry(slow=command_routine("true"))
    ledger = Ledger(paths().ledger)
    sched = Scheduler(ledger, (1, 1.0))
    sched.sync(reg, ledger.states(), T0)
    [run] = sched.due(T0 + MINUTE, never_busy)
    assert sched.due(T0 + 2 * MINUTE, lambda name: name == "slow") == []
    assert sched.due(T0 + 3 * MINUTE, lambda name: name == "slow") == []
    # Free again: the next slot runs on its own; the skipped ones are not owed.
    [nxt] = sched.due(T0 + 4 * MINUTE + timedelta(seconds=2), never_busy)
    assert nxt.slot == sid(T0 + 4 * MINUTE) and nxt.detail == ""
    statuses = [(r.slot, r.status, r.detail) for r in reversed(ledger.history("slow"))]
    assert statuses == [
        (sid(T0 + MINUTE), "queued", ""),
        (sid(T0 + 2 * MINUTE), "skipped", "previous run still going"),
        (sid(T0 + 3 * MINUTE), "skipped", "previous run still going"),
        (sid(T0 + 4 * MINUTE), "queued", ""),
    ]
    assert run.slot == sid(T0 + MINUTE)


def test_a_restart_resumes_the_cursor_and_catches_up_what_was_missed_while_down() -> None:
    reg = registry(daily=command_routine("true", schedule='cron = "0 * * * *"'))
    ledger = Ledger(paths().ledger)
    first = Scheduler(ledger, (1, 1.0))
    first.sync(reg, ledger.states(), T0 - timedelta(minutes=30))
    [p] = first.due(T0 + timedelta(seconds=5), never_busy)
    assert p.slot == sid(T0)
    # Down for five hours; a new process (not "started") resumes from the stored cursor.
    second = Scheduler(ledger, (2, 2.0))
    second.sync(reg, ledger.states(), T0 + timedelta(hours=5, minutes=10))
    [p] = second.due(T0 + timedelta(hours=5, minutes=10), never_busy)
    assert (p.trigger, p.detail) == ("catch_up", "stands in for 5 missed runs")
    # A routine added while running owes nothing from before it appeared.
    reg = registry(fresh=command_routine("true", schedule='cron = "0 * * * *"'))
    second.sync(reg, ledger.states(), T0 + timedelta(hours=5, minutes=20))
    assert second.due(T0 + timedelta(hours=5, minutes=30), never_busy) == []
    due = second.due(T0 + timedelta(hours=6, seconds=1), never_busy)
    assert [(p.routine.name, p.trigger, p.detail) for p in due] == [
        ("daily", "schedule", ""),
        ("fresh", "schedule", ""),
    ]


def test_sync_names_the_routines_it_stops_tracking_and_why() -> None:
    reg = registry(
        on=command_routine("true"), off=command_routine("true"), gone=command_routine("true")
    )
    with Ledger(paths().ledger) as ledger:
        sched = Scheduler(ledger, (1, 1.0))
        assert sched.sync(reg, ledger.states(), T0) == {}
        assert set(sched.tracked) == {"on", "off", "gone"}
        ledger.disable(
            "off", file_enabled=True, file_identity=identity(paths().routines_dir / "off.toml")
        )
        (paths().routines_dir / "gone.toml").unlink()
        turned_off = sched.sync(scan(paths()), ledger.states(), T0)
        assert turned_off == {"off": "disabled while queued", "gone": "removed while queued"}
        assert set(sched.tracked) == {"on"}
        assert sched.sync(scan(paths()), ledger.states(), T0) == {}  # said once


def test_many_due_at_once_are_claimed_in_batches_in_order_each_once() -> None:
    names = [f"r{i:02d}" for i in range(40)]
    reg = registry(**{n: command_routine("true") for n in names})
    ledger = Ledger(paths().ledger)
    sched = Scheduler(ledger, (1, 1.0))
    clock = FakeClock(T0)
    sched.sync(reg, ledger.states(), clock.now())
    at = T0 + MINUTE + timedelta(seconds=1)
    batches = []
    while True:
        batch = sched.due(at, never_busy, limit=16)
        batches.append([p.routine.name for p in batch])
        if not sched.more_due:
            break
    assert [len(b) for b in batches] == [16, 16, 8]
    assert [n for b in batches for n in b] == sorted(names)  # fair: in the order tracked
    assert sched.due(at, never_busy, limit=16) == [] and not sched.more_due  # each once
    assert {n: claims(ledger, n) for n in names} == {n: [sid(T0 + MINUTE)] for n in names}


def test_a_rebase_resumes_from_the_new_ledgers_cursors() -> None:
    """One scheduler moved to another ledger (a fleet machine's own file while the fleet's
    database is away, and back): it claims there, from that ledger's stored cursor, catching up
    what it missed there by the usual rule, and stamps each run with the ledger it claimed in."""
    reg = registry(hourly=command_routine("true", schedule='cron = "0 * * * *"'))
    fleet, own = Ledger(paths().ledger), Ledger(paths().state_dir / "own.db")
    sched = Scheduler(fleet, (1, 1.0))
    sched.sync(reg, fleet.states(), T0 - timedelta(minutes=30))
    [p] = sched.due(T0 + timedelta(seconds=5), never_busy)
    assert p.ledger is fleet
    own.set_cursor("hourly", sid(T0), fleet.state("hourly").schedule_fingerprint)
    sched.rebase(own)
    assert sched.tracked == {}
    sched.sync(reg, own.states(), T0 + timedelta(hours=3, minutes=10))
    [p] = sched.due(T0 + timedelta(hours=3, minutes=10), never_busy)
    assert (p.trigger, p.detail, p.ledger) == ("catch_up", "stands in for 3 missed runs", own)
    assert claims(own, "hourly") == [sid(T0 + timedelta(hours=3))]
    assert claims(fleet, "hourly") == [sid(T0)]  # nothing claimed in the other
    sched.rebase(fleet)  # back: the fleet's cursor, not the file's
    sched.sync(reg, fleet.states(), T0 + timedelta(hours=3, minutes=20))
    [p] = sched.due(T0 + timedelta(hours=3, minutes=20), never_busy)
    assert (p.trigger, p.ledger) == ("catch_up", fleet)
    assert claims(fleet, "hourly") == [sid(T0), sid(T0 + timedelta(hours=3))]
