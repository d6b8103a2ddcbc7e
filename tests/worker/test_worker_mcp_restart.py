"""A run's MCP server that dies is started again at its next call, a bounded number of
times (worker/mcptools.py, may_restart), with a log line each time; one that keeps dying
stays a tool error the model sees. Held on the real worker with mcp-server-time (PyPI) in
its bwrap sandbox, killed by pid from the test between the model's turns.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fakes import FakeOllama
from tests.fakes import ollama_replies as O
from tests.fakes.server import Recorded, Reply
from tests.worker.worker_harness import (
    make_job,
    marked_processes,
    mcp_toml,
    run_worker,
    time_server,
)
from worker.mcptools import MAX_RESTARTS, Lost, may_restart


@pytest.mark.parametrize(
    ("lost", "restarts", "again"),
    [
        (Lost.DIED, 0, True),
        (Lost.DIED, MAX_RESTARTS - 1, True),
        (Lost.DIED, MAX_RESTARTS, False),
        (Lost.HUNG, 0, True),
        (Lost.HUNG, MAX_RESTARTS, False),
        (Lost.START, 0, False),  # it would fail to start again
        (Lost.QUOTA, 0, False),  # a restart would only write on
    ],
)
def test_which_lost_server_starts_again(lost: Lost, restarts: int, again: bool) -> None:
    assert may_restart(lost, restarts) is again


def _kill_server(marker: str) -> None:
    """SIGKILL the server process itself (not bwrap), then wait for its sandbox to be gone."""
    pids = [
        pid
        for pid in marked_processes(marker, also="mcp-server-time")
        if not Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].endswith(b"bwrap")
    ]
    assert pids, "the server was not running"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    until = time.monotonic() + 30
    while marked_processes(marker, also="mcp-server-time"):
        assert time.monotonic() < until, "the killed server's sandbox did not end"
        time.sleep(0.05)


def _killing_then(marker: str, reply: Reply) -> Callable[[Recorded], Reply]:
    def kill(req: Recorded) -> Reply:
        _kill_server(marker)
        return reply

    return kill


@pytest.mark.usefixtures("not_root")
def test_an_error_the_server_answers_keeps_its_session(home: Path) -> None:
    """A JSON-RPC error from a running server (mcp-server-time: an unknown tool is -32602)
    is that request's failure, flagged `answered`: McpTools keeps the session for the next
    call instead of losing the server."""
    from routines.spec.config import SandboxSettings
    from routines.spec.loader import load_text
    from routines.spec.paths import paths
    from worker.mcpclient import McpFailure, Portal
    from worker.mcptools import server_policy, start_server

    toml = mcp_toml(("mcp:time/get_current_time",), time_server())
    routine = load_text(toml, home / "routines" / "day-brief.toml", check_schedule=False)
    assert routine.agent is not None
    p = paths()
    policy, argv = server_policy(
        routine,
        routine.agent.mcp[0],
        paths=p,
        scratch_dir=p.run_scratch(routine.name, "answered"),
        settings=SandboxSettings(),
    )
    portal = Portal()
    session = start_server(argv, policy, portal=portal, timeout=30.0)
    try:
        with pytest.raises(McpFailure) as failed:
            session.call_tool("no_such_tool", {}, 30.0)
        assert failed.value.answered and not failed.value.hung, failed.value
        assert "Unknown tool: no_such_tool" in str(failed.value)
        result = session.call_tool("get_current_time", {"timezone": "UTC"}, 30.0)
        assert not result.is_error and session.child.running()
    finally:
        session.close()
        portal.close()
    assert not session.child.running()


@pytest.mark.slow
@pytest.mark.usefixtures("not_root")
def test_a_killed_server_restarts_at_its_next_call_until_the_bound(
    home: Path, ollama: FakeOllama, marker: str
) -> None:
    def call(zone: str) -> Reply:
        return O.tool_calls(("mcp__time__get_current_time", {"timezone": zone}))

    zones = ["Asia/Tokyo", "Europe/Paris", "America/Lima"]
    ollama.add(
        call("UTC"),
        *(_killing_then(marker, call(z)) for z in zones),
        O.text("Done."),
    )
    toml = mcp_toml(("mcp:time/get_current_time",), time_server())
    r = run_worker(make_job(home, toml, ollama_url=ollama.url), timeout=120)
    assert r.result.status == "ok", r.stderr
    answers = [json.loads(c.body["messages"][-1]["content"]) for c in ollama.chats[1:]]
    assert json.loads(answers[0]["content"])["timezone"] == "UTC"
    # Killed between turns: each of the next MAX_RESTARTS calls starts it again and is
    # answered; the one after that is refused, saying it kept dying.
    for answer, zone in zip(answers[1:3], zones, strict=False):
        assert json.loads(answer["content"])["timezone"] == zone, answer
    last = answers[3]["error"]
    assert "is unavailable" in last and "it exited between calls" in last, last
    assert f"restarted {MAX_RESTARTS} time(s) already" in last, last
    warns = [e.text for e in r.events_of("warn")]
    restarted = [w for w in warns if w.startswith("MCP server time: restarted")]
    assert [w.split(" after ")[0] for w in restarted] == [
        "MCP server time: restarted (1 of 2)",
        "MCP server time: restarted (2 of 2)",
    ]
    assert len([e for e in r.events_of("log") if e.text == "MCP server time: started"]) == 3
    assert r.result.tool_calls == 4
    assert marked_processes(marker) == []
