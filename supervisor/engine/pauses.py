"""Runs that wait for a person ("needs you"): what the daemon does with each on a tick.

A run paused at a call that needs a person (worker/tools.py) ended `needs_you`, its
conversation kept (routines/conversation.py) and its request recorded as a waiting proposal
of that run (routines/proposals.py): one approvals path, `pending`/`approve`/`deny`, for
both. No process holds it and it takes no concurrency slot, but its routine's slots are
skipped with "waiting for you on RUN" while it waits (`waiting_reason`).

Each tick, for each paused run (`step`, pure, over its newest proposal):

    waiting, or approved and its action still running  → wait
    done (approved, it ran), denied, invalidated        → resume: a new run (trigger `resume`,
                                                           the paused run its parent) continues
                                                           the conversation with the answer;
                                                           unless its routine was turned off
                                                           and the run was not one a person
                                                           started (`goes_on`): it ends
    expired (nobody answered in needs_you_timeout)      → the run ends `expired`

The paused row moves on once (`LedgerAPI.end_pause`, a conditional UPDATE): of two daemons
(a restart racing, a fleet) one resumes it, on any machine: the row, the conversation and
the proposal are all in the ledger (supervisor/engine/pausestore.py), so a daemon restart
loses nothing (tests/supervisor/test_daemon_needs_you.py) and a run paused on one fleet
machine resumes on another (tests/fleet/test_fleet_needs_you.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from ipc import Answer
from routines import proposals
from routines.ledger import ActiveRun, LedgerError
from routines.ledger.api import LedgerAPI
from routines.ledger.model import RunRow
from routines.proposals import Proposal, ProposalState
from routines.runs import RunStatus, Trigger
from routines.spec import Routine
from routines.spec.paths import Paths
from supervisor.engine import pausestore
from supervisor.engine.approvals import proposal_store
from supervisor.engine.finish import Notification
from supervisor.engine.reply import ReplyTo

__all__ = [
    "Step",
    "Verb",
    "answer_of",
    "expired_note",
    "goes_on",
    "started_by",
    "step",
    "tend",
    "waiting_reason",
]

log = logging.getLogger("vinos.pauses")


class Verb(StrEnum):
    WAIT = "wait"  # nobody answered yet, or the approved action still runs
    RESUME = "resume"  # answered: continue the conversation with the answer
    EXPIRE = "expire"  # nobody answered in time: the run ends `expired`


@dataclass(frozen=True, slots=True)
class Step:
    verb: Verb
    note: str = ""  # what the paused row's detail gains ("; approved by cli at …")


_ANSWERED = {ProposalState.DONE, ProposalState.DENIED, ProposalState.INVALIDATED}


def step(proposal: Proposal | None, now_iso: str) -> Step:
    """What to do with a paused run whose request is `proposal` (pure). A run with no
    proposal yet waits (its request is recorded after its row ends)."""
    if proposal is None:
        return Step(Verb.WAIT)
    state = proposal.state
    if state is ProposalState.WAITING and proposal.expires_at <= now_iso:
        state = ProposalState.EXPIRED
    if state is ProposalState.EXPIRED:
        return Step(Verb.EXPIRE, f"; nobody answered by {proposal.expires_at}: expired")
    if state in _ANSWERED:
        return Step(Verb.RESUME, f"; {answer_words(proposal)}: resumed")
    return Step(Verb.WAIT)


# Runs a person started: `run` (the dashboard's button too) and `reply`. Any other run exists
# because its routine was on (a slot, an event), so it goes on only while it still is.
BY_PERSON = frozenset({Trigger.MANUAL, Trigger.REPLY})
TURNED_OFF = (
    "; its routine was turned off, or its file replaced, while it waited: ended, nothing more ran"
)
_CHAIN_MAX = 64  # a run resumed from a run resumed …: walked this far, then judged off


def started_by(run_id: str, run: Callable[[str], RunRow | None]) -> Trigger | None:
    """What started the run a paused run continues: its own trigger, or, for a resumed
    run, the first of its ancestors that was not a resume; None when the chain is lost."""
    for _ in range(_CHAIN_MAX):
        row = run(run_id)
        if row is None:
            return None
        if row.trigger is not Trigger.RESUME:
            return row.trigger
        if row.parent_run_id is None:
            return None
        run_id = row.parent_run_id
    return None


def goes_on(on: bool, started: Trigger | None, same_file: bool) -> bool:
    """Whether an answered run may go on (pure): while its routine is on, or when a person
    started it (a routine run by hand while off) and its file is the one it paused under.
    Turning a routine off stops what its schedule or an event started, even mid-pause; and
    a file put in the place of one run by hand (a draft, after a `remove`) is never run by
    an answer to the old file's request. The answer is kept (an approved action ran), the
    model is not called again (tests/supervisor/test_redteam_pauses.py)."""
    return on or (started in BY_PERSON and same_file)


def answer_words(p: Proposal) -> str:
    """Who answered and how, for the paused run's detail and the resumed run's first line."""
    by = p.decided_by or "the runtime"
    when = f" at {p.decided_at}" if p.decided_at else ""
    if p.state is ProposalState.DONE:
        return f"approved by {by}{when} (#{p.id} ran, exit status {p.exit_status})"
    if p.state is ProposalState.DENIED:
        return f"denied by {by}{when} (#{p.id})"
    return f"#{p.id} {p.state}{when}: the routine file was edited since"


def answer_of(p: Proposal) -> Answer:
    """The answer the resumed worker puts where the paused call's result was (ipc Job.answer)."""
    return Answer(
        p.id, p.action, str(p.state), p.decided_by, p.decided_at, p.why, p.exit_status, p.output
    )


