"""A paused run's conversation and request kept in the ledger, so whichever machine claims its
resume continues it (tests/fleet/test_fleet_needs_you.py::
test_a_run_paused_on_one_machine_resumes_on_another).

The worker keeps its conversation in this machine's state dir (routines/conversation.py); a
run that ends `needs_you` has it copied into the ledger with its request (`keep`), and the
daemon that resumes it writes the ledger's copy back to its own state dir before the resumed
worker starts (`restore`). The ledger's row is the file's record, validated (`parse`) and
fitted under its cap (`fit`): the same bytes and the same content, no more. It never holds a
credential, as the file never does: the worker's keys travel in request headers, never in a
turn.

An upgrade loses nothing (`import_once`, each daemon start): proposals a fleet machine kept in
its own SQLite file before they were the fleet's are copied into the fleet's ledger and then
deleted from the file (copied once: a second import finds them there), and a paused run's
conversation still only in its file is copied in
(tests/supervisor/test_daemon_needs_you.py::test_an_upgrade_keeps_a_paused_runs_conversation_and_request).
"""

from __future__ import annotations

import logging
from datetime import datetime

from routines import conversation
from routines.ledger import Ledger, LedgerError, iso
from routines.ledger.api import LedgerAPI, Requests
from routines.ledger.sqlrequests import PROPOSAL_COLUMNS
from routines.spec.paths import Paths

__all__ = ["import_once", "import_proposals", "keep", "restore"]

log = logging.getLogger("vinos.pauses")


def keep(ledger: Requests, paths: Paths, routine: str, run_id: str, now: datetime) -> bool:
    """Copy run `run_id`'s conversation from this machine's state dir into the ledger;
    whether there was one to copy (a file that is not a valid record is left out, warned)."""
    try:
        record = conversation.load(paths.routine_state(routine), run_id)
    except conversation.ConversationInvalid as exc:
        log.warning(
            "%s: run %s: its conversation is not kept for a resume: %s", routine, run_id, exc
        )
        return False
    if record is None:
        return False
    ledger.save_conversation(run_id, routine, conversation.fit(record).decode(), iso(now))
    return True


def restore(ledger: Requests, paths: Paths, routine: str, run_id: str) -> None:
    """Write the ledger's copy of run `run_id`'s conversation to this machine's state dir,
    where the resumed worker reads it; without one (a run paused before conversations were
    kept in the ledger) the file there is left as it is."""
    body = ledger.conversation(run_id)
    if body is None:
        return
    try:
        record = conversation.parse(body.encode())
    except conversation.ConversationInvalid as exc:
        log.warning("%s: run %s: its kept conversation is invalid: %s", routine, run_id, exc)
        return
    conversation.save(paths.routine_state(routine), record)


def import_proposals(into: Requests, local: Ledger) -> int:
    """Copy `local`'s proposals (a fleet machine's own file, from before a fleet shared them)
    that `into` has not got (the same run, action and time), then delete them from `local`;
    how many were copied. A kill between the two copies nothing twice."""
    rows = local.every_proposal()  # every state: the decided ones are history
    copied = 0
    for row in rows:
        there = {(p["action"], p["created_at"]) for p in into.proposals_of_run(row["run_id"])}
        if (row["action"], row["created_at"]) in there:
            continue
        values = {c: row[c] for c in PROPOSAL_COLUMNS if c != "id"}
        into.add_proposal(values)
        copied += 1
    if rows:
        with local.transaction() as tx:
            tx.execute("DELETE FROM proposals WHERE id <= ?", (max(r["id"] for r in rows),))
    return copied


def import_once(ledger: LedgerAPI, paths: Paths, now: datetime) -> None:
    """At a daemon's start: this machine's own file's proposals into a fleet's ledger, and
    each paused run's conversation still only in a file into the ledger. LedgerUnavailable
    propagates (the caller tries again on its next tick)."""
    if not isinstance(ledger, Ledger) and paths.ledger.exists():
        try:
            with Ledger(paths.ledger) as local:
                n = import_proposals(ledger, local)
        except LedgerError as exc:
            log.warning("this machine's own proposals are not imported now: %s", exc)
        else:
            if n:
                log.info("imported %d proposal(s) from %s into the fleet's ledger", n, paths.ledger)
    for run in ledger.paused_runs():
        if ledger.conversation(run.run_id) is None and keep(
            ledger, paths, run.routine, run.run_id, now
        ):
            log.info(
                "%s: run %s: its conversation is now kept in the ledger", run.routine, run.run_id
            )
