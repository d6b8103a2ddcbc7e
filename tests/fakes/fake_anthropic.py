"""A fake Anthropic Messages API (POST /v1/messages) for the real `anthropic` SDK.

    with FakeAnthropic([rate_limited(), text("Hello")]) as fake:
        env["ANTHROPIC_BASE_URL"] = fake.url
        ...
        assert len(fake.messages) == 2

Replies have the real shapes: a `message` object with content blocks, `stop_reason` and
`usage`; errors as `{"type": "error", "error": {"type", "message"}, "request_id"}` with the
real status codes and error types. Retryable errors carry `retry-after-ms` so the SDK's
retries wait milliseconds, not seconds.

A request with `"stream": true` (as Claude Code's CLI sends) gets a 200 `message` as the API
streams it: server-sent events `message_start`, then per content block `content_block_start`,
its deltas (`text_delta` a word or so each, `input_json_delta` in two pieces) and
`content_block_stop`, then `message_delta` (stop reason, output tokens) and `message_stop`.
Errors are sent as they are, plain JSON, as the API does before a stream starts.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import replace
from typing import Any

from .server import FakeServer, Recorded, Reply, Script

__all__ = [
    "FakeAnthropic",
    "bad_key",
    "error",
    "overloaded",
    "rate_limited",
    "spend_limit",
    "streamed",
    "text",
    "tool_use",
]

_ids = itertools.count(1)
DEFAULT_MODEL = "claude-sonnet-4-6"


class FakeAnthropic(FakeServer):
    scripted = frozenset({("POST", "/v1/messages")})

    def __init__(self, script: list[Script] | tuple[Script, ...] = (), **kw: Any) -> None:
        super().__init__(script, **kw)

    @property
    def messages(self) -> list[Recorded]:
        """The POST /v1/messages requests, in order."""
        return self.requests_to("/v1/messages")

    def finish(self, req: Recorded, reply: Reply) -> Reply:
        body = req.body if isinstance(req.body, dict) else {}
        if (
            body.get("stream") is True
            and reply.status == 200
            and isinstance(reply.body, dict)
            and reply.body.get("type") == "message"
        ):
            return streamed(reply)
        return reply

    def route(self, req: Recorded) -> Reply:
        return error(404, "not_found_error", f"Not found: {req.method} {req.path}")

    def exhausted(self, req: Recorded) -> Reply:
        return error(500, "api_error", "fake Anthropic: script exhausted")


def _message(
    content: list[dict[str, Any]], stop_reason: str, model: str, usage: tuple[int, int]
) -> dict[str, Any]:
    return {
        "id": f"msg_fake{next(_ids):06d}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
    }


def _event(obj: dict[str, Any]) -> bytes:
    return b"event: %s\ndata: %s\n\n" % (obj["type"].encode(), json.dumps(obj).encode())


def _block_events(i: int, block: dict[str, Any]) -> list[bytes]:
    """One content block's start, deltas and stop."""
    if block["type"] == "tool_use":
        start = {**block, "input": {}}
        args = json.dumps(block["input"])
        half = len(args) // 2
        deltas = [
            {"type": "input_json_delta", "partial_json": p} for p in (args[:half], args[half:])
        ]
    else:
        start = {**block, "text": ""}
        words = re.findall(r"\S+\s*|\s+", block["text"])
        deltas = [{"type": "text_delta", "text": w} for w in words]
    return [
        _event({"type": "content_block_start", "index": i, "content_block": start}),
        *(_event({"type": "content_block_delta", "index": i, "delta": d}) for d in deltas),
        _event({"type": "content_block_stop", "index": i}),
    ]


def streamed(reply: Reply) -> Reply:
    """A `message` reply as the API streams it (see the module docstring)."""
    full = reply.body
    usage = full["usage"]
    head = {**full, "content": [], "stop_reason": None, "stop_sequence": None}
    head["usage"] = {**usage, "output_tokens": 1}
    events = [_event({"type": "message_start", "message": head}), _event({"type": "ping"})]
    for i, block in enumerate(full["content"]):
        events.extend(_block_events(i, block))
    delta = {"stop_reason": full["stop_reason"], "stop_sequence": full["stop_sequence"]}
    out = {"output_tokens": usage["output_tokens"]}
    events.append(_event({"type": "message_delta", "delta": delta, "usage": out}))
    events.append(_event({"type": "message_stop"}))
    headers = {**reply.headers, "content-type": "text/event-stream"}
    return replace(reply, body=None, chunks=tuple(events), headers=headers)


def text(
    body: str,
    *,
    stop_reason: str = "end_turn",
    input_tokens: int = 100,
    output_tokens: int = 50,
    model: str = DEFAULT_MODEL,
    delay: float = 0.0,
) -> Reply:
    """A plain text reply (also for stop reasons max_tokens, refusal, pause_turn …)."""
    content = [{"type": "text", "text": body}] if body else []
    return Reply(
        200,
        _message(content, stop_reason, model, (input_tokens, output_tokens)),
        headers={"request-id": f"req_fake{next(_ids):06d}"},
        delay=delay,
    )


def tool_use(
    *calls: tuple[str, dict[str, Any]],
    preface: str = "",
    input_tokens: int = 100,
    output_tokens: int = 30,
    model: str = DEFAULT_MODEL,
) -> Reply:
    """A reply asking for tools: each call is (name, input)."""
    content: list[dict[str, Any]] = [{"type": "text", "text": preface}] if preface else []
    for name, args in calls:
        content.append(
            {"type": "tool_use", "id": f"toolu_fake{next(_ids):06d}", "name": name, "input": args}
        )
    return Reply(200, _message(content, "tool_use", model, (input_tokens, output_tokens)))


def error(
    status: int,
    type_: str,
    message: str,
    *,
    headers: dict[str, str] | None = None,
    details: dict[str, Any] | None = None,
) -> Reply:
    """An error in the API's shape."""
    err: dict[str, Any] = {"type": type_, "message": message}
    if details is not None:
        err["details"] = details
    return Reply(
        status,
        {"type": "error", "error": err, "request_id": f"req_fake{next(_ids):06d}"},
        headers={"request-id": f"req_fake{next(_ids):06d}", **(headers or {})},
    )


def overloaded(retry_after_ms: int = 5) -> Reply:
    """529 overloaded_error (retried by the SDK)."""
    return error(
        529,
        "overloaded_error",
        "Overloaded",
        headers={"retry-after-ms": str(retry_after_ms), "x-should-retry": "true"},
    )


def rate_limited(retry_after_ms: int = 5) -> Reply:
    """429 rate_limit_error with a retry-after (retried by the SDK)."""
    return error(
        429,
        "rate_limit_error",
        "This request would exceed the rate limit for your organization of 50 requests per "
        "minute. For details, refer to: https://docs.claude.com/en/api/rate-limits.",
        headers={"retry-after-ms": str(retry_after_ms), "retry-after": "1"},
    )


def spend_limit() -> Reply:
    """429 for the monthly spend cap: no retry-after, details.error_code says why."""
    return error(
        429,
        "rate_limit_error",
        "You have reached your specified API usage limits. You will regain access on "
        "2026-08-01 at 00:00 UTC.",
        details={"error_code": "enforced_spend_limit_reached"},
    )


def bad_key() -> Reply:
    return error(401, "authentication_error", "invalid x-api-key")
