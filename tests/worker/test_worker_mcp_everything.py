"""@modelcontextprotocol/server-everything (npm), the MCP reference servers' test server, as
a routine's server on the real worker in its bwrap sandbox, against the fake Ollama and
Anthropic servers returning scripted tool calls. Its tools return what the other servers'
do not, and held here is what the client makes of each:
- an image goes to Anthropic as an image block and is described to Ollama; other non-text
  content (an embedded blob, resource links) is described, not passed on; an embedded text
  resource and annotated text pass as text;
- a result over 32 KB is cut, and a terminal escape in it reaches no log line raw;
- a long-running tool past the server's timeout_sec is a tool error the model sees, the
  hung server is ended, and the next call starts it again;
- its simulated log notifications between calls are survived;
- its sampling and elicitation tools exist only for clients that advertise those
  capabilities: the worker advertises none (a run has no person to ask and no model budget
  to lend a server), so a whitelisted `trigger-sampling-request` is not offered, and a call
  of it, as of any tool not whitelisted, is refused;
- the server's environment holds no secret; nothing outlives the run.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from tests.fakes import FakeAnthropic, FakeOllama
from tests.fakes import anthropic_replies as A
from tests.fakes import ollama_replies as O
from tests.worker.worker_harness import API_KEY, make_job, marked_processes, mcp_toml, run_worker
from worker.mcptools import RESULT_CAP

pytestmark = [pytest.mark.usefixtures("not_root"), pytest.mark.slow]

ESC = "\x1b[2J\x1b[31m"  # clear the screen, then red: must reach no terminal raw


def _server(everything: Path, timeout_sec: int = 30) -> str:
    argv = json.dumps([str(everything), "stdio"])
    return f'\n[[agent.mcp]]\nname = "ev"\ncommand = {argv}\ntimeout_sec = {timeout_sec}\n'


def _call(tool: str, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return (f"mcp__ev__{tool}", args)


def _answers(chat_messages: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """The bodies of the last `n` tool messages (Ollama's `role: tool`)."""
    tools = [m for m in chat_messages if m["role"] == "tool"]
    return [json.loads(m["content"]) for m in tools[-n:]]


WHITELIST = (
    "mcp:ev/echo",
    "mcp:ev/get-tiny-image",
    "mcp:ev/get-resource-reference",
    "mcp:ev/get-resource-links",
    "mcp:ev/get-annotated-message",
    "mcp:ev/get-structured-content",
    "mcp:ev/toggle-simulated-logging",
    "mcp:ev/trigger-long-running-operation",
    "mcp:ev/trigger-sampling-request",
    "mcp:ev/get-env",
)


def test_everything_on_ollama(
    home: Path, ollama: FakeOllama, everything_server: Path, marker: str
) -> None:
    big = ESC + "y" * (RESULT_CAP + 8 * 1024)
    ollama.add(
        O.tool_calls(
            _call("get-tiny-image", {}),
            _call("get-resource-reference", {"resourceType": "Blob", "resourceId": 2}),
            _call("get-resource-reference", {"resourceType": "Text", "resourceId": 3}),
            _call("get-resource-links", {"count": 2}),
        ),
        O.tool_calls(
            _call("get-annotated-message", {"messageType": "success", "includeImage": True}),
            _call("get-structured-content", {"location": "Chicago"}),
            _call("toggle-simulated-logging", {}),
            _call("echo", {"message": big}),
        ),
        O.tool_calls(
            _call("get-sum", {"a": 1, "b": 2}),  # offered by the server, not whitelisted
            _call("trigger-sampling-request", {"prompt": "hello"}),
            _call("trigger-long-running-operation", {"duration": 600, "steps": 2}),
        ),
        O.tool_calls(_call("echo", {"message": "back"}), _call("get-env", {})),
        O.text("Done."),
    )
    toml = mcp_toml(WHITELIST, _server(everything_server, timeout_sec=5))
    r = run_worker(make_job(home, toml, ollama_url=ollama.url), timeout=120)
    assert r.result.status == "ok", r.stderr

    # Offered: exactly the whitelisted tools the server has (it has no sampling tool for us).
    offered = sorted(t["function"]["name"] for t in ollama.chats[0].body["tools"])
    assert offered == sorted(
        [f"mcp__ev__{e.split('/')[1]}" for e in WHITELIST if "sampling" not in e]
        + ["report_outcome"]
    )
    warns = [e.text for e in r.events_of("warn")]
    assert any("mcp:ev/trigger-sampling-request: the server offers no tool" in w for w in warns)

    image, blob, text, links = _answers(ollama.chats[1].body["messages"], 4)
    # Ollama takes no image in a tool message: the PNG is described, not passed on.
    assert image["images"] == [
        f"image (image/png, about {_png_bytes(image)} bytes), attached where the model takes images"
    ]
    assert "not_passed_on" not in image
    assert "The image above is the MCP logo" in image["content"], image
    assert blob["not_passed_on"] == ["a binary resource demo://resource/dynamic/blob/2"], blob
    assert "Resource 3" in text["content"] and "not_passed_on" not in text, text
    assert links["not_passed_on"] == [
        "a link to the resource demo://resource/dynamic/blob/1",
        "a link to the resource demo://resource/dynamic/text/2",
    ], links

    annotated, structured, logging, echo = _answers(ollama.chats[2].body["messages"], 4)
    # Annotated text passes as text, whatever its audience; its image is described.
    assert annotated["content"] == "Operation completed successfully", annotated
    assert annotated["images"][0].startswith("image (image/png"), annotated
    assert json.loads(structured["content"])["temperature"] is not None, structured
    assert "logging" in logging["content"].lower() and "error" not in logging, logging
    assert echo["truncated"] is True and "cut at 32 KB" in echo["note"]
    assert len(echo["content"].encode()) <= RESULT_CAP
    assert echo["content"].startswith("Echo: " + ESC)  # the model gets what the server said

    not_listed, sampling, hung = _answers(ollama.chats[3].body["messages"], 3)
    assert not_listed["error"].startswith("refused"), not_listed
    assert sampling["error"].startswith("refused"), sampling
    assert "no answer to tools/call within 5 s" in hung["error"], hung

    # The hung server was ended; the next call started it again (log notifications of the
    # first one's simulated logging did not break the session meanwhile).
    back, env = _answers(ollama.chats[4].body["messages"], 2)
    assert back["content"] == "Echo: back", back
    assert any(w.startswith("MCP server ev: restarted (1 of 2) after it hung") for w in warns)
    names = set(json.loads(env["content"]))
    # What the sandbox passes, and what a shell on the way in sets for itself: no more.
    assert (
        {"HOME", "LANG", "PATH", "TERM"}
        <= names
        <= {"HOME", "LANG", "PATH", "TERM", "PWD", "SHLVL"}
    ), names

    # The escape reached no log line raw: not the run log, not an event's text or preview.
    assert "\x1b" not in r.stderr
    for event in r.events_of("tool_call") + r.events_of("tool_result"):
        assert "\x1b" not in event.text and "\x1b" not in json.dumps(event.data, ensure_ascii=False)
    assert r.result.tool_calls == 11  # 13 calls; the two refused ones are not counted
    assert marked_processes(marker) == []


def _png_bytes(answer: dict[str, Any]) -> str:
    """The size the description gives (checked to be the format's own, not asserted blind)."""
    note = answer["images"][0]
    size: str = note.split("about ")[1].split(" bytes")[0]
    assert int(size.replace(",", "")) > 100, note
    return size


def test_everything_on_anthropic(
    home: Path,
    claude: FakeAnthropic,
    env: dict[str, str],
    everything_server: Path,
    marker: str,
) -> None:
    claude.add(
        A.tool_use(
            _call("get-tiny-image", {}),
            _call("get-sum", {"a": 2, "b": 3}),
            _call("echo", {"message": "x" * (RESULT_CAP * 2)}),
        ),
        A.text("Done."),
    )
    toml = mcp_toml(
        ("mcp:ev/get-tiny-image", "mcp:ev/echo"), _server(everything_server), route="anthropic"
    )
    r = run_worker(make_job(home, toml), env=env, timeout=120)
    assert r.result.status == "ok", r.stderr
    offered = [t["name"] for t in claude.messages[0].body["tools"]]
    assert offered == ["mcp__ev__get-tiny-image", "mcp__ev__echo", "report_outcome"]
    schema = claude.messages[0].body["tools"][1]["input_schema"]
    assert "message" in schema["properties"]  # the server's own schema
    image, refused, echo = claude.messages[1].body["messages"][-1]["content"]
    assert image["type"] == "tool_result" and not image.get("is_error")
    # The Messages API takes images in a tool result: the PNG goes on as an image block,
    # after the text (which describes it, for a route that cannot).
    text, png = image["content"]
    assert json.loads(text["text"])["images"][0].startswith("image (image/png")
    assert png["type"] == "image" and png["source"]["media_type"] == "image/png"
    assert base64.b64decode(png["source"]["data"]).startswith(b"\x89PNG")
    assert refused["is_error"] and "refused" in json.loads(refused["content"])["error"]
    body = json.loads(echo["content"])
    assert body["truncated"] is True and len(body["content"].encode()) == RESULT_CAP
    assert r.result.tools_used == ["mcp:ev/get-tiny-image", "mcp:ev/echo"]
    for line in r.stderr.splitlines():
        assert API_KEY not in line
    assert marked_processes(marker) == []
