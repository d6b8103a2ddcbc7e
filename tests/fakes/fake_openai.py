"""A fake OpenAI-compatible server (llama.cpp, LM Studio, vLLM, OpenRouter all speak this):
POST /v1/chat/completions scripted per request.

    with FakeOpenAI([tool_calls(("run_shell", {"command": "date"})), text("Done.")]) as fake:
        ...  # config.toml: [providers.lmstudio] base_url = fake.base_url, local = true
        assert fake.chats[1].body["messages"][-1]["role"] == "tool"

A reply is streamed as the real servers stream it when the request says `"stream": true`:
server-sent events, one `data: {chat.completion.chunk}` line per word or so, tool calls in
pieces (the name first, the arguments split in two), a last chunk with `usage` when
`stream_options.include_usage` is set, then `data: [DONE]`. `text(..., stream=False)` answers
one pretty-printed JSON object even to a streaming request (a server that ignores `stream`).
Errors have OpenAI's shape: `{"error": {"message", "type", "code"}}`. GET /v1/models lists
`models`.

As llama-server does (its build 11434, common/chat.cpp and tools/server): a request whose
assistant message carries a tool call with arguments that are not JSON is answered HTTP 500
"Failed to parse tool call arguments as JSON" before any script entry is taken; `GET /props`
answers `chat_template_caps` (`supports_tools` as `template_tools` says); with `ollama=True`
the server is Ollama's OpenAI-compatible side instead, and `POST /api/show` answers the
model's `capabilities` ("tools" when `template_tools`), while `/props` is a 404.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

from .server import FakeServer, Recorded, Reply, Script

__all__ = [
    "DEFAULT_MODEL",
    "FakeOpenAI",
    "context_exceeded",
    "error",
    "hang",
    "rate_limited",
    "server_error",
    "streamed",
    "text",
    "tool_calls",
]

DEFAULT_MODEL = "qwen2.5-7b-instruct"
_CREATED = 1785000000


class FakeOpenAI(FakeServer):
    scripted = frozenset({("POST", "/v1/chat/completions")})

    def __init__(
        self,
        script: list[Script] | tuple[Script, ...] = (),
        *,
        models: tuple[str, ...] = (DEFAULT_MODEL,),
        template_tools: bool = True,
        ollama: bool = False,
        **kw: Any,
    ) -> None:
        self.models = models
        self.template_tools = template_tools
        self.ollama = ollama
        super().__init__(script, **kw)

    @property
    def base_url(self) -> str:
        """What config.toml's base_url says for this server."""
        return self.url + "/v1"

    @property
    def chats(self) -> list[Recorded]:
        """The POST /v1/chat/completions requests, in order."""
        return self.requests_to("/v1/chat/completions")

    def finish(self, req: Recorded, reply: Reply) -> Reply:
        body = req.body if isinstance(req.body, dict) else {}
        no_stream = reply.headers.get("x-fake-no-stream") == "1"
        if (
            body.get("stream") is True
            and not no_stream
            and reply.status == 200
            and isinstance(reply.body, dict)
            and reply.body.get("object") == "chat.completion"
        ):
            usage = (body.get("stream_options") or {}).get("include_usage") is True
            return streamed(reply, include_usage=usage)
        if no_stream and isinstance(reply.body, dict):
            # One JSON object over several lines, as a server that ignores `stream` sends it.
            headers = {k: v for k, v in reply.headers.items() if k != "x-fake-no-stream"}
            headers["content-type"] = "application/json"
            whole = json.dumps(reply.body, indent=2).encode()
            return replace(reply, body=None, chunks=(whole,), headers=headers)
        return reply

    def exhausted(self, req: Recorded) -> Reply:
        return error(500, f"fake server: script exhausted at {req.method} {req.path}")

    def _answer(self, req: Recorded) -> Reply:
        if (req.method, req.path) in self.scripted and isinstance(req.body, dict):
            bad = unparsable_arguments(req.body)
            if bad is not None:  # refused before the model sees it: no script entry taken
                return error(500, bad, kind="server_error")
        return super()._answer(req)

    def route(self, req: Recorded) -> Reply:
        if req.method == "GET" and req.path == "/v1/models":
            data = [{"id": m, "object": "model", "owned_by": "fake"} for m in self.models]
            return Reply(200, {"object": "list", "data": data})
        if req.method == "GET" and req.path == "/props" and not self.ollama:
            return Reply(200, props(self.template_tools, self.models[0]))
        if req.method == "POST" and req.path == "/api/show" and self.ollama:
            caps = ["completion", "tools"] if self.template_tools else ["completion"]
            return Reply(200, {"details": {"family": "llama"}, "capabilities": caps})
        return error(404, f"Unexpected endpoint or method. ({req.method} {req.path})")


def props(supports_tools: bool, model: str) -> dict[str, Any]:
    """llama-server's `GET /props`, the parts a client reads (build 11434's shape)."""
    caps = {
        "supports_string_content": True,
        "supports_typed_content": False,
        "supports_tools": supports_tools,
        "supports_tool_calls": supports_tools,
        "supports_parallel_tool_calls": False,
        "supports_system_role": True,
    }
    return {
        "default_generation_settings": {"n_ctx": 8192},
        "total_slots": 1,
        "model_alias": model,
        "model_path": f"/models/{model}.gguf",
        "chat_template": "{{ messages }}",
        "chat_template_caps": caps,
        "build_info": "b11434-fake",
    }


