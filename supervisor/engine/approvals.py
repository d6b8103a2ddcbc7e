"""The supervisor's side of proposed actions: record what a run proposed (checked again: the
worker is ours, the model in it is not), tell the user, start the auto-approved ones, and give
the next run its decisions.

An approved action runs in `python -m worker.actioncmd` (the supervisor never imports the
sandbox), started here for `auto_approve` and by `vinos-routine approve`.
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from ipc import Decision, Proposal
from routines import proposals
from routines.ledger import LedgerError
from routines.ledger.api import LedgerAPI
from routines.proposals import ProposalStore
from routines.safetext import one_line
from routines.spec import Routine
from routines.spec.paths import Paths

__all__ = [
    "Recorded",
    "action_argv",
    "decisions_for",
    "proposal_store",
    "record_proposals",
    "start_approved",
    "start_auto",
]

log = logging.getLogger("vinos.approvals")


@dataclass(frozen=True, slots=True)
class Recorded:
    ids: tuple[int, ...]
    refused: tuple[str, ...]  # why a proposal the worker sent was not recorded


def record_proposals(
    ledger: ProposalStore,
    routine: Routine,
    run_id: str,
    sent: list[Proposal],
    now: datetime,
    expires_after: int | None = None,
) -> Recorded:
    """Record the run's proposals as waiting rows, each checked again against the routine.
    Once: those of `run_id` recorded before (a write that found the disk full part-way, tried
    again) are not added again. `expires_after`: a paused run's request waits its
    needs_you_timeout, not the routine's approvals_expire."""
    ids: list[int] = []
    refused: list[str] = []
    accepted = 0
    # Each `add` is its own transaction, in the order sent: the first `done` are there.
    done = proposals.recorded_for_run(ledger, run_id)
    fp = proposals.fingerprint(routine.text)
    agent = routine.agent
    for p in sent:
        action = agent.action(p.action) if agent is not None else None
        size = len(p.input.encode("utf-8", "surrogatepass"))
        name, command = (action.name, action.run) if action is not None else (p.action, p.path)
        if action is None and not _write_request(routine, p):
            refused.append(f"undeclared action {one_line(p.action)[:80]!r}")
        elif size > proposals.MAX_INPUT:
            refused.append(f"{name}: input of {size:,} bytes")
        elif accepted >= proposals.MAX_PER_RUN:
            refused.append(f"{name}: more than {proposals.MAX_PER_RUN} in one run")
        elif (accepted := accepted + 1) <= done:
            continue
        else:
            ids.append(
                proposals.add(
                    ledger,
                    routine=routine.name,
                    run_id=run_id,
                    action=name,
                    command=command,
                    input=p.input,
                    summary=p.summary[:300],
                    fingerprint=fp,
                    now=now,
                    expires_after=expires_after or routine.approvals_expire,
                )
            )
    for why in refused:
        log.warning("%s: run %s: proposal not recorded: %s", routine.name, run_id, why)
    return Recorded(tuple(ids), tuple(refused))


def _write_request(routine: Routine, p: Proposal) -> bool:
    """Whether `p` is a write_file request a run of `routine` may pause at: it declares write
    folders and the path is one absolute line (worker/actioncmd.py checks it against the
    folders again, links resolved, before it writes)."""
    if p.action != proposals.WRITE_ACTION or not routine.write:
        return False
    return p.path.startswith("/") and not any(c in p.path for c in "\0\n\r")


@contextlib.contextmanager
def proposal_store(ledger: LedgerAPI, p: Paths) -> Iterator[ProposalStore]:
    """Where the proposals are, which `pending`, `approve`, `deny`, `brief`, the waybar
    module and the dashboard read: the run ledger itself (the fleet's on a fleet;
    routines/proposals.py `store_for`). LedgerError when it cannot be opened."""
    with proposals.store_for(ledger, p.ledger) as store:
        yield store


def decisions_for(
    ledger: LedgerAPI, p: Paths, routine: Routine, now: datetime | None = None
) -> list[Decision]:
    """What became of `routine`'s proposals since this machine's last finished run of it
    started, for the next run's prompt (expired ones are marked first, so the run hears of
    them too). `ledger` is the run ledger (the fleet's on a fleet)."""
    if not routine.actions:
        return []
    since = ledger.last_started_here(routine.name)
    try:
        with proposal_store(ledger, p) as store:
            with contextlib.suppress(LedgerError):  # a full disk must not stop the run
                proposals.expire(store, now or datetime.now(UTC))
            decided = proposals.decided_since(store, routine.name, since)
    except LedgerError as exc:
        log.warning("%s: the proposals' decisions are not told to this run: %s", routine.name, exc)
        return []
    return [
        Decision(d.id, d.action, d.summary, str(d.state), d.decided_by, d.why, d.exit_status)
        for d in decided
    ]


def action_argv(
    proposal_id: int, *, auto: bool = False, shown: str | None = None, dashboard: bool = False
) -> list[str]:
    """The command that runs an approved proposal (`python -m worker.actioncmd`); `shown`:
    the fingerprint of the input the person was shown, the only one it may run with;
    `dashboard`: the person approved it there (its decider)."""
    # -P: keep the current directory off sys.path, or a `worker` package there would run.
    argv = [sys.executable, "-P", "-m", "worker.actioncmd", str(proposal_id)]
    argv += ["--auto"] if auto else ["--dashboard"] if dashboard else []
    return [*argv, "--shown", shown] if shown is not None else argv


def start_auto(routine: Routine, ids: tuple[int, ...]) -> None:
    """For a routine with auto_approve: start the action runner on each new proposal. It
    checks the signature itself and leaves the proposal waiting when it does not verify."""
    if not routine.auto_approve or not ids:
        return
    for pid in ids:
        try:
            _start_runner(action_argv(pid, auto=True), None)
        except OSError as exc:
            log.warning("%s: proposal %d: could not start the action: %s", routine.name, pid, exc)


def start_approved(proposal_id: int, shown: str, then: Callable[[], None]) -> None:
    """The dashboard's Approve: run the proposal's action (worker.actioncmd, `--dashboard`,
    with the fingerprint of the input the page showed: that input or nothing), off the event
    loop, and call `then` when it has ended (the daemon's wake, so a run paused for it
    resumes now). OSError when it cannot start."""
    _start_runner(action_argv(proposal_id, shown=shown, dashboard=True), then)


def _start_runner(argv: list[str], then: Callable[[], None] | None) -> None:
    """The action runner, detached, reaped off the event loop (it may run for the action's
    whole timeout), then `then` from the reaping thread. OSError when it cannot start."""
    from supervisor.engine.spawn import worker_env

    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
        env=worker_env(),
    )

    def reap() -> None:
        proc.wait()
        if then is not None:
            then()

    threading.Thread(target=reap, daemon=True).start()
