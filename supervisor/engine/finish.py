"""After a worker ends: its final status, the output moved into the store, the ledger row,
last-run.json, the failure streak, and what to tell the user.

`final_status`, `notifications_for`, `run_end`, `end_notifications` and `last_run_json` are
pure; `finish_run` carries them out.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ipc import Proposal, Result, RunReply, reply_json
from routines.ledger import LedgerError, LedgerUnavailable, iso
from routines.ledger.api import LedgerAPI
from routines.runs import STRIKES, Ended, Outcome, RunEnd, RunStatus, Strike, Trigger
from routines.spec import OutputType, Routine
from routines.spec.outputs import output_day
from routines.spec.paths import Paths
from routines.store import (
    deliver_output,
    read_regular,
    remove_tree,
    write_atomic,
    write_json_atomic,
)
from supervisor.engine import pausestore
from supervisor.engine.approvals import proposal_store, record_proposals, start_auto
from supervisor.engine.limits import strike_reason
from supervisor.engine.notify import preview
from supervisor.engine.spawn import StopReason, WorkerOutcome

__all__ = [
    "Finished",
    "Notification",
    "Unwritten",
    "end_notifications",
    "file_output_path",
    "final_status",
    "finish_run",
    "keep_proposals",
    "last_run_json",
    "notifications_for",
    "proposal_notifications",
    "refused_note",
    "remove_leftovers",
    "run_end",
]

log = logging.getLogger("vinos.record")

# A worker reports `timeout` itself when its command or its run's deadline ran out.
_WORKER_STATUSES = {
    RunStatus.OK,
    RunStatus.FAILED,
    RunStatus.BUDGET,
    RunStatus.TIMEOUT,
    RunStatus.NEEDS_YOU,  # paused for a person: its request is one of its proposals
}


# The triggers that spend a `once` routine's one slot (a manual run or a reply does not).
_SCHEDULED = frozenset({Trigger.SCHEDULE, Trigger.CATCH_UP})


@dataclass(frozen=True, slots=True)
class Notification:
    title: str
    body: str
    urgency: str = "normal"  # low | normal | critical (notify-send's levels)
    # The phone push's title ([notify.ntfy], supervisor/engine/phone.py): the routine's name and
    # what
    # happened, nothing of the request; None: the desktop only.
    phone: str | None = None
    phone_kind: str = "waiting"  # "waiting" (needs you) or "expired"
    # The desktop notification's "Open the dashboard" action (a request waits for an answer)
    opens_dashboard: bool = False


@dataclass(frozen=True, slots=True)
class Unwritten:
    """A finished run's ledger row that found no space (a full disk loses no result: see
    test_reliability_full_disk.py::test_a_full_disk_pauses_the_daemon_and_loses_no_result): kept in
    memory and written, with its strike, when space returns (`write`, raising LedgerUnavailable
    while none)."""

    routine: Routine
    run_id: str
    finished_at: datetime
    end: RunEnd
    strikes: bool = True  # whether its status counts toward three strikes
    # The run's proposed actions, kept with its row (recorded once: see keep_proposals).
    proposals: tuple[Proposal, ...] = ()
    paths: Paths | None = None  # where the proposals' store is (a fleet machine's own file)
    pause_timeout: int | None = None  # the run paused: its request waits this long

    def write(self, ledger: LedgerAPI) -> list[Notification]:
        """Record it now; the notifications it causes (the routine disabled by it, the
        proposals' arrival)."""
        notes: list[Notification] = []
        rule = strike_rule(self.routine, self.end.detail) if self.strikes else None
        ended = ledger.finish_run(self.run_id, self.end, now=self.finished_at, strike=rule)
        if ended is Ended.DISABLED:
            notes.append(disabled_note(self.routine, self.end.detail))
        if self.proposals and self.paths is not None:
            notes += keep_proposals(
                ledger,
                self.paths,
                self.routine,
                self.run_id,
                self.proposals,
                self.finished_at,
                pause_timeout=self.pause_timeout,
            )
        return notes


def keep_proposals(
    ledger: LedgerAPI,
    paths: Paths,
    routine: Routine,
    run_id: str,
    sent: Sequence[Proposal],
    now: datetime,
    *,
    pause_timeout: int | None = None,
) -> list[Notification]:
    """Record a run's proposed actions in the ledger (the fleet's on a fleet: any machine
    answers them), start the auto-approved ones; the notification to send. Raises
    LedgerUnavailable (nothing lost: the caller keeps them). `pause_timeout`: the run paused
    at its last proposal (needs_you): a person answers it, never auto_approve, within that
    many seconds; its conversation goes into the ledger first, so the request is never seen
    without it (supervisor/engine/pausestore.py)."""
    try:
        if pause_timeout is not None:
            pausestore.keep(ledger, paths, routine.name, run_id, now)
        with proposal_store(ledger, paths) as store:
            recorded = record_proposals(
                store, routine, run_id, list(sent), now, expires_after=pause_timeout
            )
    except LedgerUnavailable:
        raise
    except LedgerError as exc:  # not a full disk: a broken ledger file, which `doctor` names
        log.error("%s: run %s: %d proposed action(s) not recorded: %s",
                  routine.name, run_id, len(sent), exc)  # fmt: skip
        return []
    if pause_timeout is None:
        start_auto(routine, recorded.ids)
    return proposal_notifications(routine, recorded.ids, paused=pause_timeout is not None)


@dataclass(frozen=True, slots=True)
class Finished:
    run_id: str
    routine: str
    status: RunStatus
    outcome: Outcome | None
    detail: str
    output: Path | None
    dollars: float
    disabled: bool
    notifications: tuple[Notification, ...]
    unwritten: Unwritten | None = None  # its ledger row, when the disk was full

    def reply(self) -> RunReply:
        """How the run ended, as `run` and `follow` answer."""
        return RunReply(
            run_id=self.run_id,
            routine=self.routine,
            status=self.status,
            outcome=self.outcome,
            detail=self.detail,
            output=str(self.output) if self.output else None,
            dollars=self.dollars,
            disabled=self.disabled,
        )

    def as_json(self) -> dict[str, Any]:
        return reply_json(self.reply())


def final_status(
    out: WorkerOutcome, timeout_sec: float, limit_key: str = "run_timeout_sec"
) -> tuple[RunStatus, str]:
    """(status, detail) of a run from how its worker ended. A worker that reported its own
    `timeout` before the backstop's kill ended it is recorded as it said (what it was doing
    when time ran out), whichever came first on the pipe."""
    worker_timeout = out.result is not None and out.result.status == RunStatus.TIMEOUT
    if out.stopped == StopReason.TIMEOUT and not worker_timeout:
        return RunStatus.TIMEOUT, f"stopped after {timeout_sec:g}s ({limit_key})"
    if out.stopped == StopReason.SHUTDOWN:
        return RunStatus.INTERRUPTED, "the daemon stopped while it ran"
    if out.stopped == StopReason.LEASE or (
        out.result is not None and out.result.status == RunStatus.INTERRUPTED
    ):  # the daemon found the lease gone, or the worker's dead-man switch fired
        why = out.result.error if out.result is not None and out.result.error else ""
        return RunStatus.INTERRUPTED, why or "lease lost: the fleet's lease on this run was gone"
    if out.stopped == StopReason.BUDGET:
        return RunStatus.BUDGET, "stopped by the supervisor: the run spent past its allowance"
    if out.error is not None or out.result is None:
        return RunStatus.FAILED, out.error or "the worker reported no result"
    r = out.result
    if r.status not in _WORKER_STATUSES:
        return RunStatus.FAILED, f"the worker reported an unknown status {r.status!r}"
    if r.status in STRIKES:
        return RunStatus(r.status), refused_note(r.error or r.summary or str(r.status), r)
    return RunStatus(r.status), refused_note(r.error or r.summary, r)


def refused_note(detail: str, r: Result) -> str:
    """A run's detail, and how many of its tool calls were refused (the whitelist, the
    sandbox's checks, a person): a run whose calls were blocked never reads as a clean one in
    `history` and `show` (tests/supervisor/test_record.py)."""
    n = r.refused_calls
    if not n:
        return detail
    note = f"{n} tool call{'s' if n != 1 else ''} refused"
    return f"{detail} · {note}" if detail else note


def notifications_for(
    routine: Routine, status: RunStatus, outcome: Outcome | None, detail: str, output_text: str
) -> list[Notification]:
    """What to show on the desktop for a finished run (auto-disable is added separately)."""
    wants = routine.output.notify or routine.output.type is OutputType.NOTIFICATION
    name = routine.name
    if status == RunStatus.OK and outcome == Outcome.NOTHING_TO_DO:
        return []  # a quiet run: nothing to report, nobody told (`brief` folds it in a line)
    if status == RunStatus.OK and wants:
        urgency = "normal" if outcome == Outcome.NEEDS_ATTENTION else "low"
        title = f"{name}: {(outcome or 'done').replace('-', ' ')}"
        return [Notification(title, preview(output_text) or detail, urgency)]
    if status in STRIKES and wants:
        return [Notification(f"{name} {status}", detail, "normal")]
    return []


def proposal_notifications(
    routine: Routine, ids: tuple[int, ...], *, paused: bool = False
) -> list[Notification]:
    """One notification for a run's new proposals (auto_approve too: what ran is no secret).
    It names the routine and the commands to answer, never the request's content."""
    if not ids:
        return []
    what = "an action" if len(ids) == 1 else f"{len(ids)} actions"
    first = ids[-1] if paused else ids[0]
    body = f"vinos-routine pending\nvinos-routine approve {first}   ·   vinos-routine deny {first}"
    if paused:
        title = f"{routine.name} needs you"
        paused_note = "the run is paused\n" + body
        return [Notification(title, paused_note, "normal", phone=title, opens_dashboard=True)]
    if routine.auto_approve:
        body = "auto_approve: it runs now if the routine's signature verifies\n" + body
    return [Notification(f"{routine.name} proposes {what}", body, "normal")]


def file_output_path(template: str, out: WorkerOutcome) -> Path:
    """[output].path for type = "file": `~` expanded, `{{date}}` the run's day (YYYY-MM-DD,
    from the output's own name, which is in the routine's zone)."""
    name = out.result.output_file if out.result and out.result.output_file else ""
    named = output_day(Path(name).name)
    day = (named or datetime.now().astimezone().date()).isoformat()
    return Path(template.replace("{{date}}", day)).expanduser()


def _move_output(
    routine: Routine, out: WorkerOutcome, scratch: Path, state_dir: Path
) -> tuple[Path | None, str, str | None]:
    """(stored path, its text, an error) for the output the worker left in scratch."""
    r = out.result
    if r is None or not r.output_file:
        return None, "", None
    name = Path(r.output_file).name  # never a path the worker chose outside its scratch dir
    source = scratch / name
    try:
        stored = deliver_output(source, state_dir)  # refuses a symlink planted in scratch
        data = read_regular(stored) or b""
        text = data.decode("utf-8", errors="replace")
        if routine.output.type is OutputType.FILE and routine.output.path:
            write_atomic(file_output_path(routine.output.path, out), data)
    except OSError as exc:
        return (
            None,
            "",
            (
                f"output not delivered: could not save it: {exc.strerror or exc} ({exc.filename}); "
                f"it is kept in {scratch}"
            ),
        )
    return stored, text, None


def remove_leftovers(paths: Paths, name: str, run_id: str, *, keep_output: bool = False) -> None:
    """Remove what a run left outside the state store: the worker's output dir (unless
    `keep_output`: it holds an output that could not be delivered) and the shell tools'
    scratch dir (the worker removes it too, unless it died first). By descriptor, following
    no link, whatever modes a sandbox set; a failure is logged, never silent."""
    leftovers = [paths.run_scratch(name, run_id)]
    if not keep_output:
        leftovers.insert(0, paths.scratch(name, run_id))
    for leftover in leftovers:
        try:
            remove_tree(leftover)
        except OSError as exc:
            log.error("%s: run %s: could not remove %s: %s", name, run_id, leftover, exc)


def run_end(
    out: WorkerOutcome, status: RunStatus, detail: str, note: str, stored: Path | None
) -> RunEnd:
    """The ledger's end of a run from how its worker ended (pure): the outcome only of an
    `ok` run, the claim's `note` ahead of the detail, the usage the worker counted."""
    r, u = out.result, out.usage
    return RunEnd(
        status=status,
        outcome=r.outcome if r and status == RunStatus.OK else None,
        detail=(f"{note}; {detail}" if note and detail else note or detail)[:2000],
        route=r.route if r else None,
        model=(r.model if r and r.model else u.model) or None,
        escalated=r.escalated if r else False,
        escalated_reason=r.escalated_reason if r else "",
        tried_model=(r.tried_model or None) if r else None,
        input_tokens=u.input,
        output_tokens=u.output,
        local_input_tokens=u.local_input,
        local_output_tokens=u.local_output,
        tool_calls=r.tool_calls if r else 0,
        tools_used=tuple(r.tools_used) if r else (),
        dollars=round(u.dollars, 6),
        output_file=str(stored) if stored else None,
    )


def end_notifications(
    routine: Routine,
    out: WorkerOutcome,
    outcome: Outcome | None,
    status: RunStatus,
    detail: str,
    text: str,
    undelivered: str | None,
) -> list[Notification]:
    """What to tell the user of a finished run (pure): `notifications_for`, then an output
    that was not delivered, then the worker's budget note (a strike's is added later)."""
    notes = notifications_for(routine, status, outcome, detail, text)
    if undelivered:
        notes.append(Notification(f"{routine.name}: output not delivered", undelivered))
    r = out.result
    if r is not None and r.notify:
        notes.append(Notification(f"{routine.name}: budget", r.notify, "normal"))
    return notes


def last_run_json(
    run_id: str,
    routine: str,
    trigger: Trigger,
    slot: str | None,
    started_at: datetime,
    now: datetime,
    end: RunEnd,
    out: WorkerOutcome,
    status: RunStatus,
    detail: str,
) -> dict[str, Any]:
    """state/NAME/last-run.json of a finished run (pure)."""
    r = out.result
    return {
        "run_id": run_id,
        "routine": routine,
        "trigger": trigger,
        "slot": slot,
        "started_at": iso(started_at),
        "finished_at": iso(now),
        "duration_sec": round((now - started_at).total_seconds(), 3),
        **end.as_json(),
        "summary": r.summary if r else "",
        "error": detail if status != RunStatus.OK else None,
    }


def finish_run(
    ledger: LedgerAPI,
    paths: Paths,
    routine: Routine,
    *,
    run_id: str,
    trigger: Trigger,
    slot: str | None,
    started_at: datetime,
    out: WorkerOutcome,
    timeout_sec: float,
    now: datetime,
    note: str = "",
    limit_key: str = "run_timeout_sec",
    pause_timeout: int = 24 * 3600,
) -> Finished:
    """Record a finished run everywhere it belongs, in the order that loses nothing.

    `note` is what the claim said about the run ("stands in for 12 missed runs"): it stays
    in the ledger's detail, ahead of how the run ended.
    """
    status, detail = final_status(out, timeout_sec, limit_key)
    scratch = paths.scratch(routine.name, run_id)
    stored, text, error = (None, "", None)
    r = out.result
    # Invariant: a run's status is how it ended. An output that found no room (a full or
    # read-only state dir, here or in the worker) is a delivery problem beside it, said in
    # its detail and a notification, never a failure nor a strike
    # (tests/supervisor/test_record.py, test_daemon_state_dir.py).
    undelivered = r.error if r is not None and status is RunStatus.OK and r.error else None
    if status in (RunStatus.OK, RunStatus.BUDGET):
        stored, text, error = _move_output(routine, out, scratch, paths.routine_state(routine.name))
        if error:
            undelivered = error
            detail = f"{detail}; {error}" if detail else error
    # The worker's output dir stays when it holds the output that could not be moved in.
    remove_leftovers(paths, routine.name, run_id, keep_output=bool(error))
    end = run_end(out, status, detail, note, stored)
    notes = end_notifications(routine, out, end.outcome, status, detail, text, undelivered)
    paused = pause_timeout if status is RunStatus.NEEDS_YOU else None
    disabled, unwritten = _write_end(
        ledger, paths, routine, run_id, trigger, end, detail, out, notes, now, paused
    )
    last = last_run_json(
        run_id, routine.name, trigger, slot, started_at, now, end, out, status, detail
    )
    with contextlib.suppress(OSError):
        write_json_atomic(paths.last_run(routine.name), last)
    return Finished(
        run_id,
        routine.name,
        status,
        end.outcome,
        detail,
        stored,
        out.usage.dollars,
        disabled,
        tuple(notes),
        unwritten,
    )


def _write_end(
    ledger: LedgerAPI,
    paths: Paths,
    routine: Routine,
    run_id: str,
    trigger: Trigger,
    end: RunEnd,
    detail: str,
    out: WorkerOutcome,
    notes: list[Notification],
    now: datetime,
    paused: int | None = None,
) -> tuple[bool, Unwritten | None]:
    """The run's end in the ledger, its strike (on `detail`, how it ended), a `once`
    routine's end and its proposals (their notifications added to `notes`): (disabled by
    this strike, the row kept for later when the ledger is unavailable)."""
    unwritten: Unwritten | None = None
    disabled = False
    try:
        # NOT_ACTIVE: the row had ended already (it cannot: the pool ends a run once); no strike.
        ended = ledger.finish_run(run_id, end, now=now, strike=strike_rule(routine, detail))
        disabled = ended is Ended.DISABLED
        if disabled:
            notes.append(disabled_note(routine, detail))
        elif ended and routine.schedule.once and trigger in _SCHEDULED:
            # A `once` routine has run its one slot: off, with the reason `list` shows
            # (tests/supervisor/test_daemon_once.py).
            ledger.disable(
                routine.name,
                file_enabled=routine.enabled,
                file_identity=routine.identity,
                reason=f"ran once, as scheduled ({routine.schedule.once})",
            )
        if out.proposals:
            notes += keep_proposals(
                ledger, paths, routine, run_id, out.proposals, now, pause_timeout=paused
            )
    except LedgerUnavailable:
        # The proposals too: kept with the row, recorded when space returns, each once
        # (test_reliability_full_disk.py::
        # test_proposals_of_a_run_that_ends_on_a_full_disk_are_kept_with_its_result).
        unwritten = Unwritten(
            routine,
            run_id,
            now,
            end,
            proposals=tuple(out.proposals),
            paths=paths,
            pause_timeout=paused,
        )
    return disabled, unwritten


def strike_rule(routine: Routine, detail: str) -> Strike:
    """How a run of `routine` that ended as `detail` says counts toward three strikes: written
    in finish_run's transaction with the end itself (tests/fleet/test_ledger_contract.py::
    test_a_strike_is_written_with_the_end_it_counts)."""
    reason = strike_reason(detail)
    return Strike(file_enabled=routine.enabled, file_identity=routine.identity, reason=reason)


def disabled_note(routine: Routine, detail: str) -> Notification:
    """What the person is told when a run's end was its routine's third strike."""
    return Notification(
        f"{routine.name} disabled",
        f"{strike_rule(routine, detail).reason}\nFix it, then: vinos-routine enable {routine.name}",
        "critical",
    )
