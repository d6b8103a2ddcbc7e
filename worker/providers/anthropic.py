"""Anthropic through the `anthropic` SDK (imported here only, so only premium runs load it).

The SDK retries 408/409/429/5xx (529 overloaded included) and connection errors twice with
backoff, honouring `retry-after`. One exception: a 429 whose `error.details.error_code` is
`enforced_spend_limit_reached` (the monthly spend cap) will not pass until next month, so a
middleware stops it before the SDK's retry loop sees it. `ANTHROPIC_BASE_URL` is honoured
by the SDK itself; the SDK's HTTP client is worker.webclient's, so the connector
(worker/connector.py) decides every connection, at any base URL. Every SDK error becomes a
`ProviderError` with a readable message here.
"""

from __future__ import annotations

from typing import Any

import anthropic
import httpx2

from worker import webclient
from worker.connector import ANTHROPIC, Refused
from worker.providers.base import (
    AssistantTurn,
    Conversation,
    ProviderError,
    Reply,
    Stop,
    ToolCall,
    ToolResult,
    ToolResultsTurn,
    ToolSpec,
    UserTurn,
    clean,
)

__all__ = ["MAX_RETRIES", "AnthropicProvider", "parse_message", "render"]

MAX_RETRIES = 2
CONNECT_TIMEOUT = 5.0
SPEND_LIMIT_CODE = "enforced_spend_limit_reached"
_STOPS = {
    "end_turn": Stop.END,
    "stop_sequence": Stop.END,
    "tool_use": Stop.TOOL_USE,
    "max_tokens": Stop.MAX_TOKENS,
    "refusal": Stop.REFUSAL,
    "pause_turn": Stop.PAUSE,
    "model_context_window_exceeded": Stop.CONTEXT,
}


class SpendLimitReached(Exception):
    """Raised by the middleware: not an SDK error type, so the SDK does not retry it."""


def _spend_limit_guard(request: Any, call_next: Any) -> Any:
    response = call_next(request)
    if response.status_code == 429:
        response.http_response.read()
        try:
            body = response.http_response.json()
        except ValueError:
            return response
        err = body.get("error") if isinstance(body, dict) else None
        if not isinstance(err, dict):
            return response
        details = err.get("details")
        if isinstance(details, dict) and details.get("error_code") == SPEND_LIMIT_CODE:
            raise SpendLimitReached(str(err.get("message") or SPEND_LIMIT_CODE))
    return response


class AnthropicProvider:
    name = "anthropic"
    premium = True

    def __init__(self, api_key: str, *, max_retries: int = MAX_RETRIES) -> None:
        # An explicit api_key: the SDK then consults no environment or profile credentials.
        # The HTTP client is webclient's: every connection it opens is decided by the
        # connector (ANTHROPIC_BASE_URL may name a port another local user holds).
        http, _ = webclient.deadline_client(ANTHROPIC)
        try:
            self._client = anthropic.Anthropic(
                api_key=api_key,
                max_retries=max_retries,
                middleware=[_spend_limit_guard],
                http_client=http,
            )
        except httpx2.InvalidURL as exc:  # ANTHROPIC_BASE_URL = "http://0177.0.0.1"
            http.close()
            raise ProviderError(f"ANTHROPIC_BASE_URL is not a usable URL: {exc}") from None
        self.max_retries = max_retries
        self.base_url = str(self._client.base_url).rstrip("/")

    def complete(
        self,
        conv: Conversation,
        tools: list[ToolSpec],
        *,
        model: str,
        max_tokens: int,
        timeout: float,
    ) -> Reply:
        kwargs: dict[str, Any] = {}
        if tools:
            kwargs["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in tools
            ]
        try:
            msg = self._client.messages.create(
                model=model,
                max_tokens=max_tokens,
                system=conv.system,
                messages=render(conv),  # type: ignore[arg-type]
                timeout=anthropic.Timeout(timeout, connect=min(CONNECT_TIMEOUT, timeout)),
                **kwargs,
            )
        except SpendLimitReached as exc:
            raise ProviderError(f"Anthropic API spend limit reached (not retried): {exc}") from None
        except anthropic.APIConnectionError as exc:
            if isinstance(exc.__cause__, Refused):  # the connector's: says why and the fix
                raise ProviderError(str(exc.__cause__)) from None
            raise ProviderError(self._explain(exc, model, timeout)) from None
        except anthropic.APIError as exc:
            raise ProviderError(self._explain(exc, model, timeout)) from None
        return parse_message(msg.to_dict(), model=model)

    def _explain(self, exc: anthropic.APIError, model: str, timeout: float) -> str:
        """One place that turns every SDK error into a sentence for the user."""
        retried = f"after {self.max_retries} retries"
        if isinstance(exc, anthropic.APITimeoutError):
            return f"Anthropic did not answer within {timeout:.0f} s ({retried})"
        if isinstance(exc, anthropic.APIConnectionError):
            cause = exc.__cause__ or exc
            return f"cannot reach Anthropic at {self.base_url} ({retried}): {cause}"
        if not isinstance(exc, anthropic.APIStatusError):
            return f"Anthropic request failed: {exc.message}"
        status, kind = exc.status_code, exc.type or "error"
        detail = exc.api_message or exc.message
        if status == 401:
            return (
                "Anthropic rejected the API key (401 authentication_error): check "
                "ANTHROPIC_API_KEY or ~/.vinos/secrets/anthropic-key"
            )
        if status == 429:
            if exc.error_code == SPEND_LIMIT_CODE:
                return f"Anthropic API spend limit reached (not retried): {detail}"
            return f"Anthropic rate limit (429 {kind}) {retried}: {detail}"
        if status == 400 and "usage limits" in detail:
            return f"Anthropic API spend limit reached: {detail}"
        if status == 402:
            return f"Anthropic billing problem (402 {kind}): {detail}"
        if status == 403:
            return f"Anthropic refused access (403 {kind}): {detail}"
        if status == 404:
            return f'Anthropic does not know the model "{model}" (404 {kind}): {detail}'
        if status == 529 or kind == "overloaded_error":
            return f"Anthropic is overloaded (529 overloaded_error) {retried}"
        if status >= 500:
            return f"Anthropic server error ({status} {kind}) {retried}: {detail}"
        return f"Anthropic API error ({status} {kind}): {detail}"


