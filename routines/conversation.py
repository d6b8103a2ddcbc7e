"""A run's conversation, kept so `vinos-routine reply RUN_ID TEXT` can continue it:
state/<name>/runs/<run-id>.conversation.json, beside the run's log and pruned with it.

The record is provider-neutral (the worker converts it to and from its own turns): the system
prompt, then turns, each a user text, an assistant reply (text and tool calls) or the tool
results of the reply before it.

    {"version": 1, "run_id": "…", "routine": "inbox", "routine_sha256": "…",
     "system": "…", "shortened": false,
     "turns": [{"role": "user", "text": "…"},
               {"role": "assistant", "text": "…", "tool_calls": [{"id", "name", "arguments"}]},
               {"role": "tool", "results": [{"id", "name", "content", "is_error"}]}]}

At most MAX_CONVERSATION bytes (256 KB). A longer conversation is shortened before it is
written (`fit`), never refused: first every long text (tool output mostly) is cut to a
shrinking limit, its head kept with a note of what was cut; if that is not enough, the
oldest exchanges after the first user turn go, an assistant turn with the turn after it, so
tool calls and their results stay paired. `shortened` says it happened.

The file is written by host code only (the worker), but it lies in the state dir, which older
versions let sandboxes write: it is read as untrusted, O_NOFOLLOW beneath the state dir,
size-capped before parsing, and validated field by field (`parse`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

import orjson

from routines.store import open_dir_beneath, read_regular_at, write_atomic_at

__all__ = [
    "MAX_CONVERSATION",
    "RUN_ID_RE",
    "ConversationInvalid",
    "Record",
    "Role",
    "StoredCall",
    "StoredResult",
    "StoredTurn",
    "file_name",
    "fit",
    "load",
    "parse",
    "save",
]

MAX_CONVERSATION = 256 * 1024
VERSION = 1
# Run ids as supervisor/engine/jobs.py makes them (20261202T060012-day-brief-3f9a1c): a file name.
RUN_ID_RE = re.compile(r"\d{8}T\d{6}-[a-z0-9][a-z0-9-]{0,80}")
_SURROGATE = re.compile("[\ud800-\udfff]")
_CUT_NOTE = "\n[… {n:,} more characters cut: a stored conversation is at most 256 KB]"


class ConversationInvalid(ValueError):
    """A conversation file that is missing its parts, too large, or not ours."""


class Role(StrEnum):
    USER = "user"  # the task (memory first), or a person's reply
    ASSISTANT = "assistant"  # a model reply: text and tool calls
    TOOL = "tool"  # the results of the previous assistant turn's tool calls


@dataclass(frozen=True, slots=True)
class StoredCall:
    id: str
    name: str
    arguments: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class StoredResult:
    id: str
    name: str
    content: str
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class StoredTurn:
    role: Role
    text: str = ""
    tool_calls: tuple[StoredCall, ...] = ()
    results: tuple[StoredResult, ...] = ()

    def as_json(self) -> dict[str, Any]:
        if self.role is Role.USER:
            return {"role": "user", "text": self.text}
        if self.role is Role.ASSISTANT:
            return {
                "role": "assistant",
                "text": self.text,
                "tool_calls": [
                    {"id": c.id, "name": c.name, "arguments": c.arguments} for c in self.tool_calls
                ],
            }
        return {
            "role": "tool",
            "results": [
                {"id": r.id, "name": r.name, "content": r.content, "is_error": r.is_error}
                for r in self.results
            ],
        }


@dataclass(frozen=True, slots=True)
class Record:
    run_id: str
    routine: str
    routine_sha256: str  # of the routine text the run ran: `reply` tells an edit since
    system: str
    turns: tuple[StoredTurn, ...] = ()
    shortened: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            "run_id": self.run_id,
            "routine": self.routine,
            "routine_sha256": self.routine_sha256,
            "system": self.system,
            "shortened": self.shortened,
            "turns": [t.as_json() for t in self.turns],
        }

    def user_texts(self) -> list[str]:
        return [t.text for t in self.turns if t.role is Role.USER]


def file_name(run_id: str) -> str:
    if not RUN_ID_RE.fullmatch(run_id):
        raise ConversationInvalid(f"{run_id!r} is not a run id (like 20261202T060012-inbox-3f9a1c)")
    return f"{run_id}.conversation.json"


# --- fitting under the cap (pure) ---------------------------------------------------------


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + _CUT_NOTE.format(n=len(text) - limit)


def _shrink(turn: StoredTurn, limit: int) -> StoredTurn:
    return StoredTurn(
        turn.role,
        _cut(turn.text, limit),
        turn.tool_calls,
        tuple(StoredResult(r.id, r.name, _cut(r.content, limit), r.is_error) for r in turn.results),
    )


def _encode(record: Record) -> bytes:
    doc = record.as_json()
    try:
        return orjson.dumps(doc)
    except orjson.JSONEncodeError:  # a lone surrogate (a model's "\ud800" escape) in a text
        return orjson.dumps(_valid_utf8(doc))


def _valid_utf8(value: Any) -> Any:
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_valid_utf8(k): _valid_utf8(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_valid_utf8(v) for v in value]
    return value


def fit(record: Record, cap: int = MAX_CONVERSATION) -> bytes:
    """`record` as JSON of at most `cap` bytes, shortened as the module says (pure).

    Raises ConversationInvalid only when even the system prompt and the first user turn,
    each cut to 1 KB, do not fit (a cap far below any real use).
    """
    data = _encode(record)
    if len(data) <= cap:
        return data
    limit = 64 * 1024
    shrunk = record
    while limit >= 1024:
        shrunk = replace(
            record,
            system=_cut(record.system, max(limit, 16 * 1024)),
            turns=tuple(_shrink(t, limit) for t in record.turns),
            shortened=True,
        )
        data = _encode(shrunk)
        if len(data) <= cap:
            return data
        limit //= 2
    # Still too long (many turns): drop the oldest exchanges after the first user turn, two
    # turns at a time, so roles keep alternating and tool results follow their calls.
    turns = shrunk.turns
    while len(turns) > 1:
        turns = (turns[0], *turns[3:])
        while len(turns) > 1 and turns[1].role is Role.TOOL:  # never results without a call
            turns = (turns[0], *turns[2:])
        data = _encode(replace(shrunk, turns=turns))
        if len(data) <= cap:
            return data
    raise ConversationInvalid(f"the conversation does not fit in {cap:,} bytes")


# --- reading it back (pure) ---------------------------------------------------------------


def _str(obj: dict[str, Any], key: str, where: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise ConversationInvalid(f"{where}.{key}: expected a string, found {type(value).__name__}")
    return value


def _turn(obj: object, n: int) -> StoredTurn:
    where = f"turns[{n}]"
    if not isinstance(obj, dict):
        raise ConversationInvalid(f"{where}: expected an object")
    role = obj.get("role")
    if role == "user":
        return StoredTurn(Role.USER, _str(obj, "text", where))
    if role == "assistant":
        calls = obj.get("tool_calls", [])
        if not isinstance(calls, list):
            raise ConversationInvalid(f"{where}.tool_calls: expected a list")
        out = []
        for i, c in enumerate(calls):
            w = f"{where}.tool_calls[{i}]"
            if not isinstance(c, dict):
                raise ConversationInvalid(f"{w}: expected an object")
            args = c.get("arguments")
            if args is not None and not isinstance(args, dict):
                raise ConversationInvalid(f"{w}.arguments: expected an object or null")
            out.append(StoredCall(_str(c, "id", w), _str(c, "name", w), args))
        return StoredTurn(Role.ASSISTANT, _str(obj, "text", where), tuple(out))
    if role == "tool":
        results = obj.get("results")
        if not isinstance(results, list) or not results:
            raise ConversationInvalid(f"{where}.results: expected a non-empty list")
        res = []
        for i, r in enumerate(results):
            w = f"{where}.results[{i}]"
            if not isinstance(r, dict) or not isinstance(r.get("is_error", False), bool):
                raise ConversationInvalid(f"{w}: expected an object with a boolean is_error")
            res.append(
                StoredResult(
                    _str(r, "id", w), _str(r, "name", w), _str(r, "content", w), r["is_error"]
                )
            )
        return StoredTurn(Role.TOOL, results=tuple(res))
    raise ConversationInvalid(f"{where}.role: expected user, assistant or tool, found {role!r}")


def parse(data: bytes) -> Record:
    """Validate a conversation file's bytes; ConversationInvalid says what is wrong."""
    if len(data) > MAX_CONVERSATION:
        raise ConversationInvalid(f"{len(data):,} bytes is over the {MAX_CONVERSATION:,} cap")
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ConversationInvalid(f"not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("version") != VERSION:
        raise ConversationInvalid(f"not a version {VERSION} conversation record")
    turns = doc.get("turns")
    if not isinstance(turns, list) or not turns:
        raise ConversationInvalid("turns: expected a non-empty list")
    parsed = tuple(_turn(t, n) for n, t in enumerate(turns))
    if parsed[0].role is not Role.USER:
        raise ConversationInvalid("turns[0]: a conversation starts with a user turn")
    for n, t in enumerate(parsed):
        if t.role is Role.TOOL and (n == 0 or parsed[n - 1].role is not Role.ASSISTANT):
            raise ConversationInvalid(f"turns[{n}]: tool results must follow an assistant turn")
    run_id = _str(doc, "run_id", "record")
    if not RUN_ID_RE.fullmatch(run_id):
        raise ConversationInvalid(f"record.run_id: {run_id!r} is not a run id")
    return Record(
        run_id,
        _str(doc, "routine", "record"),
        _str(doc, "routine_sha256", "record"),
        _str(doc, "system", "record"),
        parsed,
        doc.get("shortened") is True,
    )


# --- the file ------------------------------------------------------------------------------


def save(state_dir: Path, record: Record) -> tuple[int, bool]:
    """Write `record` to state_dir/runs/<run-id>.conversation.json (atomically, beneath
    `state_dir` following no link); returns the bytes written and whether it was shortened."""
    data = fit(record)
    fd = open_dir_beneath(state_dir, "runs", make=True)
    try:
        write_atomic_at(fd, file_name(record.run_id), data)
    finally:
        os.close(fd)
    return len(data), len(data) < len(_encode(record))


def load(state_dir: Path, run_id: str) -> Record | None:
    """The conversation of run `run_id`, None when there is none (pruned, a command routine,
    a run that never reached the model, or from before this version); ConversationInvalid
    when the file is there but not a valid record of that run."""
    name = file_name(run_id)
    try:
        fd = open_dir_beneath(state_dir, "runs")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConversationInvalid(f"{state_dir}/runs: {exc.strerror}") from None
    try:
        if not _exists_at(fd, name):
            return None
        data = read_regular_at(fd, name, MAX_CONVERSATION + 1, head=True)
    finally:
        os.close(fd)
    if data is None:
        raise ConversationInvalid(f"{name} is not a regular file (or unreadable)")
    record = parse(data)
    if record.run_id != run_id:
        raise ConversationInvalid(f"{name} holds run {record.run_id}, not {run_id}")
    return record


def _exists_at(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True
