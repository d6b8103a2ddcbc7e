"""A run's conversation kept for `reply`, and a reply run's start from its parent's.

The record format, its cap and its file live in routines/conversation.py; this module only
converts between it and the providers' neutral turns (worker/providers/base.py).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

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

__all__ = ["ReplyUnavailable", "parent_turns", "save_conversation", "to_record", "to_turns"]

_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


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
    try:
        record = store.load(Path(run.job.state_dir), parent)
    except store.ConversationInvalid as exc:
        raise ReplyUnavailable(f"the conversation of run {parent} cannot be read: {exc}") from None
    if record is None:
        raise ReplyUnavailable(f"run {parent} has no stored conversation to continue")
    if record.routine != run.name:
        raise ReplyUnavailable(f"run {parent} is a run of {record.routine}, not {run.name}")
    return [*to_turns(record), UserTurn(run.job.reply_text)]


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
