"""A scheduler in a process of its own, for tests that need a second process on the ledger.

    python tests/supervisor/schedhelper.py crash-after-claim BEFORE AT
        track the routines from BEFORE, claim what is due at AT, then SIGKILL itself: a
        supervisor that crashed between the claim and the worker's start.
    python tests/supervisor/schedhelper.py walk START MINUTES GO_FILE
        wait for GO_FILE, then step a clock one minute at a time from START (a step every
        4 ms after GO_FILE's mtime, so two walkers contend for each slot), claiming what is
        due at each step (busy never), and print how many claims it won.

Both use the real Scheduler on the ledger of $VINOS_HOME, with the daemon lock not taken: that is
the point (even two processes on one state dir cannot double-run a slot).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

from routines.ledger import Ledger
from routines.spec.paths import paths
from routines.spec.registry import scan
from supervisor.engine.owner import process_identity
from supervisor.engine.scheduler import Scheduler


def _scheduler() -> tuple[Scheduler, Ledger]:
    ledger = Ledger(paths().ledger)
    return Scheduler(ledger, process_identity()), ledger


def crash_after_claim(before: datetime, at: datetime) -> None:
    sched, ledger = _scheduler()
    sched.sync(scan(paths()), ledger.states(), before)
    claimed = sched.due(at, lambda name: False)
    print(",".join(p.run_id for p in claimed), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def walk(start: datetime, minutes: int, go: Path) -> None:
    sched, ledger = _scheduler()
    sched.sync(scan(paths()), ledger.states(), start)
    while not go.exists():
        time.sleep(0.001)
    begin = go.stat().st_mtime
    won = 0
    for i in range(1, minutes + 1):
        # Both walkers reach step i at about the same moment, so they contend for its slot.
        time.sleep(max(0.0, begin + i * 0.004 - time.time()))
        won += len(sched.due(start + timedelta(minutes=i, seconds=1), lambda name: False))
        if sched.full is not None:  # what kept a claim from being made, for the test to show
            print(f"step {i}: {sched.full}", file=sys.stderr, flush=True)
    print(won, flush=True)


if __name__ == "__main__":
    cmd, *args = sys.argv[1:]
    if cmd == "crash-after-claim":
        crash_after_claim(datetime.fromisoformat(args[0]), datetime.fromisoformat(args[1]))
    elif cmd == "walk":
        walk(datetime.fromisoformat(args[0]), int(args[1]), Path(args[2]))
    else:
        raise SystemExit(f"unknown command {cmd}")
