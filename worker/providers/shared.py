"""What the Ollama and OpenAI-compatible providers share: streamed text shown as whole lines,
tool-call arguments parsed from JSON, and a tool call a small model wrote as JSON text.

Both protocols carry tool-call arguments as a JSON object or a JSON string; one that does not
parse is a `malformed` reply, which the auto-router escalates on (malformed_tool_json). Both
local servers run models small enough to write their call into `content` instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from worker.providers.base import ToolCall

__all__ = ["FLUSH_CHARS", "TextLines", "TextSink", "arguments", "tool_call_in_content"]

TextSink = Callable[[str], None]
FLUSH_CHARS = 200  # a streamed line longer than this is shown in pieces of about this size


class TextLines:
    """Streamed text pieces → `sink` calls of whole lines (or FLUSH_CHARS at most), so a
    slow model's answer reaches the run log as it grows, without an event per token."""

    def __init__(self, sink: TextSink | None, flush_chars: int = FLUSH_CHARS) -> None:
        self._sink = sink
        self._flush = flush_chars
        self._buf = ""

    def feed(self, piece: str) -> None:
        if self._sink is None or not piece:
            return
        self._buf += piece
        head, newline, tail = self._buf.rpartition("\n")
        if newline:
            self._buf = tail
            self._emit(head)
        if len(self._buf) >= self._flush:
            self._emit(self._buf)
            self._buf = ""

    def end(self) -> None:
        self._emit(self._buf)
        self._buf = ""

    def _emit(self, text: str) -> None:
        if self._sink is not None and text.strip():
            self._sink(text)


def arguments(raw: object) -> tuple[dict[str, Any] | None, str | None]:
    if isinstance(raw, dict):
        return raw, None
    if raw is None:
        return {}, None
    if isinstance(raw, str):
        if not raw.strip():
            return {}, None
        try:
            parsed = json.loads(raw)
        except ValueError as exc:
            return None, f"{exc} in {raw[:120]!r}"
        if isinstance(parsed, dict):
            return parsed, None
        return None, f"expected a JSON object, found {type(parsed).__name__}"
    return None, f"expected a JSON object, found {type(raw).__name__}"


_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


def tool_call_in_content(content: str, tool_names: set[str]) -> ToolCall | None:
    """A tool call written as JSON text, e.g. `{"name": "run_shell", "parameters": {...}}`.

    Only a whole reply that is one JSON object naming an offered tool counts, so ordinary
    prose (or a JSON answer about something else) is never mistaken for a call.
    """
    text = content.strip().removeprefix("<|python_tag|>").strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1)
    if not (text.startswith("{") and text.endswith("}")):
        return None
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    inner = obj.get("function")
    fn: dict[str, Any] = inner if isinstance(inner, dict) else obj
    name = fn.get("name")
    if name not in tool_names:
        return None
    raw = fn.get("parameters", fn.get("arguments", {}))
    args, error = arguments(raw)
    return ToolCall("call_content", str(name), args, error)
