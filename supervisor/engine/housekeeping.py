"""The daemon's idle work: compact old runs, give freed pages back, delete old outputs/logs.

Each `step` is one small batch (about ten milliseconds): at most BATCH_ROWS runs folded into
their day rows (one transaction: `Ledger.compact`), then, once compaction has caught up, at
most VACUUM_PAGES pages returned by `incremental_vacuum`, and the outputs and run logs of a
few routines pruned (supervisor/engine/retention.py; a pass over every routine once a day), and in
the same daily pass decided proposals older than `keep_runs_days` deleted, PROPOSAL_BATCH at a
time, and as many conversations kept for a pause that long ago (never a paused run's). `run`
paces the batches so a backlog (the first start after an upgrade, with a year of history)
costs at most CATCH_UP_CPU_SHARE of one CPU, and otherwise looks again once an hour: in
steady state a day's new runs take one pass, far inside the idle CPU target.

A wall clock that jumps far ahead while the daemon runs (a bad RTC, a manual date) would make
recent runs look old and their outputs expired: housekeeping then waits (CLOCK_JUMP_LIMIT,
measured against CLOCK_BOOTTIME, which counts suspend) until the clock comes back or the
daemon restarts.

A crash anywhere loses nothing: a batch commits whole or not at all, and the next start
resumes from the oldest run left (tests/routines/ledger/test_ledger_compaction.py).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from routines import proposals
from routines.ledger import LedgerError, LedgerUnavailable, Unavailable, iso
from routines.ledger.api import Store, Vacuum
from routines.ledger.faults import is_no_space
from routines.ledger.rundays import compaction_line
from routines.schedule.tz import machine_timezone
from routines.spec.config import Config, LedgerSettings
from routines.spec.paths import Paths
from supervisor.engine.clock import Clock
from supervisor.engine.retention import cutoffs, prune_routine, routine_dirs

__all__ = ["Housekeeper", "Step", "retry_after", "start"]

log = logging.getLogger("vinos.housekeeping")

BATCH_ROWS = 500
VACUUM_PAGES = 256  # 1 MiB at 4 KiB pages
PRUNE_DIRS = 8  # routine directories pruned per step
PROPOSAL_BATCH = 200  # decided proposals deleted per step
CATCH_UP_CPU_SHARE = 0.02
IDLE_PAUSE_SEC = 3600.0
PRUNE_EVERY_SEC = 86400.0
# Let start-up (and its first due runs) go first; the daemon passes its Timings'
# housekeeping_delay_sec (tests shorten it).
START_DELAY_SEC = 30.0
MIN_PAUSE_SEC = 0.05
CLOCK_JUMP_LIMIT = timedelta(days=1)


@dataclass(frozen=True, slots=True)
class Step:
    compacted: int  # runs folded into day rows
    free_pages: int  # pages still free in the file after this step's vacuum
    pruned: int  # output and log files deleted
    more: bool  # whether another batch has work to do now
    proposals: int = 0  # decided proposals deleted


class Housekeeper:
    def __init__(
        self,
        ledger: Store,
        state_dir: str,
        settings: LedgerSettings,
        clock: Clock,
        *,
        start_delay: float | None = None,
    ) -> None:
        self.ledger = ledger
        self.start_delay = start_delay  # None: START_DELAY_SEC, as it is when `run` begins
        self._proposals_due = False  # decided proposals may be past retention (once a day)
        self.state_dir = state_dir
        self.settings = settings
        self.clock = clock
        self._dirs: list[str] = []  # routine dirs still to prune in this pass
        self._next_pass: float | None = None  # clock.monotonic() of the next prune pass
        self._converted = False
        self._anchor: tuple[datetime, float] | None = None  # (wall clock, boot time) at start
        self._jumped = False
        self._poked = asyncio.Event()  # new settings: end the idle pause now

    def reconfigure(self, settings: LedgerSettings) -> None:
        """The daemon's reload: retention as config.toml now says, applied from the next
        step, which comes now, not after the idle hour; a changed retention starts a prune
        pass at once (tests/supervisor/test_daemon_reload.py::
        test_reload_reaches_housekeepings_retention)."""
        if settings == self.settings:
            return
        self.settings = settings
        self._next_pass = None
        self._dirs = []
        self._poked.set()

    def _clock_jumped(self, now: datetime) -> bool:
        boot = time.clock_gettime(time.CLOCK_BOOTTIME)
        if self._anchor is None:
            self._anchor = (now, boot)
        ahead = now - (self._anchor[0] + timedelta(seconds=boot - self._anchor[1]))
        jumped = ahead > CLOCK_JUMP_LIMIT
        if jumped and not self._jumped:
            log.warning(
                "housekeeping: the wall clock is %s ahead of where it was at start; nothing is "
                "compacted or deleted until it comes back (or the daemon restarts)",
                ahead,
            )
        self._jumped = jumped
        return jumped

    def step(self) -> Step:
        now = self.clock.now()
        if self._clock_jumped(now):
            return Step(0, 0, 0, False)
        zone = ZoneInfo(machine_timezone())
        line = compaction_line(now, zone, self.settings.keep_runs_days)
        compacted = self.ledger.compact(line, zone, BATCH_ROWS, self.settings.keep_runs_max)
        free = 0
        if compacted < BATCH_ROWS and isinstance(self.ledger, Vacuum):  # SQLite's alone
            if not self._converted:
                # Only when the migration's VACUUM could not run (a busy or full disk): now,
                # with the history compacted, the file to rewrite is small.
                self._converted = self.ledger.enable_incremental_vacuum()
            if self._converted:  # else incremental_vacuum frees nothing: not "more" work
                free = self.ledger.incremental_vacuum(VACUUM_PAGES)
        pruned = 0
        mono = self.clock.monotonic()
        if not self._dirs and (self._next_pass is None or mono >= self._next_pass):
            # Retention is in days: one pass over the routines' dirs a day is enough (with
            # 10,000 routines a pass is real work, which the idle target must not see hourly).
            self._dirs = routine_dirs(self.state_dir)
            self._next_pass = mono + PRUNE_EVERY_SEC
            self._proposals_due = True
        if self._dirs:
            cut = cutoffs(now, self.settings.keep_outputs_days)
            batch, self._dirs = self._dirs[:PRUNE_DIRS], self._dirs[PRUNE_DIRS:]
            for name in batch:
                try:
                    pruned += prune_routine(self.state_dir, name, cut)
                except OSError as exc:  # one unreadable dir does not stop the others
                    log.warning("housekeeping: %s: %s", name, exc)
        gone = 0
        if self._proposals_due:
            gone, talks = self._prune_proposals(now)
            self._proposals_due = PROPOSAL_BATCH in (gone, talks)
        more = compacted == BATCH_ROWS or free > 0 or bool(self._dirs) or self._proposals_due
        return Step(compacted, free, pruned, more, gone)

    def _prune_proposals(self, now: datetime) -> tuple[int, int]:
        """One batch of decided proposals older than `keep_runs_days` deleted (the waiting
        ones past their expiry marked expired first: they are deleted a retention later), and
        one of conversations kept for a pause as long ago, but a still paused run's; how many
        of each."""
        store = self.ledger
        proposals.expire(store, now)
        before = now - timedelta(days=self.settings.keep_runs_days)
        gone = proposals.prune(store, before, PROPOSAL_BATCH)
        paused = [r.run_id for r in store.paused_runs()]
        return gone, store.prune_conversations(iso(before), paused, PROPOSAL_BATCH)

    async def run(self, sleep: Callable[[float], Awaitable[object]] = asyncio.sleep) -> None:
        """Step forever, paced; the daemon cancels it when it stops. A step that fails for a
        reason that passes (a full disk for a moment, a lock) is tried again with a back-off
        (`retry_after`), not an hour later (tests/supervisor/test_housekeeping_faults.py)."""
        await sleep(START_DELAY_SEC if self.start_delay is None else self.start_delay)
        failures = 0
        while True:
            t0 = time.process_time()
            try:
                more = self.step().more
            except (LedgerError, sqlite3.Error, OSError) as exc:
                failures += 1
                pause = retry_after(exc, failures)
                log.warning("housekeeping: %s; trying again in %s", exc, _seconds(pause))
                await sleep(pause)
                continue
            failures = 0
            spent = time.process_time() - t0
            if more:
                await sleep(max(MIN_PAUSE_SEC, spent / CATCH_UP_CPU_SHARE))
            else:
                await self._rest(sleep)

    async def _rest(self, sleep: Callable[[float], Awaitable[object]]) -> None:
        """The idle pause, ended early by `reconfigure`."""
        nap = asyncio.ensure_future(sleep(IDLE_PAUSE_SEC))
        poke = asyncio.ensure_future(self._poked.wait())
        try:
            await asyncio.wait({nap, poke}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            poke.cancel()
            if not nap.done():
                nap.cancel()
        self._poked.clear()
        if nap.done():
            nap.result()  # a sleep that raised (a test's, to end the loop) ends it here too


# A step that failed for a passing reason is tried again after RETRY_FIRST_SEC, doubling up to
# IDLE_PAUSE_SEC; any other failure (a bug, a damaged file, an unexpected database error)
# waits the idle hour. A read-only ledger passes when its mode is restored
# (tests/supervisor/test_housekeeping_faults.py).
RETRY_FIRST_SEC = 5.0
_PASSING = {
    Unavailable.DISK_FULL,
    Unavailable.READ_ONLY,
    Unavailable.LOCKED,
    Unavailable.IO_ERROR,
    Unavailable.UNREACHABLE,
}


def retry_after(exc: BaseException, failures: int) -> float:
    """Seconds until housekeeping tries again after its `failures`-th failure in a row."""
    passing = (isinstance(exc, LedgerUnavailable) and exc.reason in _PASSING) or (
        isinstance(exc, OSError) and is_no_space(exc)
    )
    if not passing:
        return IDLE_PAUSE_SEC
    return min(IDLE_PAUSE_SEC, RETRY_FIRST_SEC * 2.0 ** min(failures - 1, 20))


def _seconds(pause: float) -> str:
    return "an hour" if pause >= IDLE_PAUSE_SEC else f"{pause:g} s"


def start(
    ledger: Store, paths: Paths, config: Config, clock: Clock, delay: float = START_DELAY_SEC
) -> tuple[Housekeeper, asyncio.Task[None]]:
    """The daemon's hook: housekeeping as a task on its loop, on the daemon's connection,
    starting after `delay` seconds; the Housekeeper too, which a reload reconfigures."""
    keeper = Housekeeper(
        ledger,
        str(paths.state_dir),
        config.ledger,
        clock,
        start_delay=delay,
    )
    return keeper, asyncio.ensure_future(keeper.run())
