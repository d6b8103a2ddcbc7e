"""Rows of runs: a routine's history (on a fleet with each run's machine), one run, one
conversation's runs, and the runs of some days as `brief` and the dashboard's brief page
show them. `history`, `history --thread`, `brief`, the dashboard's routine, run and brief
pages read them here, from the ledger every reader takes (on a fleet machine the fleet's, so
a run another machine made shows: tests/fleet/test_fleet_dashboard.py).

Reads only, through the ledger's API; what a row needs from the files comes in as a function
(`said`). Tested as data with the memory ledger: tests/routines/test_query_runs.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from zoneinfo import ZoneInfo

    from routines.ledger.api import LedgerAPI
    from routines.ledger.model import RunRow
    from routines.ledger.rundays import DaySummary

__all__ = [
    "DayRuns",
    "Quiet",
    "RunHistory",
    "ThreadRun",
    "day_runs",
    "fold_quiet",
    "one_run",
    "run_history",
    "thread_runs",
]


class RunHistory(NamedTuple):
    """A routine's newest runs, on a fleet each one's machine and this machine's name (None
    alone), and the compacted days older than every run that fill what the runs leave."""

    runs: tuple[RunRow, ...]
    machines: tuple[str, ...] | None
    this: str | None
    days: tuple[DaySummary, ...]


def run_history(
    ledger: LedgerAPI, name: str | None, limit: int, *, days: bool = True
) -> RunHistory:
    """The newest `limit` lines of `name`'s history (None: every routine's): whole runs
    first, then (`days`) the compacted days (the compaction line is a day boundary)."""
    fleet_history = getattr(ledger, "fleet_history", None)
    if fleet_history is None:
        runs = tuple(ledger.history(name, limit))
        machines, this = None, None
    else:
        found = fleet_history(name, limit)
        runs = tuple(f.row for f in found)
        machines, this = tuple(f.machine for f in found), getattr(ledger, "machine", None)
    older = ledger.days(name, limit - len(runs)) if days and len(runs) < limit else []
    return RunHistory(runs, machines, this, tuple(older))


def one_run(ledger: LedgerAPI | None, run_id: str) -> RunRow | None:
    """The run `run_id`, whichever machine made it; None when the ledger has no such run."""
    return ledger.run(run_id) if ledger is not None else None


class ThreadRun(NamedTuple):
    """A run of a conversation, how deep it is under the run that began it, and what the
    person said to start it ("" for the first run)."""

    row: RunRow
    depth: int
    said: str


def thread_runs(
    ledger: LedgerAPI, name: str, run_id: str, said: Callable[[RunRow], str]
) -> list[ThreadRun]:
    """Each run of `name` in the conversation `run_id` belongs to, in order, with its depth;
    `said(row)`: what the person wrote to start a reply (read from its conversation record)."""
    depth: dict[str | None, int] = {}
    out = []
    for r in ledger.thread(run_id):
        if r.routine != name:
            continue
        depth[r.run_id] = depth.get(r.parent_run_id, -1) + 1 if r.parent_run_id else 0
        text = said(r) if r.parent_run_id and r.run_id else ""
        out.append(ThreadRun(r, depth[r.run_id], text))
    return out


class Quiet(NamedTuple):
    """A routine's `nothing-to-do` runs of the days asked for, folded into one line."""

    routine: str
    runs: int
    last: str  # the newest one's reason (a gate's line, the model's summary)
    last_at: str  # its start, ledger time text

    def as_json(self) -> dict[str, object]:
        return {"routine": self.routine, "runs": self.runs, "last": self.last,
                "last_at": self.last_at}  # fmt: skip


def fold_quiet(rows: Sequence[RunRow], on_day: Callable[[str], bool]) -> list[Quiet]:
    """One `Quiet` per routine for its nothing-to-do runs started on a wanted day
    (`on_day`), by name (pure)."""
    from routines.runs import Outcome

    by: dict[str, list[RunRow]] = {}
    for r in rows:
        if r.outcome == Outcome.NOTHING_TO_DO and r.started_at and on_day(r.started_at):
            by.setdefault(r.routine, []).append(r)
    quiet = []
    for name in sorted(by):
        runs = sorted(by[name], key=lambda r: r.started_at or "")
        newest = runs[-1]
        reason = (newest.detail or "").splitlines()[0][:120] if newest.detail else ""
        quiet.append(Quiet(name, len(runs), reason, newest.started_at or ""))
    return quiet


class DayRuns(NamedTuple):
    """The runs of some calendar days, as a brief shows them."""

    runs: tuple[RunRow, ...]  # started on the days, newest first
    by_output: Mapping[str, RunRow]  # each output file's run, a day either side included
    failed: tuple[RunRow, ...]  # those that count as a strike
    quiet: tuple[Quiet, ...]  # their nothing-to-do runs, a line per routine
    paused: frozenset[str]  # the runs that wait for a person now ("needs you")
    elsewhere: Mapping[str, int]  # on a fleet: outputs other machines made, per machine

    @property
    def needs_you(self) -> int:
        return len(self.paused)


def day_runs(ledger: LedgerAPI, days: Sequence[date], zone: ZoneInfo) -> DayRuns:
    """The runs started on `days` (calendar days in `zone`). Outputs are named in their
    routine's zone, so an output's run is looked for a day either side too."""
    from routines.ledger import day_bounds
    from routines.runs import counts_as_strike

    wanted = set(days)
    start = day_bounds(min(days), zone)[0] - timedelta(days=1)
    end = day_bounds(max(days), zone)[1] + timedelta(days=1)
    fleet_runs = getattr(ledger, "fleet_runs_between", None)
    if fleet_runs is None:
        rows, machines = ledger.runs_between(start, end), None
    else:
        found = fleet_runs(start, end)
        rows, machines = [f.row for f in found], [f.machine for f in found]

    def on_day(started: str) -> bool:
        at = datetime.fromisoformat(started.replace("Z", "+00:00"))
        return at.astimezone(zone).date() in wanted

    runs = tuple(r for r in rows if r.started_at and on_day(r.started_at))
    away: dict[str, int] = {}
    this = getattr(ledger, "machine", None)
    for r, where in zip(rows, machines or (), strict=False):
        if where != this and r.output_file and r.started_at and on_day(r.started_at):
            away[where] = away.get(where, 0) + 1
    return DayRuns(
        runs=runs,
        by_output={r.output_file: r for r in rows if r.output_file},
        failed=tuple(r for r in runs if counts_as_strike(r.status)),
        quiet=tuple(fold_quiet(rows, on_day)),
        paused=frozenset(a.run_id for a in ledger.paused_runs()),
        elsewhere=away,
    )