def render(conv: Conversation) -> list[dict[str, Any]]:
    """The conversation as Messages API `messages` (the system prompt goes separately)."""
    out: list[dict[str, Any]] = []
    for turn in conv.turns:
        if isinstance(turn, UserTurn):
            out.append({"role": "user", "content": turn.text})
        elif isinstance(turn, AssistantTurn):
            r = turn.reply
            if r.provider == "anthropic" and isinstance(r.native, list):
                # Sent back verbatim: required for pause_turn, and keeps tool_use ids exact.
                out.append({"role": "assistant", "content": r.native})
                continue
            blocks: list[dict[str, Any]] = [{"type": "text", "text": r.text}] if r.text else []
            blocks += [
                {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments or {}}
                for c in r.tool_calls
            ]
            out.append({"role": "assistant", "content": blocks or r.text or "(no reply)"})
        else:
            assert isinstance(turn, ToolResultsTurn)
            out.append(
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": res.call.id,
                            "content": _result_content(res),
                            "is_error": res.is_error,
                        }
                        for res in turn.results
                    ],
                }
            )
    return out


def _result_content(res: ToolResult) -> str | list[dict[str, Any]]:
    """A tool result's text, then its images as the Messages API's image blocks."""
    if not res.images:
        return res.content
    return [
        {"type": "text", "text": res.content},
        *(
            {"type": "image", "source": {"type": "base64", "media_type": i.mime, "data": i.data}}
            for i in res.images
        ),
    ]


def parse_message(msg: dict[str, Any], *, model: str) -> Reply:
    """A Messages API `message` (as a dict) → Reply (pure)."""
    content = [b for b in msg.get("content") or [] if isinstance(b, dict)]
    text = clean("".join(str(b.get("text", "")) for b in content if b.get("type") == "text"))
    calls = tuple(
        ToolCall(
            str(b.get("id")),
            str(b.get("name")),
            b["input"] if isinstance(b.get("input"), dict) else None,
            None if isinstance(b.get("input"), dict) else "tool input is not a JSON object",
        )
        for b in content
        if b.get("type") == "tool_use"
    )
    reason = str(msg.get("stop_reason") or "")
    usage = msg.get("usage") or {}
    # Cache reads and writes are input too (we set no cache_control, so normally absent).
    input_tokens = sum(
        int(usage.get(k) or 0)
        for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    )
    return Reply(
        text=text,
        tool_calls=calls,
        stop=_STOPS.get(reason, Stop.OTHER),
        stop_reason=reason,
        model=str(msg.get("model") or model),
        input_tokens=input_tokens,
        output_tokens=int(usage.get("output_tokens") or 0),
        provider="anthropic",
        native=content,
    )