def expired_note(routine: str, run_id: str) -> Notification:
    """What the desktop says when a pause expired (pure): nothing ran, nothing will."""
    return Notification(
        f"{routine}: nobody answered",
        f"its paused run {run_id} expired; nothing ran (vinos-routine history {routine})",
        phone=f"{routine}: nobody answered",
        phone_kind="expired",
    )


def waiting_reason(waiting: Mapping[str, str], name: str) -> str | None:
    """Why `name`'s slot is skipped while one of its runs waits for a person (pure)."""
    run_id = waiting.get(name)
    return f"waiting for you on {run_id}" if run_id is not None else None


# What `tend` calls to start a resumed run: (routine, its ReplyTo) → the new run's id.
Resume = Callable[[Routine, ReplyTo], str]


def tend(
    ledger: LedgerAPI,
    paths: Paths,
    routine_of: Callable[[str], Routine | None],
    now: datetime,
    resume: Resume,
    busy: Callable[[str], bool],
    is_on: Callable[[Routine], bool],
    notify: Callable[[Notification], None] = lambda _: None,
) -> dict[str, str]:
    """Carry out `step` for every paused run; the routines still waiting → their run id.
    An answered run whose routine is `busy` (a manual run) resumes on a later tick."""
    paused = ledger.paused_runs()
    if not paused:
        return {}
    waiting: dict[str, str] = {}
    try:
        with proposal_store(ledger, paths) as store:
            proposals.expire(store, now)
            newest = {r.run_id: _newest(store, r.run_id) for r in paused}
    except LedgerError as exc:
        log.warning("the paused runs' requests cannot be read now: %s", exc)
        return {r.routine: r.run_id for r in paused}
    from routines.ledger import iso

    for run in paused:
        prop = newest[run.run_id]
        decided = step(prop, iso(now))
        if decided.verb is Verb.WAIT or prop is None:
            waiting[run.routine] = run.run_id
        elif decided.verb is Verb.EXPIRE:
            if ledger.end_pause(run.run_id, RunStatus.EXPIRED, decided.note, now=now):
                log.info("%s: run %s expired: nobody answered", run.routine, run.run_id)
                notify(expired_note(run.routine, run.run_id))
        elif busy(run.routine) or not _resume(
            ledger, paths, run, prop, decided, routine_of, is_on, resume, now
        ):
            waiting[run.routine] = run.run_id
    return waiting


def _resume(
    ledger: LedgerAPI,
    paths: Paths,
    run: ActiveRun,
    prop: Proposal,
    decided: Step,
    routine_of: Callable[[str], Routine | None],
    is_on: Callable[[Routine], bool],
    resume: Resume,
    now: datetime,
) -> bool:
    """Start the run that goes on from `run` (True: it is handled, here or elsewhere)."""
    routine = routine_of(run.routine)
    if routine is None:  # gone or invalid now: nothing to continue with
        note = "; its routine is gone or invalid: expired"
        ledger.end_pause(run.run_id, RunStatus.EXPIRED, note, now=now)
        return True
    same_file = prop.fingerprint == proposals.fingerprint(routine.text)
    if not goes_on(is_on(routine), started_by(run.run_id, ledger.run), same_file):
        note = f"; {answer_words(prop)}{TURNED_OFF}"
        if ledger.end_pause(run.run_id, RunStatus.EXPIRED, note, now=now):
            log.info("%s: run %s answered, but its routine is off: ended", run.routine, run.run_id)
        return True
    words = answer_words(prop)
    reply = ReplyTo(run.run_id, f"resumes {run.run_id}: {words}", False, answer=answer_of(prop))
    if not ledger.end_pause(run.run_id, RunStatus.RESUMED, decided.note, now=now):
        return True  # another daemon took it
    # The paused worker may have run on another machine: its conversation is the ledger's.
    pausestore.restore(ledger, paths, run.routine, run.run_id)
    child = resume(routine, reply)
    log.info("%s: run %s %s; resumed as %s", run.routine, run.run_id, words, child)
    return True


def _newest(store: proposals.ProposalStore, run_id: str) -> Proposal | None:
    found = proposals.of_run(store, run_id)
    return found[-1] if found else None
