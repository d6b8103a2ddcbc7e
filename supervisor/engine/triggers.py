"""Runs started by events: another routine's run ended (`after`), a watched file was written
(`watch`), a fire call (`fire`). Each event is a slot: it has an id (`routines.runs.event_slot`)
and becomes a run only through `Ledger.claim`, the fence time slots go through, so it runs
at most once, ever, on one machine or a fleet.

Invariants (tests/supervisor/test_triggers.py, tests/supervisor/test_daemon_triggers.py):
- Events that arrive while the routine runs or waits are held and coalesce into one run when
  it is free (`coalesce`): the newest event is the run, each older one is claimed `skipped`
  ("coalesced into run X"), so none of them runs again, here or on another machine.
- An `after` event is found in the ledger (the upstream's run rows), not told by the pool, so
  a run another machine ran, or one that ended while this daemon was down, is found too. A
  follower owes nothing from before it was first tracked, or before its newest after-run.
- What an event hands its run (`EventInput`) is untrusted: the worker shows it to the model
  marked as data (worker/prompts.py `event_text`).

`coalesce`, `matches` and `after_since` are pure; `TriggerBook` carries the decisions out.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from routines.ledger import LedgerUnavailable, RoutineState, is_enabled, iso
from routines.ledger.api import LedgerAPI
from routines.ledger.model import RunRow
from routines.runs import (
    ACTIVE,
    NOT_A_RUN,
    Outcome,
    RunStatus,
    Trigger,
    event_slot,
)
from routines.spec import Routine
from routines.spec.paths import paths
from routines.spec.registry import Registry
from routines.spec.trigger import INPUT_CAP
from routines.store import read_regular
from supervisor.engine.jobs import EventInput, new_run_id
from supervisor.engine.scheduler import Pending

__all__ = [
    "INPUT_CAP",
    "EventInput",
    "TriggerBook",
    "TriggerEvent",
    "after_event",
    "after_since",
    "coalesce",
    "fire_event",
    "matches",
    "watch_event",
]

log = logging.getLogger("vinos.triggers")

_UPSTREAM_ROWS = 20  # an upstream's newest rows read per tick: more ending between ticks coalesce
_OWN_ROWS = 200  # a follower's newest rows read once, for its newest after-run (`after_since`)
_SEEN_MAX = 4096  # event ids remembered as handled (the claim is the fence; this saves queries)


@dataclass(frozen=True, slots=True)
class TriggerEvent:
    routine: str  # the routine it starts
    trigger: Trigger  # AFTER, WATCH or FIRE
    key: str  # the upstream run id, a hash of path and mtime, a fire id
    detail: str  # what `history` says started the run
    input: EventInput | None = None
    paths: tuple[str, ...] = ()  # watch: the changed paths

    @property
    def slot(self) -> str:
        return event_slot(self.trigger, self.key)


@dataclass(frozen=True, slots=True)
class Coalesced:
    run: TriggerEvent  # the run's event: the newest, with what the older ones hand it
    folded: tuple[TriggerEvent, ...]  # claimed `skipped`, coalesced into that run


def coalesce(events: Sequence[TriggerEvent]) -> Coalesced:
    """One run for events held while the routine was busy (oldest first): the newest is the
    run; the changed paths of every watch event are its input, the newest other input wins."""
    assert events
    newest = events[-1]
    folded = tuple(events[:-1])
    if not folded:
        return Coalesced(newest, ())
    paths = tuple(dict.fromkeys(p for e in events for p in e.paths))
    given = newest.input
    if newest.trigger is Trigger.WATCH and paths:
        given = _paths_input(paths)
    detail = f"{newest.detail} (coalesces {len(events)} events that came while it was busy)"
    run = TriggerEvent(newest.routine, newest.trigger, newest.key, detail, given, paths)
    return Coalesced(run, folded)


def matches(row: RunRow, on: Iterable[Outcome]) -> bool:
    """Whether an upstream run's end starts its follower: ended `ok` with an outcome in `on`;
    a run that reported none (a command routine's success) counts as done."""
    if row.status is not RunStatus.OK:
        return False
    return (row.outcome or Outcome.DONE) in set(on)


def after_since(own: Sequence[RunRow], first_tracked: datetime) -> str:
    """From when (ledger time text) a follower's upstream ends count: after its newest
    after-run's claim, else after it was first tracked (a new follower owes nothing from
    before, like a new schedule)."""
    claimed = [r.started_at for r in own if r.trigger is Trigger.AFTER and r.started_at]
    return max(claimed) if claimed else iso(first_tracked)


def _cap(text: str) -> str:
    data = text.encode()
    if len(data) <= INPUT_CAP:
        return text
    return "…" + data[-INPUT_CAP:].decode(errors="ignore")


def _paths_input(paths: Sequence[str]) -> EventInput:
    return EventInput("changed files", _cap("\n".join(paths)))


def after_event(follower: str, row: RunRow, output: str) -> TriggerEvent:
    assert row.run_id is not None
    outcome = row.outcome or Outcome.DONE
    detail = f"after {row.routine}'s run {row.run_id} ({outcome})"
    label = f"the output of {row.routine}'s run {row.run_id} ({outcome})"
    return TriggerEvent(
        follower, Trigger.AFTER, row.run_id, detail, EventInput(label, _cap(output))
    )


def watch_event(routine: str, path: str, mtime_ns: int) -> TriggerEvent:
    """A watched file written: one event per (path, mtime), so the same write seen twice (two
    inotify events, a restart) is one event."""
    key = hashlib.sha256(f"{path}\0{mtime_ns}".encode()).hexdigest()[:24]
    return TriggerEvent(
        routine, Trigger.WATCH, key, f"watch: {path} changed", _paths_input([path]), (path,)
    )


def fire_event(routine: str, text: str | None) -> TriggerEvent:
    given = EventInput("the fire call's input", _cap(text)) if text else None
    return TriggerEvent(routine, Trigger.FIRE, secrets.token_hex(8), "fired", given)


@dataclass(slots=True)
class _Follower:
    routine: Routine
    since: str  # upstream ends after this (ledger time text) count
    held: list[TriggerEvent] = field(default_factory=list)


class TriggerBook:
    """The routines with a [trigger], their held events, and the claims that start them."""

    def __init__(self, ledger: LedgerAPI, owner: tuple[int, float]) -> None:
        self.ledger = ledger
        self.owner = owner
        self.followers: dict[str, _Follower] = {}
        self.started = False  # after the first sync, a newly followed routine starts from now
        self._seen: dict[str, None] = {}  # event slot ids handled (insertion-ordered, capped)

    # -- keeping up with the registry -------------------------------------------------------

    def sync(
        self,
        registry: Registry,
        states: dict[str, RoutineState],
        now: datetime,
        held: Iterable[str] = (),
    ) -> dict[str, str]:
        """Follow exactly the enabled routines with a [trigger]; those no longer followed,
        each with why (their held events are dropped)."""
        skip = set(held)
        wanted = {
            r.name: r
            for r in registry.routines()
            if r.trigger is not None and r.name not in skip and is_enabled(states, r)
        }
        gone = {n: "disabled or removed" for n in self.followers if n not in wanted}
        for name in gone:
            del self.followers[name]
        for name, routine in wanted.items():
            f = self.followers.get(name)
            if f is None:
                # At start-up a follower resumes after its newest after-run (what ended while
                # the daemon was down is owed); one enabled or added later owes nothing from
                # before now, as a schedule does (supervisor/engine/scheduler.py `_start_cursor`).
                own = self.ledger.history(name, _OWN_ROWS) if not self.started else []
                self.followers[name] = _Follower(routine, after_since(own, now))
            else:
                f.routine = routine
        self.started = True
        return gone

    def routine(self, name: str) -> Routine | None:
        f = self.followers.get(name)
        return f.routine if f is not None else None

    # -- events ------------------------------------------------------------------------------

    def offer(self, event: TriggerEvent) -> bool:
        """Hold an event for its routine; False when it is not followed or was handled."""
        f = self.followers.get(event.routine)
        if f is None or event.slot in self._seen or any(e.slot == event.slot for e in f.held):
            return False
        f.held.append(event)
        return True

    def scan_after(self) -> int:
        """Hold an event for each upstream run ended since the last scan that its followers
        wait for (read from the ledger: ended here, on another machine, or while down)."""
        by_upstream: dict[str, list[_Follower]] = {}
        for f in self.followers.values():
            assert f.routine.trigger is not None
            for up in f.routine.trigger.after:
                by_upstream.setdefault(up, []).append(f)
        found = 0
        for up, followers in by_upstream.items():
            rows = [
                r
                for r in self.ledger.history(up, _UPSTREAM_ROWS)
                if r.run_id and r.finished_at and r.status not in ACTIVE | NOT_A_RUN
            ]
            for f in followers:
                assert f.routine.trigger is not None
                for row in reversed(rows):  # oldest first: the newest is the run
                    assert row.run_id is not None and row.finished_at is not None
                    if row.finished_at <= f.since or not matches(row, f.routine.trigger.on):
                        continue
                    if self.offer(after_event(f.routine.name, row, _output(row))):
                        found += 1
        return found

    # -- claims ---------------------------------------------------------------------------------

    def due(self, now: datetime, busy: Callable[[str], bool]) -> list[Pending]:
        """Claim one run for each followed routine holding events and free; the runs to queue.
        LedgerUnavailable leaves the held events held (nothing was claimed)."""
        out: list[Pending] = []
        for name, f in self.followers.items():
            if not f.held or busy(name):
                continue
            plan = coalesce(f.held)
            run_id = new_run_id(name, now)
            ev = plan.run
            won = self.ledger.claim(
                name,
                ev.slot,
                run_id=run_id,
                trigger=ev.trigger,
                status=RunStatus.QUEUED,
                now=now,
                detail=ev.detail,
                owner=self.owner,
            )
            f.held.remove(f.held[-1])
            self._handled(ev.slot)
            if not won:  # claimed before: by another machine, or before a restart
                log.info("%s: event %s already handled", name, ev.slot)
                continue  # the older ones stay held: the next tick claims one of them
            for old in plan.folded:
                try:
                    self.ledger.claim(
                        name,
                        old.slot,
                        run_id=new_run_id(name, now),
                        trigger=old.trigger,
                        status=RunStatus.SKIPPED,
                        now=now,
                        detail=f"{old.detail}: coalesced into run {run_id}",
                        owner=self.owner,
                    )
                except LedgerUnavailable:
                    log.warning("%s: event %s coalesced but not recorded", name, old.slot)
                self._handled(old.slot)
            f.held.clear()
            out.append(Pending(run_id, f.routine, ev.trigger, ev.slot, ev.detail, event=ev.input))
        return out

    def _handled(self, slot: str) -> None:
        self._seen[slot] = None
        while len(self._seen) > _SEEN_MAX:
            del self._seen[next(iter(self._seen))]


def _output(row: RunRow) -> str:
    """An upstream run's output text (its tail, capped), or "" when it left none.

    Only a file in the upstream routine's own state folder here, where the daemon stores
    outputs (supervisor/engine/finish.py): the row's path is the ledger's word, and a fleet's
    database writer may write rows but must never choose a file of the person's for the
    daemon to read and hand on (tests/supervisor/test_redteam_after.py)."""
    if not row.output_file:
        return ""
    given = Path(row.output_file)
    state = paths().routine_state(row.routine)
    if given.name in ("", ".", "..") or os.path.normpath(given.parent) != os.path.normpath(state):
        log.warning("%s: run %s names an output outside its state folder: not read",
                    row.routine, row.run_id)  # fmt: skip
        return ""
    data = read_regular(state / given.name, INPUT_CAP)
    return data.decode("utf-8", errors="replace") if data else ""
