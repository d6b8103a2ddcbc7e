"""The workspace quota holds while an MCP server runs (worker/mcpquota.py): over
`max_workspace_mb` after a call, that call is a tool error naming the quota and the server
is ended for the run; over it between calls, the poll ends the server and the next call
says why. Held with @modelcontextprotocol/server-filesystem (npm) serving the routine's
workspace, in its bwrap sandbox, on the real worker.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import msgspec
import pytest

from sandbox.limits import MiB
from tests.fakes import FakeOllama
from tests.fakes import ollama_replies as O
from tests.fakes.server import Recorded, Reply
from tests.worker.worker_harness import make_job, marked_processes, mcp_toml, run_worker

pytestmark = [pytest.mark.usefixtures("not_root"), pytest.mark.slow]


def _workspace(home: Path) -> Path:
    ws = home / "routines" / "workspace" / "day-brief"
    ws.mkdir(parents=True, exist_ok=True)
    return ws


def _toml(fs_server: Path, workspace: Path) -> str:
    server = f'\n[[agent.mcp]]\nname = "files"\ncommand = ["{fs_server}", "{workspace}"]\n'
    return mcp_toml(("mcp:files/write_file", "mcp:files/read_text_file"), server)


def test_a_call_that_takes_the_workspace_over_its_quota_is_an_error_and_ends_the_server(
    home: Path, ollama: FakeOllama, fs_server: Path, marker: str
) -> None:
    ws = _workspace(home)
    (ws / "kept.bin").write_bytes(b"k" * MiB)  # 1 of the 2 MB used before the run
    (ws / "note.md").write_text("hello\n")
    ollama.add(
        O.tool_calls(
            (
                "mcp__files__write_file",
                {"path": str(ws / "big.txt"), "content": "x" * (MiB * 3 // 2)},
            )
        ),
        O.tool_calls(("mcp__files__read_text_file", {"path": str(ws / "note.md")})),
        O.text("Full."),
    )
    job = msgspec.structs.replace(
        make_job(home, _toml(fs_server, ws), ollama_url=ollama.url),
        sandbox={"max_workspace_mb": 2},
    )
    r = run_worker(job, timeout=120)
    assert r.result.status == "ok", r.stderr
    wrote = json.loads(ollama.chats[1].body["messages"][-1]["content"])
    assert "went over the quota" in wrote["error"], wrote
    assert "max_workspace_mb = 2" in wrote["error"], wrote
    # Ended for the run, not restarted: a restart would only write on.
    again = json.loads(ollama.chats[2].body["messages"][-1]["content"])
    assert "is unavailable" in again["error"] and "max_workspace_mb = 2" in again["error"], again
    starts = [e for e in r.events_of("log") if e.text == "MCP server files: started"]
    assert len(starts) == 1
    assert marked_processes(marker) == []


def test_the_poll_ends_a_server_whose_dirs_go_over_the_quota_between_calls(
    home: Path, ollama: FakeOllama, fs_server: Path, marker: str
) -> None:
    ws = _workspace(home)
    (ws / "note.md").write_text("hello\n")

    def fill_then_call(req: Recorded) -> Reply:
        # Between calls the server's writable dirs go over the quota (the test writes there,
        # standing in for a server writing in the background): the poll, not a call, must
        # end the server. Its sandbox is gone within seconds (POLL_SEC, then the kill).
        (ws / "grown.bin").write_bytes(b"g" * (2 * MiB))
        until = time.monotonic() + 30
        while marked_processes(marker, also="node"):
            assert time.monotonic() < until, "the poll did not end the server"
            time.sleep(0.1)
        return O.tool_calls(("mcp__files__read_text_file", {"path": str(ws / "note.md")}))

    ollama.add(
        O.tool_calls(("mcp__files__read_text_file", {"path": str(ws / "note.md")})),
        fill_then_call,
        O.text("Stopped."),
    )
    job = msgspec.structs.replace(
        make_job(home, _toml(fs_server, ws), ollama_url=ollama.url),
        sandbox={"max_workspace_mb": 1},
    )
    r = run_worker(job, timeout=120)
    assert r.result.status == "ok", r.stderr
    first = json.loads(ollama.chats[1].body["messages"][-1]["content"])
    assert first["content"] == "hello\n", first
    second = json.loads(ollama.chats[2].body["messages"][-1]["content"])
    assert "went over the quota" in second["error"], second
    assert "max_workspace_mb = 1" in second["error"], second
    warns = [e.text for e in r.events_of("warn")]
    assert any("MCP server files: its writable dirs went over the quota" in w for w in warns)
    assert marked_processes(marker) == []
