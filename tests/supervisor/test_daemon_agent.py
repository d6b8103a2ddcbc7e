"""Agent routines through a real daemon, against the fake Anthropic server (a real HTTP server
on 127.0.0.1 that the real `anthropic` SDK in the worker talks to):

- the daemon process itself never loads `anthropic`, `httpx2` (nor `httpx`) or `worker`
  (it runs all day; agent code must not share its process), checked three ways on the live process:
  its own `ping` report, the shared objects mapped into it (/proc/PID/maps: the SDK's compiled
  dependencies), and `python -X importtime`, which logs every module the daemon imported;
- the budget backstop (point 9) ends a worker that keeps calling after its allowance.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes import FakeAnthropic, Recorded, Reply
from tests.fakes import anthropic_replies as A
from tests.supervisor.daemonkit import (
    REPO,
    DaemonProcess,
    command_routine,
    rows,
    state,
    write_routine,
)

pytestmark = pytest.mark.slow  # real daemons: make test-fast leaves these out

API_KEY = "sk-ant-test-0123456789"


def agent_routine(max_dollars: float = 5.0) -> str:
    return f"""[routine]
description = "an agent routine"
enabled = false

[schedule]
cron = "0 6 * * *"
timezone = "UTC"

[agent]
route = "anthropic"
system = "You look around and report."
tools = []

[budget]
max_dollars_per_day = {max_dollars}
"""


@pytest.fixture
def claude() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as fake:
        yield fake


def provider_env(claude: FakeAnthropic) -> dict[str, str]:
    return {"ANTHROPIC_BASE_URL": claude.url, "ANTHROPIC_API_KEY": API_KEY}


def imported_modules(log: str) -> set[str]:
    """Top-level names of the modules `python -X importtime` reported importing."""
    names = set()
    for line in log.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name and name != "imported package":
                names.add(name.split(".")[0])
    return names


def test_the_daemon_never_loads_anthropic_httpx2_or_worker(
    tmp_path: Path, not_root: None, claude: FakeAnthropic
) -> None:
    claude.add(A.text("# Report\n\nAll quiet today."))
    write_routine("looker", agent_routine())
    write_routine("cmd", command_routine("echo hi", enabled=False))
    d = DaemonProcess(tmp_path, python_flags=["-X", "importtime"], extra_env=provider_env(claude))
    d.start()
    fin = d.request("run", {"name": "looker"})
    assert fin["status"] == "ok", fin
    assert len(claude.messages) == 1  # the SDK really ran, in the worker
    assert d.request("run", {"name": "cmd"})["status"] == "ok"
    d.request("status")
    d.request("reload")

    assert d.request("ping")["loaded_modules"] == []  # nor psycopg: no [fleet]
    maps = Path(f"/proc/{d.pid}/maps").read_text()
    assert "_sqlite3" in maps  # the check sees the daemon's compiled modules …
    for lib in ("pydantic_core", "jiter"):  # … and none of the SDK's
        assert lib not in maps
    assert d.stop() == 0

    modules = imported_modules(d.log())
    assert {"supervisor", "routines", "ipc", "psutil", "sqlite3"} <= modules  # the log works
    never = {"anthropic", "openai", "httpx2", "httpcore2", "httpx", "httpcore", "pydantic"}
    never |= {"worker", "mcp"}
    assert not modules & (never | {"sandbox"})


def test_the_budget_backstop_ends_a_worker_that_keeps_calling(
    tmp_path: Path, not_root: None, claude: FakeAnthropic
) -> None:
    release = threading.Event()

    def held(req: Recorded) -> Reply:  # a third call, if it comes, waits here
        release.wait(60)
        return A.text("too late")

    # Each call costs 10,000 input tokens of claude-sonnet-4-6 ($0.03): the first already
    # passes the $0.01 allowance, so any later call is past it.
    call = A.tool_use(("read_files", {"glob": "/etc/hostname"}), input_tokens=10_000)
    claude.add(call, call, held, call, call)
    write_routine("spender", agent_routine(max_dollars=0.01))
    rogue = [sys.executable, "-P", str(REPO / "tests/supervisor/rogue_worker.py")]
    d = DaemonProcess(tmp_path, worker_argv=rogue, extra_env=provider_env(claude)).start()
    events: list[Any] = []
    try:
        with d.client() as c:
            fin = c.request("run", {"name": "spender"}, on_event=events.append)
    finally:
        release.set()
    assert (fin["status"], fin["detail"]) == (
        "budget",
        "stopped by the supervisor: the run spent past its allowance",
    )
    warns = [e.text for e in events if e.kind == "warn"]
    assert any(w.startswith("budget backstop: spent $0.06") for w in warns), warns
    assert 2 <= len(claude.messages) <= 3  # ended at the second call, not the tenth
    [row] = rows("spender")
    assert row.status == "budget" and row.input_tokens == 20_000
    assert row.dollars == pytest.approx(0.06, abs=0.001)
    assert state("spender").failure_streak == 0  # budget is not a strike
    assert d.workers() == []
    assert d.stop() == 0
