"""An in-memory Spawner for the pool's tests: workers that start at once, wait at a gate the
test opens, and end as scripted. No process, no pipe, no real time (the pool's other seam,
the clock, is a FakeClock); see tests/supervisor/test_pool.py.

Real workers are supervisor/engine/spawn.py's WorkerProcess, tested in test_spawn.py and end to end
in the daemon tests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from ipc import Event, EventKind, Job, Result
from routines.runs import RunStatus
from supervisor.engine.runlog import RunLog
from supervisor.engine.spawn import StopReason, UsageTotals, WorkerOutcome

__all__ = ["FakeSpawner", "FakeWorker", "settle"]


async def settle(rounds: int = 50) -> None:
    """Let every ready task run until the loop is idle (a bounded number of passes)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


@dataclass
class FakeWorker:
    spawner: FakeSpawner
    job: Job
    on_started: Callable[[int], None]
    on_event: Callable[[Event], None]
    timeout_sec: float
    pid: int | None = None
    stop_reason: StopReason | None = None
    leases: list[float] = field(default_factory=list)  # each renewal's deadline, in order
    _stopped: asyncio.Event = field(default_factory=asyncio.Event)

    def stop(self, reason: StopReason) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
        self._stopped.set()

    def renew_lease(self, until: float) -> None:
        self.leases.append(until)

    async def run(self) -> WorkerOutcome:
        name = self.job.routine_name
        self.pid = self.spawner.next_pid()
        self.spawner.started.append(name)
        self.spawner.live.add(self.job.run_id)
        self.spawner.peak = max(self.spawner.peak, len(self.spawner.live))
        try:
            self.on_started(self.pid)
            self.on_event(Event(EventKind.LOG, f"fake worker for {name}"))
            gate = self.spawner.gates.get(name)
            if gate is not None:
                stopped = asyncio.ensure_future(self._stopped.wait())
                opened = asyncio.ensure_future(gate.wait())
                await asyncio.wait({stopped, opened}, return_when=asyncio.FIRST_COMPLETED)
                stopped.cancel()
                opened.cancel()
            if self.stop_reason is not None:
                return WorkerOutcome(None, -15, UsageTotals(), stopped=self.stop_reason)
            result = self.spawner.results.get(name) or Result(status=RunStatus.OK, summary="done")
            return WorkerOutcome(result, 0, UsageTotals(), pid=self.pid)
        finally:
            self.spawner.live.discard(self.job.run_id)


@dataclass
class FakeSpawner:
    """`hold(name)` keeps that routine's workers running until `release(name)`; `results`
    scripts what a routine's worker reports (default: ok)."""

    gates: dict[str, asyncio.Event] = field(default_factory=dict)
    results: dict[str, Result] = field(default_factory=dict)
    started: list[str] = field(default_factory=list)  # routine names, in start order
    live: set[str] = field(default_factory=set)  # run ids of workers running now
    peak: int = 0  # the most workers alive at once
    workers: list[FakeWorker] = field(default_factory=list)
    _pid: int = 40000

    def next_pid(self) -> int:
        self._pid += 1
        return self._pid

    def hold(self, *names: str) -> None:
        for name in names:
            self.gates[name] = asyncio.Event()

    def release(self, name: str) -> None:
        self.gates[name].set()

    def __call__(
        self,
        job: Job,
        *,
        log: RunLog,
        timeout_sec: float,
        on_event: Callable[[Event], None],
        on_started: Callable[[int], None],
        max_dollars: float | None,
        max_tokens: int | None,
    ) -> FakeWorker:
        worker = FakeWorker(self, job, on_started, on_event, timeout_sec)
        self.workers.append(worker)
        return worker
