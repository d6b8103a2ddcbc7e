"""What `status` answers, built from the daemon's parts (supervisor/daemon.py `snapshot`)."""

from __future__ import annotations

import os
from datetime import datetime

from ipc import ActiveEntry, FleetStatus, NextFire, StatusReply
from routines.spec.registry import Registry
from supervisor.engine.health import Ground
from supervisor.engine.pool import Pool
from supervisor.engine.scheduler import Scheduler

__all__ = ["status_reply"]


def status_reply(
    *,
    pool: Pool,
    scheduler: Scheduler,
    registry: Registry,
    ground: Ground,
    started_at: datetime,
    now: datetime,
    max_concurrent: int,
    line: str,
    fleet: FleetStatus | None,
) -> StatusReply:
    return StatusReply(
        daemon=True,
        running=[
            ActiveEntry(
                routine=r.pending.routine.name,
                run_id=run_id,
                trigger=r.pending.trigger,
                slot=r.pending.slot,
                started_at=r.started_at.isoformat(),
                pid=r.worker.pid if r.worker else None,
            )
            for run_id, r in pool.running.items()
        ],
        queued=[ActiveEntry(p.routine.name, p.run_id, p.trigger, p.slot) for p in pool.queue],
        next=[NextFire(n, at.isoformat()) for n, at in scheduler.next_fires()[:20]],
        routines=len(registry.entries),
        enabled=len(scheduler.tracked),
        invalid=sorted(n for n, e in registry.entries.items() if e.errors),
        # Invalid on disk, but the last good version is what runs
        # (test_daemon_reload.py::test_an_invalid_edit_keeps_the_last_good_version_running).
        stale=sorted(n for n, e in registry.entries.items() if e.stale),
        pid=os.getpid(),
        started_at=started_at.isoformat(),
        now=now.isoformat(),
        max_concurrent=max_concurrent,
        status=line,
        lost=ground.lost,
        disk_full=ground.full,
        health=ground.health,
        unwritten=[u.run_id for u in pool.unwritten],
        fleet=fleet,
    )