def unparsable_arguments(body: dict[str, Any]) -> str | None:
    """llama-server's refusal of a request whose assistant tool call has arguments that are
    not JSON (common/chat.cpp func_args_not_string), or None."""
    for msg in body.get("messages") or ():
        for call in (msg.get("tool_calls") or ()) if isinstance(msg, dict) else ():
            args = (call.get("function") or {}).get("arguments") if isinstance(call, dict) else None
            if isinstance(args, str):
                try:
                    json.loads(args)
                except ValueError as exc:
                    return f"Failed to parse tool call arguments as JSON: [json.exception] {exc}"
    return None


def _completion(
    message: dict[str, Any],
    *,
    model: str,
    finish_reason: str,
    prompt_tokens: int | None,
    completion_tokens: int | None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "chatcmpl-fake1",
        "object": "chat.completion",
        "created": _CREATED,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
    }
    # Some servers send no usage at all: unknown, not zero.
    if prompt_tokens is not None and completion_tokens is not None:
        body["usage"] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
    return body


def _event(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def streamed(reply: Reply, *, include_usage: bool = True) -> Reply:
    """A chat.completion as the servers stream it (see the module docstring)."""
    full = reply.body
    choice = full["choices"][0]
    message = choice["message"]
    head = {
        "id": full["id"],
        "object": "chat.completion.chunk",
        "created": full["created"],
        "model": full["model"],
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    events = [b": keep-alive\n\n", _event(chunk({"role": "assistant", "content": ""}))]
    for word in re.findall(r"\S+\s*|\s+", message.get("content") or ""):
        events.append(_event(chunk({"content": word})))
    for i, call in enumerate(message.get("tool_calls") or ()):
        fn = call["function"]
        first = {
            "index": i,
            "id": call["id"],
            "type": "function",
            "function": {"name": fn["name"], "arguments": ""},
        }
        events.append(_event(chunk({"tool_calls": [first]})))
        args = fn["arguments"]
        half = len(args) // 2
        for piece in (args[:half], args[half:]):
            events.append(
                _event(chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}))
            )
    events.append(_event(chunk({}, choice["finish_reason"])))
    if include_usage and "usage" in full:
        events.append(_event({**head, "choices": [], "usage": full["usage"]}))
    events.append(b"data: [DONE]\n\n")
    headers = {**reply.headers, "content-type": "text/event-stream"}
    return replace(reply, body=None, chunks=tuple(events), headers=headers)


def text(
    content: str,
    *,
    prompt_tokens: int | None = 200,
    completion_tokens: int | None = 80,
    model: str = DEFAULT_MODEL,
    finish_reason: str = "stop",
    stream: bool = True,
    word_delay: float = 0.0,
) -> Reply:
    """A plain assistant reply; streamed (a word every `word_delay` seconds) unless
    `stream=False`."""
    body = _completion(
        {"role": "assistant", "content": content},
        model=model,
        finish_reason=finish_reason,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
    )
    headers = {} if stream else {"x-fake-no-stream": "1"}
    return Reply(200, body, headers=headers, chunk_delay=word_delay)


def tool_calls(
    *calls: tuple[str, Any],
    content: str | None = None,
    prompt_tokens: int | None = 200,
    completion_tokens: int | None = 30,
    model: str = DEFAULT_MODEL,
    stream: bool = True,
) -> Reply:
    """A reply with `message.tool_calls`, each (name, arguments): a dict is sent as its JSON
    string (as OpenAI sends it), a `str` verbatim (so a test can send JSON that is broken)."""
    out = [
        {
            "id": f"call_fake{i}",
            "type": "function",
            "function": {
                "name": name,
                "arguments": args if isinstance(args, str) else json.dumps(args),
            },
        }
        for i, (name, args) in enumerate(calls)
    ]
    body = _completion(
        {"role": "assistant", "content": content, "tool_calls": out},
        model=model,
        finish_reason="tool_calls",
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
    )
    return Reply(200, body, headers={} if stream else {"x-fake-no-stream": "1"})


def error(
    status: int,
    message: str,
    *,
    kind: str = "invalid_request_error",
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> Reply:
    return Reply(
        status,
        {"error": {"message": message, "type": kind, "param": None, "code": code}},
        headers=headers or {},
    )


def rate_limited(
    retry_after: str | None = "1", *, code: str | None = "rate_limit_exceeded"
) -> Reply:
    headers = {"retry-after": retry_after} if retry_after is not None else {}
    return error(
        429, "Rate limit reached for requests", kind="requests", code=code, headers=headers
    )


def server_error(message: str = "The server had an error while processing your request.") -> Reply:
    return error(500, message, kind="server_error")


def context_exceeded(n_ctx: int = 4096) -> Reply:
    """What llama.cpp's server answers for a prompt longer than its context."""
    return error(
        400,
        f"the request exceeds the available context size ({n_ctx} tokens), try increasing it",
        kind="exceed_context_size_error",
    )


def hang(seconds: float = 60.0) -> Reply:
    """A server that accepted the request and never answers (until the test ends)."""
    return Reply(200, {}, delay=seconds)
