"""`reply RUN_ID TEXT`: what is checked before a reply run is recorded, by the CLI (to say
what is wrong before anything starts) and again by whoever runs it (the daemon, or the CLI
in-process), since the files may change in between.

A reply is a manual run of the parent run's routine (the current file, whatever it holds
now: same whitelist, budget, sandbox and outputs), started from the parent's stored
conversation (routines/conversation.py) with TEXT as a new user turn. The ledger records it
with trigger `reply` and the parent's run id.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from ipc import Answer
from routines import conversation
from routines.ledger.api import LedgerAPI
from routines.runs import Trigger
from routines.spec import Kind, Routine
from routines.spec.paths import Paths

__all__ = ["MAX_REPLY_TEXT", "ReplyRefused", "ReplyTo", "prepare_reply"]

# A person's message, not a document: the whole conversation is capped at 256 KB.
MAX_REPLY_TEXT = 16 * 1024


class ReplyRefused(Exception):
    """This reply cannot run; the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class ReplyTo:
    parent_run_id: str
    text: str
    edited: bool  # the routine file changed since the parent ran: the current file runs
    shortened: bool = False  # the parent's conversation was cut to fit its 256 KB cap
    # A paused parent's person answered (supervisor/engine/pauses.py): the answer, in place of the
    # paused call's result, instead of a new user turn (`text` is then the detail).
    answer: Answer | None = None

    @property
    def trigger(self) -> Trigger:
        return Trigger.RESUME if self.answer is not None else Trigger.REPLY

    def detail(self) -> str:
        """The run's first log line (and `reply`'s first line)."""
        if self.answer is not None:
            return self.text
        notes = [f"reply to {self.parent_run_id}"]
        if self.edited:
            notes.append("the routine was edited since that run: this reply runs the current file")
        if self.shortened:
            notes.append("that run's conversation was shortened to fit 256 KB")
        return "; ".join(notes)


def prepare_reply(
    ledger: LedgerAPI,
    paths: Paths,
    routine_of: Callable[[str], Routine],
    parent_run_id: object,
    text: object,
) -> tuple[Routine, ReplyTo]:
    """The routine to run and the reply, or ReplyRefused. `routine_of(name)` gives the
    routine's current valid version (and raises its own error when there is none)."""
    if not isinstance(text, str) or not text.strip():
        raise ReplyRefused("the reply is empty: say what the routine should do differently")
    if len(text.encode()) > MAX_REPLY_TEXT:
        raise ReplyRefused(
            f"the reply is {len(text.encode()):,} bytes; at most {MAX_REPLY_TEXT:,} (16 KB)"
        )
    if not isinstance(parent_run_id, str) or not conversation.RUN_ID_RE.fullmatch(parent_run_id):
        raise ReplyRefused(
            f"{parent_run_id!r} is not a run id (like 20261202T060012-inbox-3f9a1c; "
            "`vinos-routine history NAME` lists them)"
        )
    row = ledger.run(parent_run_id)
    if row is None:
        raise ReplyRefused(
            f"no run {parent_run_id} in the ledger (`vinos-routine history NAME` lists them)"
        )
    routine = routine_of(row.routine)
    if routine.kind is Kind.COMMAND:
        raise ReplyRefused(
            f"{routine.name} is a command routine: there is no conversation to reply to"
        )
    try:
        record = conversation.load(paths.routine_state(routine.name), parent_run_id)
    except conversation.ConversationInvalid as exc:
        raise ReplyRefused(f"run {parent_run_id}'s conversation cannot be used: {exc}") from None
    if record is None:
        raise ReplyRefused(
            f"run {parent_run_id} kept no conversation to continue (a run that never reached "
            "the model, a run from before replies existed, or one older than "
            "[ledger].keep_outputs_days, whose files were deleted)"
        )
    edited = record.routine_sha256 != hashlib.sha256(routine.text.encode()).hexdigest()
    return routine, ReplyTo(parent_run_id, text, edited, record.shortened)
