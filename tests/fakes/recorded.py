"""Exchanges with a real llama-server, recorded by `make test-models` and replayed by
`make test` (tests/worker/test_worker_llama_replay.py).

`Recorder` is a proxy on 127.0.0.1 in front of the real server: each request is forwarded
(or answered by an injected reply, for a fault the real model cannot be made to write) and
the request and the answer are kept. `save` writes them to a fixture that names the server
build they came from. `Replay` serves a fixture's answers, in order, to the same scenario
run again, and notes every request that differs from the one the real server accepted
(`mismatches`): a client change the real server would see differently fails the replay.

What "differs" means (`request_mismatches`): the method and path; the JSON body's keys; the
values the server acts on (model, stream, stream_options, max_tokens, the tools' names and
schemas); the messages' roles and keys, and every tool call's arguments being JSON (llama-
server answers 500 otherwise). Not the prompt's words, which the product may reword.
"""

from __future__ import annotations

import http.client
import json
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .server import FakeServer, Recorded, Reply

__all__ = ["FIXTURES", "Recorder", "Replay", "load", "request_mismatches", "save"]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "llama"
_ACTED_ON = ("model", "stream", "stream_options", "max_tokens", "tools", "tool_choice")
Inject = Callable[[Recorded, int], Reply | None]  # (request, index among chat requests)


def _exchange(req: Recorded, reply: Reply, data: bytes, injected: bool) -> dict[str, Any]:
    return {
        "method": req.method,
        "path": req.path,
        "request": req.body,
        "status": reply.status,
        "content_type": reply.headers.get("content-type", ""),
        "response": data.decode("utf-8", "replace"),
        "injected": injected,
    }


def _events(data: bytes, content_type: str) -> tuple[bytes, ...]:
    """A server-sent-events body as its events (so a replay streams as the server did)."""
    if not content_type.startswith("text/event-stream"):
        return (data,)
    parts = data.split(b"\n\n")
    return tuple(p + b"\n\n" for p in parts if p.strip())


class Recorder(FakeServer):
    """A recording proxy to `upstream` (e.g. "http://127.0.0.1:8080")."""

    def __init__(self, upstream: str, *, inject: Inject | None = None) -> None:
        self.upstream = urllib.parse.urlsplit(upstream)
        self.inject = inject
        self.exchanges: list[dict[str, Any]] = []
        self._chats = 0
        super().__init__()

    def _answer(self, req: Recorded) -> Reply:
        chat = req.path.endswith("/chat/completions")
        index = self._chats
        if chat:
            self._chats += 1
        injected = self.inject(req, index) if self.inject is not None and chat else None
        if injected is not None:
            data = json.dumps(injected.body).encode() if injected.body is not None else b""
            if injected.chunks:
                data = b"".join(c for c in injected.chunks if isinstance(c, bytes))
            self.exchanges.append(_exchange(req, injected, data, True))
            return injected
        conn = http.client.HTTPConnection(
            self.upstream.hostname or "127.0.0.1", self.upstream.port or 80, timeout=600
        )
        headers = {k: v for k, v in req.headers.items() if k in ("content-type", "authorization")}
        headers |= {k: v for k, v in req.headers.items() if k.startswith(("anthropic", "x-api"))}
        conn.request(req.method, req.path, body=req.raw or None, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        ctype = resp.getheader("content-type") or "application/octet-stream"
        reply = Reply(resp.status, headers={"content-type": ctype})
        self.exchanges.append(_exchange(req, reply, data, False))
        return Reply(resp.status, headers={"content-type": ctype}, chunks=_events(data, ctype))

    def chats(self) -> list[dict[str, Any]]:
        return [e for e in self.exchanges if e["path"].endswith("/chat/completions")]


def save(name: str, exchanges: list[dict[str, Any]], server: dict[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    doc = {"scenario": name, "server": server, "exchanges": exchanges}
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return path


def load(name: str, where: Path = FIXTURES) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((where / f"{name}.json").read_text())
    return doc


def _tools(body: dict[str, Any]) -> Any:
    return [(t.get("function") or {}).get("name") for t in body.get("tools") or ()]


def request_mismatches(recorded: Any, sent: Any) -> list[str]:
    """How `sent` differs from `recorded` in what the real server acts on (see the module
    docstring); [] when it would be taken the same way."""
    if not isinstance(recorded, dict) or not isinstance(sent, dict):
        return [] if recorded == sent else [f"body {sent!r} where {recorded!r} was recorded"]
    out: list[str] = []
    if set(recorded) != set(sent):
        out.append(f"keys {sorted(sent)} where {sorted(recorded)} were recorded")
    for key in _ACTED_ON:
        if key == "tools":
            if recorded.get(key) != sent.get(key):
                out.append(f"tools {_tools(sent)} where {_tools(recorded)} were recorded")
        elif recorded.get(key) != sent.get(key):
            out.append(f"{key} {sent.get(key)!r} where {recorded.get(key)!r} was recorded")
    before, now = recorded.get("messages") or [], sent.get("messages") or []
    if [(m.get("role"), sorted(m)) for m in before] != [(m.get("role"), sorted(m)) for m in now]:
        shape = [(m.get("role"), sorted(m)) for m in now]
        out.append(f"messages {shape} where {[(m.get('role'), sorted(m)) for m in before]}")
    for msg in now:
        for call in msg.get("tool_calls") or ():
            args = (call.get("function") or {}).get("arguments")
            try:
                json.loads(args) if isinstance(args, str) else None
            except ValueError:
                out.append(f"tool call arguments that are not JSON: {args!r}")
    return out


class Replay(FakeServer):
    """Serves a fixture's recorded answers in order; `mismatches` lists each request that
    differs from the recorded one (and any request past the recording)."""

    def __init__(self, fixture: dict[str, Any]) -> None:
        self.fixture = fixture
        self._left = list(fixture["exchanges"])
        self.mismatches: list[str] = []
        super().__init__()

    def _answer(self, req: Recorded) -> Reply:
        if not self._left:
            self.mismatches.append(f"{req.method} {req.path}: not in the recording")
            return Reply(500, {"error": {"message": "replay: past the recording"}})
        ex = self._left.pop(0)
        where = f"{req.method} {req.path} (recorded: {ex['method']} {ex['path']})"
        if (req.method, req.path) != (ex["method"], ex["path"]):
            self.mismatches.append(f"{where}: another endpoint")
        else:
            self.mismatches += [
                f"{where}: {m}" for m in request_mismatches(ex["request"], req.body)
            ]
        data = ex["response"].encode()
        ctype = ex["content_type"] or "application/json"
        return Reply(ex["status"], headers={"content-type": ctype}, chunks=_events(data, ctype))

    @property
    def unused(self) -> int:
        return len(self._left)
