"""Run `python -m worker` for real: build a Job, write it to the worker's stdin, read every
message it sends on stdout. Used by the worker tests (and usable by the supervisor's)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ipc import Event, Hello, Job, LineReader, Message, Result, Usage, encode
from routines.runs import Trigger
from tests.worker.forked import run_forked

REPO = Path(__file__).resolve().parents[2]
STARTED = "2026-07-25T06:00:00-04:00"
API_KEY = "sk-ant-test-0123456789"  # a fake key: the fake server takes any


def routine_toml(
    *,
    system: str = "You write the user's morning brief.",
    route: str = "ollama",
    tools: tuple[str, ...] = (),
    memory: str = "session",
    extra_agent: str = "",
    escalation: str = "",
    budget: str = "",
    output: str = "",
    tags: tuple[str, ...] = (),
) -> str:
    """An agent routine's TOML with the given pieces."""
    tool_lines = ", ".join(_q(t) for t in tools)
    tag_lines = ", ".join(_q(t) for t in tags)
    text = f"""
        [routine]
        description = "test routine"

        [schedule]
        cron = "0 6 * * *"
        timezone = "America/New_York"

        [agent]
        route = "{route}"
        system = {_q(system)}
        tools = [{tool_lines}]
        memory = "{memory}"
        tags = [{tag_lines}]
        {extra_agent}
        """
    text = textwrap.dedent(text)
    if escalation:
        text += "\n[agent.escalation]\n" + textwrap.dedent(escalation)
    text += "\n[budget]\n" + (textwrap.dedent(budget) or "max_dollars_per_day = 5.0\n")
    if output:
        text += "\n[output]\n" + textwrap.dedent(output)
    return text


def command_toml(run: str, *, timeout_sec: int = 30, output: str = "") -> str:
    text = f"""
        [routine]
        kind = "command"

        [schedule]
        every = "every day at 7:00"
        timezone = "UTC"

        [command]
        run = {_q(run)}
        timeout_sec = {timeout_sec}
        """
    text = textwrap.dedent(text)
    if output:
        text += "\n[output]\n" + textwrap.dedent(output)
    return text


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def make_job(
    home: Path,
    toml: str,
    *,
    name: str = "day-brief",
    ollama_url: str = "http://127.0.0.1:9",
    run_id: str = "run-1",
    memory: str = "",
    memory_path: Path | None = None,
    max_tokens: int | None = None,
    dollars_left: float | None = 5.0,
    pricing: dict[str, list[float]] | None = None,
    started_at: str = STARTED,
) -> Job:
    state = home / "routines" / "state" / name
    scratch = state / ".scratch" / run_id
    scratch.mkdir(parents=True, exist_ok=True)
    return Job(
        run_id=run_id,
        routine_name=name,
        routine_path=str(home / "routines" / f"{name}.toml"),
        routine_toml=toml,
        routine_origin="user",
        trigger=Trigger.MANUAL,
        slot=None,
        started_at=started_at,
        max_tokens=max_tokens,
        dollars_left=dollars_left,
        memory=memory,
        vinos_home=str(home),
        state_dir=str(state),
        scratch_dir=str(scratch),
        memory_path=None if memory_path is None else str(memory_path),
        ollama_url=ollama_url,
        pricing=pricing or {},
        sandbox={},
    )


@dataclass
class WorkerRun:
    returncode: int
    messages: list[Message]
    stderr: str
    job: Job | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def result(self) -> Result:
        results = [m for m in self.messages if isinstance(m, Result)]
        assert len(results) == 1, f"expected one result, got {results}\nstderr:\n{self.stderr}"
        assert self.messages[-1] is results[0], "the result must be the last message"
        return results[0]

    @property
    def events(self) -> list[Event]:
        return [m for m in self.messages if isinstance(m, Event)]

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]

    def events_of(self, kind: str) -> list[Event]:
        return [e for e in self.events if e.kind == kind]

    @property
    def usages(self) -> list[Usage]:
        return [m for m in self.messages if isinstance(m, Usage)]

    def total(self, attr: str) -> float:
        return float(sum(getattr(u, attr) for u in self.usages))

    def output(self) -> str:
        assert self.job is not None and self.result.output_file
        return (Path(self.job.scratch_dir) / self.result.output_file).read_text()


def worker_env(**extra: str | None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("ANTHROPIC_API_KEY", None)
    env.pop("ANTHROPIC_BASE_URL", None)
    env.pop("OLLAMA_HOST", None)
    for k, v in extra.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def spawn(env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
        env=env if env is not None else worker_env(),
    )


def run_worker(
    job: Job | None,
    *,
    env: dict[str, str] | None = None,
    stdin: bytes | None = None,
    timeout: float = 60,
) -> WorkerRun:
    """Send Hello + job (or raw `stdin`), wait for the worker, parse all it wrote."""
    if stdin is None:
        assert job is not None
        stdin = encode(Hello()) + encode(job)
    # Forked, as the daemon's runs are: the SDKs imported once a test process, not each run.
    code, out, err = run_forked(stdin, env if env is not None else worker_env(), REPO, timeout)
    reader = LineReader(io.BytesIO(out))
    messages: list[Message] = []
    while (m := reader.read()) is not None:
        messages.append(m)
    assert messages and isinstance(messages[0], Hello), f"no hello first: {messages[:1]}"
    return WorkerRun(code, messages[1:], err.decode(errors="replace"), job)


# --- MCP servers as a routine's tools (tests/worker/test_worker_mcp*.py) ---

TIME = str(Path(sys.executable).parent / "mcp-server-time")  # from the test extra (PyPI)


def time_server(name: str = "time", extra: str = "") -> str:
    """An `[[agent.mcp]]` table running mcp-server-time."""
    argv = json.dumps([TIME, "--local-timezone", "UTC"])
    return f'\n[[agent.mcp]]\nname = "{name}"\ncommand = {argv}\n{extra}'


def mcp_toml(
    tools: tuple[str, ...], servers: str, route: str = "ollama", extra_agent: str = ""
) -> str:
    """routine_toml with `servers` ([[agent.mcp]] tables) after [agent]'s own keys."""
    text = routine_toml(route=route, tools=tools, extra_agent=extra_agent)
    head, sep, budget = text.partition("\n[budget]\n")
    return head + servers + sep + budget


def marked_processes(marker: str, also: str = "") -> list[int]:
    """Our processes whose environment holds `marker` (a PATH entry of the test's own, which
    the worker passes to bwrap and each server) and whose command line holds `also`."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue  # gone, or a zombie
        if marker.encode() in environ and also.encode() in cmdline:
            out.append(int(entry))
    return out
