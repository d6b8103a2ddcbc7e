"""The worker pool: a FIFO queue of pending runs and at most `max_concurrent` running workers.

Invariants (tests/supervisor/test_pool.py, on a FakeSpawner and a fake clock):
- Never more than `max_concurrent` workers at once; waiting runs start in the order they came.
- A routine is "busy" while it runs or waits: a slot due then is skipped, a manual run refused.
- Every run that leaves the queue ends with exactly one final status in the ledger
  (`Ledger.finish_run` changes only an active row).

A run goes admit (the allowance: refused runs start no worker) → prepare (scratch dir, job,
run log) → await (the spawner's worker) → finish (supervisor/engine/finish.py).

On a fleet (`fence`), each worker is told its lease's deadline (`Job.lease_until`) and each
renewal's new one; a run whose lease a renewal found gone is stopped at once and recorded
`interrupted` (`leases_renewed`; tests/supervisor/test_pool_fence.py).

A run is recorded in the ledger it was claimed in (`Pending.ledger`, else the pool's): a fleet
machine's runs made while its database is away go to its own file, hold no lease, and share
this pool's `max_concurrent` with the fleet's runs (tests/supervisor/test_pool_fence.py::
test_a_run_claimed_in_another_ledger_is_recorded_there_and_holds_no_lease).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol
from zoneinfo import ZoneInfo

import msgspec

from ipc import Event, EventKind, Job, RunReply
from routines.ledger import LedgerUnavailable
from routines.ledger.api import LedgerAPI
from routines.runs import RunEnd, RunStatus, Trigger
from routines.spec import OnExceed, Routine
from routines.spec.config import Config
from routines.spec.paths import Paths
from routines.store import open_dir_beneath
from supervisor.engine.approvals import decisions_for
from supervisor.engine.clock import Clock
from supervisor.engine.finish import Finished, Notification, Unwritten, finish_run
from supervisor.engine.jobs import build_job, new_run_id
from supervisor.engine.limits import BudgetVerdict, RunAllowance, allowance_for, run_limit
from supervisor.engine.notify import unshown
from supervisor.engine.owner import owner_alive
from supervisor.engine.probecache import ProbeCache
from supervisor.engine.runlog import RunLog
from supervisor.engine.scheduler import Listener, Pending
from supervisor.engine.spawn import (
    Spawner,
    StopReason,
    UsageTotals,
    Worker,
    WorkerOutcome,
    WorkerSpawner,
)

if TYPE_CHECKING:
    from supervisor.engine.reply import ReplyTo

__all__ = ["Busy", "LeaseDeadlines", "Listener", "Pool", "Running"]

log = logging.getLogger("vinos.pool")


class Busy(RuntimeError):
    """A manual run refused: the routine runs or waits already (here or in another process)."""


class LeaseDeadlines(Protocol):
    """A fleet's leases (supervisor/fleet/member.py LeaseBook): "yours until" for a run's worker."""

    def deadline(self, run_id: str) -> float: ...


LEASE_LOST = "lease lost: a renewal found the run's lease gone (another machine ended it)"


@dataclass(slots=True)
class Running:
    pending: Pending
    worker: Worker | None
    started_at: datetime
    task: asyncio.Task[None]


@dataclass(frozen=True, slots=True)
class _Prepared:
    job: Job
    runlog: RunLog


class _NotPrepared(Exception):
    """The run cannot start (its scratch dir cannot be made): a failure, with the reason."""


class Pool:
    def __init__(
        self,
        *,
        ledger: LedgerAPI,
        paths: Paths,
        config: Config,
        clock: Clock,
        notify: Callable[[Notification], None],
        on_change: Callable[[], None],
        worker_argv: list[str] | None = None,
        spawner: Spawner | None = None,
        fence: LeaseDeadlines | None = None,
    ) -> None:
        self.ledger = ledger
        self.paths = paths
        self.config = config
        self.clock = clock
        self.notify = notify
        self.on_change = on_change
        self.spawner: Spawner = spawner or WorkerSpawner(worker_argv)
        # Real workers only: a stand-in spawner (tests) has no sandbox to probe for.
        self.probes = ProbeCache() if isinstance(self.spawner, WorkerSpawner) else None
        self.queue: deque[Pending] = deque()
        self.running: dict[str, Running] = {}
        self.finished: dict[str, Finished] = {}  # recent, for clients that ask after the end
        # Finished runs whose ledger row found no space, oldest first: none is lost, each is written
        # once
        # (test_reliability_full_disk.py::test_a_full_disk_pauses_the_daemon_and_loses_no_result).
        self.unwritten: list[Unwritten] = []
        self.accepting = True
        self.fence = fence
        self._lost: set[str] = set()  # runs whose lease went before their worker started
        # Unwritten results of runs recorded in another ledger than the pool's → that ledger.
        self._kept_in: dict[str, LedgerAPI] = {}

    # -- queries ----------------------------------------------------------------------------

    def ledger_of(self, pending: Pending) -> LedgerAPI:
        """Where `pending` is recorded: the ledger it was claimed in, else the pool's."""
        return self.ledger if pending.ledger is None else pending.ledger

    def recording_in(self, ledger: LedgerAPI) -> int:
        """How many runs recorded in `ledger` are queued, running, or kept unwritten (a fleet
        machine's runs made offline: they end, and are written, before they are copied in)."""
        runs = [*self.queue, *(r.pending for r in self.running.values())]
        kept = sum(1 for u in self.unwritten if self._kept_in.get(u.run_id) is ledger)
        return sum(1 for p in runs if p.ledger is ledger) + kept

    def busy(self, name: str) -> bool:
        return any(r.pending.routine.name == name for r in self.running.values()) or any(
            p.routine.name == name for p in self.queue
        )

    def active_run_of(self, name: str) -> str | None:
        for run_id, r in self.running.items():
            if r.pending.routine.name == name:
                return run_id
        for p in self.queue:
            if p.routine.name == name:
                return p.run_id
        return None

    def find(self, run_id: str) -> Pending | None:
        if run_id in self.running:
            return self.running[run_id].pending
        return next((p for p in self.queue if p.run_id == run_id), None)

    # -- events to listeners ----------------------------------------------------------------

    def broadcast(self, pending: Pending, event: Event) -> None:
        msg = Event(event.kind, event.text, event.data, run_id=pending.run_id)
        for conn in list(pending.listeners):
            if not conn.send(msg):
                pending.listeners.remove(conn)

    # -- admission --------------------------------------------------------------------------

    def submit_manual(
        self,
        routine: Routine,
        *,
        owner: tuple[int, float],
        listener: Listener | None = None,
        reply: ReplyTo | None = None,
        debug: bool = False,
    ) -> tuple[Pending, asyncio.Future[RunReply]]:
        """Admit a manual run of `routine` (the daemon's `run` and `reply`, and both without a
        daemon; `reply`: it continues that run's conversation, or resumes a paused one):
        refused with Busy while the routine runs or waits, here or under another live owner,
        or while one of its runs waits for a person (a resume aside); else its row is recorded
        `queued` (LedgerUnavailable: nothing recorded, nothing runs) and it is queued. The future
        resolves with how it ended."""
        name = routine.name
        mine = self.active_run_of(name)
        if mine is not None:
            raise Busy(f"{name} is already running ({mine}): previous run still going")
        for active in self.ledger.active_runs():
            if active.routine == name and owner_alive(active.owner_pid, active.owner_started):
                raise Busy(
                    f"{name} is already running ({active.run_id}, in another process): "
                    "previous run still going"
                )
        if reply is None or reply.answer is None:  # a resume is how a paused run goes on
            for paused in self.ledger.paused_runs():
                if paused.routine == name:  # never beside it (tests/supervisor/
                    # test_daemon_needs_you.py::test_a_paused_run_frees_its_slot_and_…)
                    raise Busy(
                        f"{name} is waiting for you on {paused.run_id}: answer it first "
                        "(vinos-routine pending)"
                    )
        now = self.clock.now()
        run_id = new_run_id(name, now)
        trigger = reply.trigger if reply else Trigger.MANUAL
        self.ledger.record_run(
            name,
            run_id=run_id,
            trigger=trigger,
            status=RunStatus.QUEUED,
            now=now,
            owner=owner,
            parent_run_id=reply.parent_run_id if reply else None,
        )
        detail = reply.detail() if reply else "manual run"
        pending = Pending(run_id, routine, trigger, None, detail, reply=reply, debug=debug)
        if listener is not None:
            pending.listeners.append(listener)
        done: asyncio.Future[RunReply] = asyncio.get_running_loop().create_future()
        pending.on_done.append(done)
        self.enqueue(pending)
        return pending, done

    def enqueue(self, pending: Pending) -> None:
        self.queue.append(pending)
        queued = RunStatus.QUEUED
        self.broadcast(pending, Event(EventKind.STATUS, queued, {"status": queued}))
        self.admit()

    def drop_queued(self, name: str, detail: str) -> int:
        """Take `name`'s waiting runs off the queue, each recorded `skipped` with `detail`
        (e.g. "disabled while queued"); a run already started is left to finish."""
        dropped = [p for p in self.queue if p.routine.name == name]
        for pending in dropped:
            self.queue.remove(pending)
            fin = self._record_failure(pending, detail, RunStatus.SKIPPED)
            self.finished[pending.run_id] = fin
            self.broadcast(
                pending, Event(EventKind.STATUS, f"{fin.status}: {detail}", fin.as_json())
            )
            self._resolve(pending, fin)
        return len(dropped)

    def admit(self) -> None:
        while self.accepting and self.queue and len(self.running) < self.config.max_concurrent:
            pending = self.queue.popleft()
            task = asyncio.ensure_future(self._run(pending))
            self.running[pending.run_id] = Running(pending, None, self.clock.now(), task)

    async def _run(self, pending: Pending) -> None:
        try:
            fin = await self._execute(pending)
        except LedgerUnavailable as exc:
            # The ledger failed it (the budget check during an outage, a full disk): the run
            # did not execute, so it is `skipped` with the reason, never `failed` nor a strike
            # (tests/supervisor/test_pool.py).
            fin = self._record_failure(
                pending,
                f"not run: the ledger is unavailable ({exc.reason}): {exc}",
                RunStatus.SKIPPED,
            )
        except Exception as exc:  # a bug here must not leave the run active forever
            log.exception("run %s failed inside the supervisor", pending.run_id)
            fin = self._record_failure(pending, f"supervisor error: {type(exc).__name__}: {exc}")
        finally:
            self.running.pop(pending.run_id, None)
        self.finished[pending.run_id] = fin
        if fin.unwritten is not None and fin.unwritten not in self.unwritten:
            log.warning(
                "%s: run %s ended %s; the ledger takes no writes now, recorded later",
                fin.routine,
                fin.run_id,
                fin.status,
            )
            self._keep(pending, fin.unwritten)
        while len(self.finished) > 200:
            self.finished.pop(next(iter(self.finished)))
        text = f"{fin.status}" + (f" · {fin.outcome}" if fin.outcome else "")
        if fin.detail:
            text += f": {fin.detail}"
        self.broadcast(pending, Event(EventKind.STATUS, text, fin.as_json()))
        self._resolve(pending, fin)
        for note in fin.notifications:
            self.notify(note)
        self.admit()
        self.on_change()

    @staticmethod
    def _resolve(pending: Pending, fin: Finished) -> None:
        """Answer whoever waits on the run (a `run` client, the in-process CLI)."""
        for fut in pending.on_done:
            if not fut.done():
                fut.set_result(fin.reply())

    def _record_failure(
        self, pending: Pending, detail: str, status: RunStatus = RunStatus.FAILED
    ) -> Finished:
        """End a run that no worker ended (refused, dropped, stopped, or a supervisor error).

        The ledger changes only a run still active: when its ending was written before (an
        error after `ok` was recorded), that ending stands and is what this returns."""
        now = self.clock.now()
        end = RunEnd(status, detail)
        unwritten = None
        try:
            if not self.ledger_of(pending).finish_run(pending.run_id, end, now=now):
                return self._recorded(pending)
        except LedgerUnavailable:
            unwritten = Unwritten(pending.routine, pending.run_id, now, end, strikes=False)
            self._keep(pending, unwritten)  # whichever path recorded it (drop, stop, budget)
        return Finished(
            pending.run_id,
            pending.routine.name,
            status,
            None,
            detail,
            None,
            0.0,
            False,
            (),
            unwritten,
        )

    def _recorded(self, pending: Pending) -> Finished:
        """The ending the ledger holds for a run that ended already."""
        row = self.ledger_of(pending).run(pending.run_id)
        status = row.status if row and isinstance(row.status, RunStatus) else RunStatus.FAILED
        return Finished(
            pending.run_id,
            pending.routine.name,
            status,
            row.outcome if row else None,
            (row.detail or "") if row else "",
            None,
            float(row.dollars or 0.0) if row else 0.0,
            False,
            (),
        )

    def _keep(self, pending: Pending, unwritten: Unwritten) -> None:
        if unwritten in self.unwritten:
            return
        self.unwritten.append(unwritten)
        if pending.ledger is not None and pending.ledger is not self.ledger:
            self._kept_in[pending.run_id] = pending.ledger

    def flush(self) -> int:
        """Write the results kept while the disk was full, oldest first; how many were.
        Raises LedgerUnavailable (keeping the rest) while there is still no space."""
        written = 0
        while self.unwritten:
            run_id = self.unwritten[0].run_id
            notes = self.unwritten[0].write(self._kept_in.get(run_id, self.ledger))
            self.unwritten.pop(0)
            self._kept_in.pop(run_id, None)
            written += 1
            for note in notes:
                self.notify(note)
        return written

    async def _execute(self, pending: Pending) -> Finished:
        now = self.clock.now()
        allowance = self._allowance(pending, now)
        if allowance.verdict is BudgetVerdict.REFUSE:
            return self._refuse(pending, allowance)
        if too_dear := self._too_dear(pending, allowance):
            return self._record_failure(pending, too_dear, RunStatus.BUDGET)
        try:
            prepared = self._prepare(pending, now, allowance)
        except _NotPrepared as exc:
            return self._finish(
                pending, now, WorkerOutcome(None, None, UsageTotals(), error=str(exc))
            )
        try:
            out = await self._await_worker(pending, prepared, allowance)
            fin = self._finish(pending, now, out)
            if fin.output is not None:
                # The name it was stored under, which only the move decided: never the
                # worker's scratch name (tests/cli/test_cli_run_output.py).
                written = f"output written: {fin.output.name}"
                prepared.runlog.write(EventKind.LOG, written)
                self.broadcast(pending, Event(EventKind.LOG, written))
            if unshown_why := unshown(pending.routine):
                # Once a run, in its log (`logs`) and to whoever follows it (`run`).
                prepared.runlog.write(EventKind.WARN, unshown_why)
                self.broadcast(pending, Event(EventKind.WARN, unshown_why))
            end = f"{fin.status}: {fin.detail}" if fin.detail else fin.status
            prepared.runlog.write("end", end, fin.as_json())
        finally:
            prepared.runlog.close()
        return fin

    # admit: what the run may spend; a spent day records `budget` and starts no worker.

    def _allowance(self, pending: Pending, now: datetime) -> RunAllowance:
        routine = pending.routine
        zone = ZoneInfo(routine.schedule.timezone)
        spent = self.ledger_of(pending).spent_today(routine.name, zone, now)
        return allowance_for(routine, spent)

    def _too_dear(self, pending: Pending, allowance: RunAllowance) -> str | None:
        """Why the run cannot fit what is left of its budget even at the router's minimum
        estimate (routines/estimate.py), before any worker or model call; None to go on
        (tests/supervisor/test_daemon_triggers.py::test_a_run_too_dear_for_its_budget_is_skipped_before_dispatch)."""
        from routines.estimate import estimate, refusal

        extra = len(pending.event.text) if pending.event else 0
        est = estimate(pending.routine, self.config.providers, self.config.pricing, extra)
        degrade = pending.routine.budget.on_exceed is OnExceed.DEGRADE
        return refusal(est, allowance.max_tokens, allowance.dollars_left, degrade=degrade)

    def _refuse(self, pending: Pending, allowance: RunAllowance) -> Finished:
        fin = self._record_failure(pending, allowance.detail, RunStatus.BUDGET)
        if not allowance.notify:
            return fin
        note = Notification(f"{pending.routine.name}: budget", allowance.detail)
        return Finished(
            fin.run_id, fin.routine, fin.status, None, fin.detail, None, 0.0, False, (note,)
        )

    # prepare: the scratch dir, the job and the run log; _NotPrepared when it cannot.

    def _prepare(self, pending: Pending, now: datetime, allowance: RunAllowance) -> _Prepared:
        routine = pending.routine
        scratch = self.paths.scratch(routine.name, pending.run_id)
        state = self.paths.routine_state(routine.name)
        try:
            # Beneath the state dir, following no link: a `.scratch` link left by an older
            # version (whose sandboxes could write there) fails the run, never redirects it.
            os.close(open_dir_beneath(state, str(scratch.relative_to(state)), make=True))
        except OSError as exc:
            # Counts as a failure (a full or read-only state dir is something to fix).
            raise _NotPrepared(
                f"cannot create the run's scratch dir {scratch}: {exc.strerror or exc}"
            ) from exc
        from routines.signing import effective_permissions

        permissions, dropped = effective_permissions(routine, self.paths.allowed_signers)
        job = build_job(
            routine,
            run_id=pending.run_id,
            trigger=pending.trigger,
            slot=pending.slot,
            now=now,
            max_tokens=allowance.max_tokens,
            dollars_left=allowance.dollars_left,
            paths=self.paths,
            config=self.config,
            reply=pending.reply,
            decisions=decisions_for(self.ledger_of(pending), self.paths, routine),
            debug=pending.debug,
            event=pending.event,
            sandbox_probe=self.probes.get(self.config.sandbox.bwrap) if self.probes else None,
            permissions=permissions,
        )
        runlog = RunLog(self.paths.run_log(routine.name, pending.run_id), base=state)
        runlog.write("start", f"{pending.trigger} run of {routine.name}", {"slot": pending.slot})
        if pending.detail:
            runlog.write("log", pending.detail)
        if dropped:
            runlog.write(EventKind.WARN, dropped)
        return _Prepared(job, runlog)

    # await: the worker, from the spawner, until it and all it started are gone.

    async def _await_worker(
        self, pending: Pending, prepared: _Prepared, allowance: RunAllowance
    ) -> WorkerOutcome:
        routine = pending.routine
        ledger = self.ledger_of(pending)

        def started(pid: int) -> None:
            try:
                ledger.start_run(pending.run_id, now=self.clock.now(), worker_pid=pid)
            except LedgerUnavailable:  # the row says `queued` until its end is written
                log.warning(
                    "%s: no space to record that run %s started", routine.name, pending.run_id
                )
            self.broadcast(pending, Event(EventKind.STATUS, RunStatus.RUNNING, {"pid": pid}))

        job = prepared.job
        if self.fence is not None and ledger is self.ledger:  # a lease is the pool's ledger's
            if pending.run_id in self._lost:  # gone while it was being prepared
                self._lost.discard(pending.run_id)
                return WorkerOutcome(None, None, UsageTotals(), stopped=StopReason.LEASE)
            job = msgspec.structs.replace(job, lease_until=self.fence.deadline(pending.run_id))
        worker = self.spawner(
            job,
            log=prepared.runlog,
            timeout_sec=run_limit(routine).seconds,
            on_event=lambda e: self.broadcast(pending, e),
            on_started=started,
            max_dollars=allowance.dollars_left,
            max_tokens=allowance.max_tokens,
        )
        entry = self.running.get(pending.run_id)
        if entry is not None:
            entry.worker = worker
        return await worker.run()

    # finish: the final status, output, ledger row, strikes (supervisor/engine/finish.py).

    def _finish(self, pending: Pending, started_at: datetime, out: WorkerOutcome) -> Finished:
        limit = run_limit(pending.routine)
        return finish_run(
            self.ledger_of(pending),
            self.paths,
            pending.routine,
            run_id=pending.run_id,
            trigger=pending.trigger,
            slot=pending.slot,
            started_at=started_at,
            out=out,
            timeout_sec=limit.seconds,
            now=self.clock.now(),
            note=pending.detail if pending.slot else "",
            limit_key=limit.key,
            pause_timeout=self.config.pause_timeout(pending.routine.needs_you_timeout),
        )

    # -- the fleet's leases -------------------------------------------------------------------

    def leases_renewed(self, deadlines: Mapping[str, float], lost: Iterable[str]) -> None:
        """A renewal: tell each running worker its new deadline; stop at once the runs whose
        lease it found gone (a queued one is dropped, `interrupted`): another machine ended
        them and may run the routine now. Run ids this pool does not hold are ignored."""
        for run_id, until in deadlines.items():
            r = self.running.get(run_id)
            if r is not None and r.worker is not None:
                r.worker.renew_lease(until)
        # A run whose lease is gone was ended by another machine: its row is final (written
        # there), so whatever this worker reports, even an `ok` that ended before its
        # deadline while this daemon was stopped, is not recorded over it. Rewriting a final
        # row another machine wrote would undo what that machine already did with it (its
        # last-run state, its notification, the next run it told of it): docs/fleet.md,
        # "A run that ended while its daemon was stopped".
        for run_id in lost:
            r = self.running.get(run_id)
            if r is not None:
                log.warning("%s: run %s stopped: its lease is gone", r.pending.routine.name, run_id)
                if r.worker is not None:
                    r.worker.stop(StopReason.LEASE)
                else:
                    self._lost.add(run_id)
                continue
            pending = next((p for p in self.queue if p.run_id == run_id), None)
            if pending is not None:
                self.queue.remove(pending)
                fin = self._record_failure(pending, LEASE_LOST, RunStatus.INTERRUPTED)
                self.finished[run_id] = fin
                self.broadcast(pending, Event(EventKind.STATUS, f"{fin.status}: {fin.detail}",
                                              fin.as_json()))  # fmt: skip
                self._resolve(pending, fin)

    # -- stopping -----------------------------------------------------------------------------

    async def shutdown(self, grace: float) -> None:
        """Admit nothing new; wait up to `grace` s for running workers, then end them."""
        self.accepting = False
        while self.queue:
            pending = self.queue.popleft()
            fin = self._record_failure(
                pending, "the daemon stopped before it started", RunStatus.INTERRUPTED
            )
            self._resolve(pending, fin)
        tasks = [r.task for r in self.running.values()]
        if not tasks:
            return
        _done, still = await asyncio.wait(tasks, timeout=grace)
        for r in list(self.running.values()):
            if r.worker is not None:
                r.worker.stop(StopReason.SHUTDOWN)
        if still:
            await asyncio.wait(still, timeout=30)
