"""Ollama: POST /api/chat with `tools`, streamed (NDJSON), over worker.webclient (httpx2).

The reply streams as one JSON object a line (`"done": false` pieces, then a `"done": true`
line with the counts); `merge_chunks` folds them into the one response a non-streaming call
would get, and each piece of text goes to `on_text` as it arrives, so a slow local model's
answer shows in the run log while it is written. A server that answers with one
non-streaming object (a proxy, an old Ollama) is the same thing with one line.

Tool-call arguments may arrive as a JSON object (Ollama) or a JSON string (OpenAI-style
proxies); both work, and a string that does not parse marks the reply `malformed`. A small
model that writes its tool call as JSON text in `content` (llama3.2:3b does) is recognised
and also marked `malformed`: the auto-router escalates on it, other routes run the call.
"""

from __future__ import annotations

from typing import Any

import orjson

from worker import webclient
from worker.connector import Refused, Trust, ollama_trust
from worker.providers.base import (
    AssistantTurn,
    Conversation,
    MalformedToolCall,
    ProviderError,
    Reply,
    Stop,
    StoppedMidReply,
    ToolCall,
    ToolResultsTurn,
    ToolSpec,
    ToolsUnsupported,
    UserTurn,
)
from worker.providers.shared import TextLines, TextSink, arguments, tool_call_in_content

__all__ = [
    "OllamaProvider",
    "TextLines",
    "merge_chunks",
    "parse_chat",
    "render",
    "tool_call_in_content",
]

CONNECT_TIMEOUT = 5.0


class OllamaProvider:
    name = "ollama"
    premium = False

    def __init__(
        self,
        base_url: str,
        *,
        context_tokens: int,
        web: webclient.WebClient | None = None,
        on_text: TextSink | None = None,
        trust: Trust | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        # Who may listen on this machine where its URL lands (worker/connector.py).
        self.trust = trust if trust is not None else ollama_trust()
        self.context_tokens = context_tokens
        self.web = web if web is not None else webclient.shared()
        self.on_text = on_text

    def complete(
        self,
        conv: Conversation,
        tools: list[ToolSpec],
        *,
        model: str,
        max_tokens: int,
        timeout: float,
    ) -> Reply:
        body: dict[str, Any] = {
            "model": model,
            "messages": render(conv),
            "stream": True,
            # The context size the routine declared (local_context_tokens): Ollama's default
            # is smaller and it silently drops the start of a longer prompt.
            "options": {"num_ctx": self.context_tokens, "num_predict": max_tokens},
        }
        if tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                }
                for t in tools
            ]
        data = self._post(body, model, timeout)
        return parse_chat(data, model=model, tool_names={t.name for t in tools})

    def _post(self, body: dict[str, Any], model: str, timeout: float) -> dict[str, Any]:
        where = f"Ollama at {self.base_url}"
        chunks: list[Any] = []
        lines = TextLines(self.on_text)

        def line(raw: bytes) -> None:
            try:
                chunk = orjson.loads(raw)
            except ValueError:
                chunk = raw  # merge_chunks gives up on it: "not an Ollama chat response"
            chunks.append(chunk)
            lines.feed(_piece(chunk))

        try:
            resp = self.web.post_json(
                self.base_url + "/api/chat",
                body,
                timeout=timeout,
                connect_timeout=min(CONNECT_TIMEOUT, timeout),
                redirects=webclient.Redirects.SAME_HOST,
                on_line=line,
                trust=self.trust,
            )
        except Refused as exc:  # the connector's: it says why and the fix itself
            raise ProviderError(str(exc)) from None
        except webclient.ConnectFailed as exc:
            raise ProviderError(
                f"cannot reach {where} ({exc}): is Ollama running? Start it with "
                "`ollama serve`, or set ollama_url in ~/.vinos/routines/config.toml"
            ) from None
        except webclient.TimedOut:
            pieces = [p for p in map(_piece, chunks) if p]
            if pieces:  # cut while streaming: what arrived is counted (a piece a token)
                raise StoppedMidReply(
                    f"{where} was still answering after {timeout:.0f} s "
                    f"({len(pieces)} tokens received)",
                    output_tokens=len(pieces),
                    text="".join(pieces),
                ) from None
            raise ProviderError(f"{where} did not answer within {timeout:.0f} s") from None
        except webclient.HttpError as exc:
            raise ProviderError(f"{where} failed: {exc}") from None
        finally:
            lines.end()
        return _check(resp, merge_chunks(chunks), model, where)


def _piece(chunk: object) -> str:
    msg = chunk.get("message") if isinstance(chunk, dict) else None
    content = msg.get("content") if isinstance(msg, dict) else None
    return content if isinstance(content, str) else ""


