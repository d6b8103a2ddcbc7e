"""A fake Anthropic Messages API (POST /v1/messages) for the real `anthropic` SDK.

    with FakeAnthropic([rate_limited(), text("Hello")]) as fake:
        env["ANTHROPIC_BASE_URL"] = fake.url
        ...
        assert len(fake.messages) == 2

Replies have the real shapes: a `message` object with content blocks, `stop_reason` and
`usage`; errors as `{"type": "error", "error": {"type", "message"}, "request_id"}` with the
real status codes and error types. Retryable errors carry `retry-after-ms` so the SDK's
retries wait milliseconds, not seconds.
"""

from __future__ import annotations

import itertools
from typing import Any

from .server import FakeServer, Recorded, Reply, Script

__all__ = [
    "FakeAnthropic",
    "bad_key",
    "error",
    "overloaded",
    "rate_limited",
    "spend_limit",
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
