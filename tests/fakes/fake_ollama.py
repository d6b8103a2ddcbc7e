"""A fake Ollama server: POST /api/chat (with tools) scripted per request.

    with FakeOllama([tool_calls(("run_shell", {"command": "date"})), text("Done.")]) as fake:
        job = make_job(..., ollama_url=fake.url)
        ...
        assert fake.chats[1].body["messages"][-1]["role"] == "tool"

GET /api/tags, POST /api/show and GET /api/version answer from `models` (not scripted).
A chat reply is streamed as Ollama streams it when the request asks (`"stream"` true or
absent, Ollama's default): NDJSON over chunked transfer, the content a word or so a line, tool
calls in one line, then a `"done": true` line with the counts; `text(..., word_delay=)` makes
a slow model. Replies have Ollama's shapes, including its errors: 404 `model "x" not found,
try pulling it first`, 400 `... does not support tools`, and 500 `error parsing tool call`.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

from .server import FakeServer, Recorded, Reply, Script

__all__ = [
    "FakeOllama",
    "content_tool_call",
    "does_not_support_tools",
    "error",
    "model_not_found",
    "streamed",
    "text",
    "tool_call_parse_error",
    "tool_calls",
]

DEFAULT_MODEL = "llama3.2:3b"
_CREATED = "2026-07-25T10:00:00.000000Z"


class FakeOllama(FakeServer):
    scripted = frozenset({("POST", "/api/chat")})

    def __init__(
        self,
        script: list[Script] | tuple[Script, ...] = (),
        *,
        models: tuple[str, ...] = (DEFAULT_MODEL, "llama3.1:8b", "qwen2.5:7b"),
        **kw: Any,
    ) -> None:
        self.models = models
        super().__init__(script, **kw)

    def finish(self, req: Recorded, reply: Reply) -> Reply:
        body = req.body if isinstance(req.body, dict) else {}
        if (
            req.path == "/api/chat"
            and body.get("stream", True) is not False
            and reply.status == 200
            and isinstance(reply.body, dict)
            and isinstance(reply.body.get("message"), dict)
        ):
            return streamed(reply)
        return reply

    @property
    def chats(self) -> list[Recorded]:
        """The POST /api/chat requests, in order."""
        return self.requests_to("/api/chat")

    def route(self, req: Recorded) -> Reply:
        if req.method == "GET" and req.path == "/api/tags":
            return Reply(200, {"models": [_model_entry(m) for m in self.models]})
        if req.method == "GET" and req.path == "/api/version":
            return Reply(200, {"version": "0.12.6"})
        if req.method == "POST" and req.path == "/api/show":
            name = (req.body or {}).get("model") or (req.body or {}).get("name")
            if name not in self.models:
                return error(404, f"model '{name}' not found")
            return Reply(
                200,
                {
                    "modelfile": "",
                    "details": {"family": "llama", "parameter_size": "3.2B"},
                    "model_info": {"llama.context_length": 131072},
                    "capabilities": ["completion", "tools"],
                },
            )
        if req.method == "GET" and req.path == "/":
            return Reply(200, "Ollama is running")
        return Reply(404, "404 page not found")


def _model_entry(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "model": name,
        "modified_at": _CREATED,
        "size": 2019393189,
        "digest": "a80c4f17acd5" + "0" * 52,
        "details": {"format": "gguf", "family": "llama", "parameter_size": "3.2B"},
    }


def _chat(
    message: dict[str, Any],
    *,
    model: str,
    prompt_eval_count: int | None,
    eval_count: int | None,
    done_reason: str = "stop",
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "created_at": _CREATED,
        "message": message,
        "done_reason": done_reason,
        "done": True,
        "total_duration": 885095291,
        "load_duration": 3753500,
        "prompt_eval_duration": 328493000,
        "eval_duration": 552222000,
    }
    # Ollama leaves these out when it has nothing to report (e.g. the prompt came from its
    # cache): a missing count is unknown, not zero.
    if prompt_eval_count is not None:
        body["prompt_eval_count"] = prompt_eval_count
    if eval_count is not None:
        body["eval_count"] = eval_count
    return body


def streamed(reply: Reply) -> Reply:
    """A non-streaming chat reply as Ollama streams it (see the module docstring)."""
    final = dict(reply.body)
    message = final.pop("message")
    head = {"model": final["model"], "created_at": final["created_at"]}
    words = re.findall(r"\S+\s*|\s+", message.get("content") or "")
    lines = [{**head, "message": {"role": "assistant", "content": w}, "done": False} for w in words]
    if message.get("tool_calls"):
        lines.append(
            {
                **head,
                "message": {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": message["tool_calls"],
                },
                "done": False,
            }
        )
    lines.append({**final, "message": {"role": "assistant", "content": ""}, "done": True})
    chunks = tuple(json.dumps(line).encode() + b"\n" for line in lines)
    return replace(reply, body=None, chunks=chunks)


def text(
    content: str,
    *,
    prompt_eval_count: int | None = 200,
    eval_count: int | None = 80,
    model: str = DEFAULT_MODEL,
    delay: float = 0.0,
    word_delay: float = 0.0,
) -> Reply:
    """A plain assistant reply; streamed, a word every `word_delay` seconds."""
    message = {"role": "assistant", "content": content}
    return Reply(
        200,
        _chat(message, model=model, prompt_eval_count=prompt_eval_count, eval_count=eval_count),
        delay=delay,
        chunk_delay=word_delay,
    )


def tool_calls(
    *calls: tuple[str, Any],
    content: str = "",
    arguments_as_string: bool = False,
    prompt_eval_count: int | None = 200,
    eval_count: int | None = 30,
    model: str = DEFAULT_MODEL,
) -> Reply:
    """A reply with `message.tool_calls`; each call is (name, arguments).

    Arguments are sent as a JSON object (what Ollama sends) or, with `arguments_as_string`,
    as a JSON string (what OpenAI-style proxies send); a `str` argument is sent verbatim, so
    a test can send arguments that are not valid JSON.
    """
    out = []
    for i, (name, args) in enumerate(calls):
        if isinstance(args, str):
            sent: Any = args
        elif arguments_as_string:
            sent = json.dumps(args)
        else:
            sent = args
        out.append(
            {"id": f"call_fake{i}", "function": {"index": i, "name": name, "arguments": sent}}
        )
    message = {"role": "assistant", "content": content, "tool_calls": out}
    return Reply(
        200,
        _chat(message, model=model, prompt_eval_count=prompt_eval_count, eval_count=eval_count),
    )


def content_tool_call(name: str, parameters: dict[str, Any], *, fenced: bool = False) -> Reply:
    """A small model writing its tool call as JSON text in `content` (llama3.2:3b does)."""
    raw = json.dumps({"name": name, "parameters": parameters})
    return text(f"```json\n{raw}\n```" if fenced else raw, eval_count=25)


def error(status: int, message: str) -> Reply:
    """An Ollama error: `{"error": "..."}`."""
    return Reply(status, {"error": message})


def model_not_found(model: str = DEFAULT_MODEL) -> Reply:
    return error(404, f'model "{model}" not found, try pulling it first')


def does_not_support_tools(model: str = "gemma:2b") -> Reply:
    return error(400, f"registry.ollama.ai/library/{model} does not support tools")


def tool_call_parse_error() -> Reply:
    """What Ollama answers when the model's tool-call JSON does not parse."""
    return error(
        500,
        'error parsing tool call: raw=\'{"name": "run_shell", "parameters": {"command": \', '
        "err=unexpected end of JSON input",
    )
