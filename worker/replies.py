"""A run's conversation kept for `reply`, and a reply run's start from its parent's; a
paused run's answer put where its paused call's result was (`resumed_turns`).

The record format, its cap and its file live in routines/conversation.py; this module only
converts between it and the providers' neutral turns (worker/providers/base.py).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from ipc import Answer
from routines import conversation as store
from routines.conversation import Record, Role, StoredCall, StoredResult, StoredTurn
from worker.context import RunContext
from worker.providers.base import (
    AssistantTurn,
    Conversation,
    Reply,
    Stop,
    ToolCall,
    ToolResult,
    ToolResultsTurn,
    Turn,
    UserTurn,
)

__all__ = [
    "NOT_RUN_RESULT",
    "PAUSED_RESULT",
    "ReplyUnavailable",
    "answer_result",
    "parent_turns",
    "resumed_turns",
    "save_conversation",
    "to_record",
    "to_turns",
]

_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


# The result a paused call holds in the stored conversation until the person answers; the
# resumed run puts the answer in its place (`resumed_turns`).
PAUSED_RESULT = json.dumps({"needs_you": True, "note": "the run paused for the person's answer"})
# The result of a call the model made after the one that paused, in the same turn: not run.
_NOT_RUN = (
    "not run: the run paused at an earlier call for the person's answer; "
    "call it again if you still need it"
)
NOT_RUN_RESULT = json.dumps({"error": _NOT_RUN})


class ReplyUnavailable(Exception):
    """The parent run's conversation cannot be continued; the message says why."""


def to_record(run: RunContext, conv: Conversation, final: Reply | None) -> Record:
    """`conv` (and the answer the loop did not append) as a record (pure)."""
    turns: list[StoredTurn] = []
    for t in [*conv.turns, *([AssistantTurn(final)] if final is not None else [])]:
        if isinstance(t, UserTurn):
            turns.append(StoredTurn(Role.USER, t.text))
        elif isinstance(t, AssistantTurn):
            calls = tuple(StoredCall(c.id, c.name, c.arguments) for c in t.reply.tool_calls)
            turns.append(StoredTurn(Role.ASSISTANT, t.reply.text, calls))
        else:
            results = tuple(
                StoredResult(r.call.id, r.call.name, r.content, r.is_error) for r in t.results
            )
            turns.append(StoredTurn(Role.TOOL, results=results))
    return Record(
        run_id=run.job.run_id,
        routine=run.name,
        routine_sha256=hashlib.sha256(run.job.routine_toml.encode()).hexdigest(),
        system=conv.system,
        turns=tuple(turns),
    )


def _safe_id(n: int, raw: str) -> str:
    """A tool-call id Anthropic accepts, unique in the conversation: Ollama's ids (call_0 in
    every turn) and ids from a file are neither guaranteed."""
    return f"t{n}_{_ID_UNSAFE.sub('_', raw)[:48] or 'call'}"


def to_turns(record: Record) -> list[Turn]:
    """A record's turns as provider turns (pure). An assistant turn comes back without its
    provider-native form, so each provider renders it from text and tool calls."""
    out: list[Turn] = []
    for n, t in enumerate(record.turns):
        if t.role is Role.USER:
            out.append(UserTurn(t.text))
        elif t.role is Role.ASSISTANT:
            calls = tuple(ToolCall(_safe_id(n, c.id), c.name, c.arguments) for c in t.tool_calls)
            stop = Stop.TOOL_USE if calls else Stop.END
            out.append(AssistantTurn(Reply(t.text, calls, stop, stop.value, "", None, None)))
        else:
            # The results belong to the assistant turn just before (parse checked the order).
            out.append(
                ToolResultsTurn(
                    tuple(
                        ToolResult(
                            ToolCall(_safe_id(n - 1, r.id), r.name, None), r.content, r.is_error
                        )
                        for r in t.results
                    )
                )
            )
    return out


def parent_turns(run: RunContext) -> list[Turn]:
    """The parent run's turns, then the person's reply as a new user turn."""
    parent = run.job.parent_run_id or ""
    return [*_parent_record_turns(run, parent), UserTurn(run.job.reply_text)]


def answer_result(answer: Answer) -> tuple[str, bool]:
    """The paused call's result from the person's answer (pure): the action's real output and
    exit status when it ran, else the refusal (denied, expired, edited) and why."""
    state = answer.state
    who = answer.decided_by or "the person"
    if state == "done":
        # Approved, yet nothing ran to the end (the sandbox refused it; a write whose path
        # resolves elsewhere now) leaves no exit status: it did not run.
        body = {
            "approved_by": who,
            "ran": answer.exit_status is not None,
            "exit_status": answer.exit_status,
            "output": answer.output or "",
        }
        failed = answer.exit_status != 0
        return json.dumps(body, ensure_ascii=False), failed
    why = answer.why or ""
    words = {
        "denied": "the person denied it",
        "expired": "nobody answered in time",
        "invalidated": "the routine file was edited since: it did not run",
    }.get(state, f"it did not run ({state})")
    body = {"error": f"refused: {words}" + (f": {why}" if why else ""), "ran": False}
    return json.dumps(body, ensure_ascii=False), True


def resumed_turns(run: RunContext) -> list[Turn]:
    """The paused parent's turns, with the person's answer where the paused call's result
    was: the resumed run's first request carries it (the action's real output, or the
    refusal the model must see)."""
    parent = run.job.parent_run_id or ""
    answer = run.job.answer
    if answer is None:
        raise ReplyUnavailable(f"run {parent}: no answer to resume it with")
    turns = _parent_record_turns(run, parent)
    content, is_error = answer_result(answer)
    last = turns[-1] if turns else None
    if not isinstance(last, ToolResultsTurn):
        raise ReplyUnavailable(f"run {parent} did not pause at a tool call")
    results = []
    found = False
    for r in last.results:
        if r.content == PAUSED_RESULT and not found:
            results.append(ToolResult(r.call, content, is_error))
            found = True
        else:
            results.append(r)
    if not found:
        raise ReplyUnavailable(f"run {parent}'s conversation holds no paused call")
    return [*turns[:-1], ToolResultsTurn(tuple(results))]


def _parent_record_turns(run: RunContext, parent: str) -> list[Turn]:
    try:
        record = store.load(Path(run.job.state_dir), parent)
    except store.ConversationInvalid as exc:
        raise ReplyUnavailable(f"the conversation of run {parent} cannot be read: {exc}") from None
    if record is None:
        raise ReplyUnavailable(f"run {parent} has no stored conversation to continue")
    if record.routine != run.name:
        raise ReplyUnavailable(f"run {parent} is a run of {record.routine}, not {run.name}")
    return to_turns(record)


def save_conversation(run: RunContext, conv: Conversation, final: Reply | None) -> None:
    """Keep this run's conversation for a later `reply`; a failure is a warning only."""
    try:
        size, shortened = store.save(Path(run.job.state_dir), to_record(run, conv, final))
    except (OSError, ValueError, TypeError) as exc:  # never the run's end: a warning
        run.channel.warn(f"conversation not kept (reply will not work for this run): {exc}")
        return
    if shortened:
        run.channel.log(
            f"conversation kept for reply, shortened to {size:,} bytes (the cap is 256 KB): "
            "long tool output was cut"
        )