def merge_chunks(chunks: list[Any]) -> Any:
    """Streamed /api/chat lines → the one object a non-streaming call answers (pure).

    Content pieces are joined and tool calls gathered in order; everything else (done_reason,
    the token counts, an `error`) comes from the last line that has it. No lines: None.
    """
    if not chunks:
        return None
    if not all(isinstance(c, dict) for c in chunks):
        return chunks[-1] if len(chunks) == 1 else None
    merged: dict[str, Any] = {}
    content: list[str] = []
    calls: list[Any] = []
    message: dict[str, Any] | None = None
    for chunk in chunks:
        for key, value in chunk.items():
            if key != "message":
                merged[key] = value
        msg = chunk.get("message")
        if isinstance(msg, dict):
            message = {**(message or {}), **msg}
            content.append(_piece(chunk))
            if isinstance(msg.get("tool_calls"), list):
                calls.extend(msg["tool_calls"])
    if message is not None:
        message["content"] = "".join(content)
        if calls:
            message["tool_calls"] = calls
        else:
            message.pop("tool_calls", None)
        merged["message"] = message
    return merged


def _check(resp: webclient.Response, streamed: Any, model: str, where: str) -> dict[str, Any]:
    data: Any
    if resp.body:
        try:
            data = resp.json()
        except ValueError:
            data = None
    else:
        data = streamed
    message = data.get("error") if isinstance(data, dict) else None
    if resp.status >= 400 or message:
        text = str(message or resp.text() or resp.reason)
        if resp.status == 404 and "not found" in text:
            raise ProviderError(
                f'{where} does not have the model "{model}": run `ollama pull {model}`'
            )
        if "does not support tools" in text:
            raise ToolsUnsupported(f'the local model "{model}" does not support tools')
        if "error parsing tool call" in text:
            raise MalformedToolCall(
                f'the local model "{model}" wrote a tool call Ollama could not parse'
            )
        raise ProviderError(f"{where} answered HTTP {resp.status}: {text}")
    if not isinstance(data, dict) or not isinstance(data.get("message"), dict):
        raise ProviderError(f"{where} sent a reply that is not an Ollama chat response")
    return data


def render(conv: Conversation) -> list[dict[str, Any]]:
    """The conversation as Ollama chat messages."""
    out: list[dict[str, Any]] = [{"role": "system", "content": conv.system}]
    for turn in conv.turns:
        if isinstance(turn, UserTurn):
            out.append({"role": "user", "content": turn.text})
        elif isinstance(turn, AssistantTurn):
            r = turn.reply
            if r.provider == "ollama" and isinstance(r.native, dict):
                out.append(r.native)
                continue
            msg: dict[str, Any] = {"role": "assistant", "content": r.text}
            if r.tool_calls:
                msg["tool_calls"] = [
                    {"function": {"name": c.name, "arguments": c.arguments or {}}}
                    for c in r.tool_calls
                ]
            out.append(msg)
        else:
            assert isinstance(turn, ToolResultsTurn)
            for res in turn.results:
                out.append({"role": "tool", "content": res.content, "tool_name": res.call.name})
    return out


def parse_chat(data: dict[str, Any], *, model: str, tool_names: set[str]) -> Reply:
    """A /api/chat response → Reply (pure; `tool_names` are the tools offered)."""
    msg = data["message"]
    content = msg.get("content") if isinstance(msg.get("content"), str) else ""
    calls: list[ToolCall] = []
    malformed: str | None = None
    raw_calls = msg.get("tool_calls") if isinstance(msg.get("tool_calls"), list) else []
    for i, raw in enumerate(raw_calls):
        fn = raw.get("function") if isinstance(raw, dict) else None
        fn = fn if isinstance(fn, dict) else {}
        call_id = str(raw.get("id") or f"call_{i}") if isinstance(raw, dict) else f"call_{i}"
        args, error = arguments(fn.get("arguments"))
        if error:
            malformed = f"tool call arguments failed json.loads(): {error}"
        calls.append(ToolCall(call_id, str(fn.get("name") or ""), args, error))
    if not calls and tool_names:
        found = tool_call_in_content(content, tool_names)
        if found is not None:
            calls.append(found)
            malformed = "the model wrote its tool call as JSON text instead of using tool_calls"
    done = data.get("done_reason")
    stop = Stop.TOOL_USE if calls else Stop.MAX_TOKENS if done == "length" else Stop.END
    native = {"role": "assistant", "content": content}
    if raw_calls:
        native["tool_calls"] = raw_calls
    return Reply(
        text=content,
        tool_calls=tuple(calls),
        stop=stop,
        stop_reason=str(done or "stop"),
        model=str(data.get("model") or model),
        input_tokens=_count(data.get("prompt_eval_count")),
        output_tokens=_count(data.get("eval_count")),
        malformed=malformed,
        provider="ollama",
        native=native,
    )


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
