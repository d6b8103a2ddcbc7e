"""MCP servers as a routine's tools, end to end: the real worker, real servers from PyPI
(mcp-server-time, mcp-server-git, installed by the test extra) and npm
(@modelcontextprotocol/server-filesystem, installed into a tmp prefix), each in the
routine's bwrap sandbox, against the fake Anthropic, Ollama and OpenAI-compatible servers.

Held here: only whitelisted tools are offered, with the server's own schemas; any other
call is refused; a server sees only its declared `home`; a server that fails to start or is
killed mid-call is a tool error and the run goes on; nothing outlives the run; a run
without MCP never imports the SDK.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from tests.fakes import FakeAnthropic, FakeOllama, FakeOpenAI
from tests.fakes import anthropic_replies as A
from tests.fakes import ollama_replies as O
from tests.fakes import openai_replies as OA
from tests.fakes.server import Recorded, Reply
from tests.worker.worker_harness import (
    API_KEY,
    TIME,
    make_job,
    marked_processes,
    mcp_toml,
    routine_toml,
    run_worker,
    time_server,
    worker_env,
)

# Every test marks its processes (`marker`), so none sees a parallel test's.
pytestmark = pytest.mark.usefixtures("not_root", "marker")

BIN = Path(sys.executable).parent
GIT = str(BIN / "mcp-server-git")


def _servers(*blocks: str) -> str:
    return "".join(textwrap.dedent(b) for b in blocks)


# --- offering and calling, both routes ---


def test_anthropic_is_offered_only_the_whitelisted_tool_with_the_servers_schema(
    home: Path, claude: FakeAnthropic, env: dict[str, str]
) -> None:
    claude.add(
        A.tool_use(("mcp__time__get_current_time", {"timezone": "Europe/Paris"})),
        A.text("It is morning in Paris."),
    )
    toml = mcp_toml(("mcp:time/get_current_time",), time_server(), route="anthropic")
    r = run_worker(make_job(home, toml), env=env)
    assert r.result.status == "ok", r.stderr
    offered = {t["name"]: t for t in claude.messages[0].body["tools"]}
    # The server also offers convert_time: not whitelisted, so not offered.
    assert set(offered) == {"mcp__time__get_current_time", "report_outcome"}
    schema = offered["mcp__time__get_current_time"]["input_schema"]
    assert "timezone" in schema["properties"]  # the server's own schema, not ours
    block = claude.messages[1].body["messages"][-1]["content"][0]
    assert block["type"] == "tool_result" and not block.get("is_error")
    content = json.loads(block["content"])["content"]
    assert json.loads(content)["timezone"] == "Europe/Paris"
    assert r.result.tool_calls == 1
    assert r.result.tools_used == ["mcp:time/get_current_time"]
    assert [e.text for e in r.events_of("tool_call")] == [
        'mcp:time/get_current_time:{"timezone": "Europe/Paris"}'
    ]


def test_ollama_gets_the_tool_in_its_format_and_a_non_whitelisted_call_is_refused(
    home: Path, ollama: FakeOllama, marker: str
) -> None:
    ollama.add(
        O.tool_calls(
            (
                "mcp__time__convert_time",
                {"source_timezone": "UTC", "time": "10:00", "target_timezone": "Asia/Tokyo"},
            ),
            ("mcp__time__get_current_time", {"timezone": "Asia/Tokyo"}),
        ),
        O.text("Tokyo is ahead."),
    )
    toml = mcp_toml(("mcp:time/get_current_time",), time_server())
    r = run_worker(make_job(home, toml, ollama_url=ollama.url))
    assert r.result.status == "ok", r.stderr
    names = [t["function"]["name"] for t in ollama.chats[0].body["tools"]]
    assert names == ["mcp__time__get_current_time", "report_outcome"]
    line = '[day-brief] refused tool call: mcp:time/convert_time:{"source_timezone": "UTC"'
    assert any(ln.startswith(line) for ln in r.stderr.splitlines())
    refused, answered = ollama.chats[1].body["messages"][-2:]
    assert json.loads(refused["content"])["error"].startswith("refused")
    assert json.loads(json.loads(answered["content"])["content"])["timezone"] == "Asia/Tokyo"
    assert r.result.tool_calls == 1 and r.result.tools_used == ["mcp:time/get_current_time"]
    assert marked_processes(marker) == []


def test_an_openai_compatible_route_is_offered_the_tool_and_calls_it(
    home: Path, marker: str
) -> None:
    """A [providers.NAME] kind = "openai" route (through the openai SDK) gets the server's
    whitelisted tool as a Chat Completions function, and the call's result comes back as a
    `role: "tool"` message answering it."""
    with FakeOpenAI() as server:
        server.add(
            OA.tool_calls(("mcp__time__get_current_time", {"timezone": "Asia/Tokyo"})),
            OA.text("Tokyo is ahead."),
        )
        toml = mcp_toml(
            ("mcp:time/get_current_time",),
            time_server(),
            route="lmstudio",
            extra_agent=f'model = "{OA.DEFAULT_MODEL}"',
        )
        declared = {"kind": "openai", "base_url": server.base_url, "local": True}
        job = make_job(home, toml)
        providers = {"lmstudio": {**declared, "key_file": None, "prices": {}}}
        r = run_worker(msgspec.structs.replace(job, providers=providers))
        chats = server.chats
    assert r.result.status == "ok", r.stderr
    offered = {t["function"]["name"]: t["function"] for t in chats[0].body["tools"]}
    assert set(offered) == {"mcp__time__get_current_time", "report_outcome"}
    schema = offered["mcp__time__get_current_time"]["parameters"]
    assert "timezone" in schema["properties"]  # the server's own schema, not ours
    answered = chats[1].body["messages"][-1]
    assert (answered["role"], answered["tool_call_id"]) == ("tool", "call_fake0")
    assert json.loads(json.loads(answered["content"])["content"])["timezone"] == "Asia/Tokyo"
    assert r.result.tool_calls == 1 and r.result.tools_used == ["mcp:time/get_current_time"]
    assert marked_processes(marker) == []


def test_a_whitelist_entry_the_server_lacks_is_not_offered_and_warned(
    home: Path, ollama: FakeOllama
) -> None:
    ollama.add(O.text("Nothing to do."))
    toml = mcp_toml(("mcp:time/get_current_time", "mcp:time/no_such_tool"), time_server())
    r = run_worker(make_job(home, toml, ollama_url=ollama.url))
    names = [t["function"]["name"] for t in ollama.chats[0].body["tools"]]
    assert names == ["mcp__time__get_current_time", "report_outcome"]
    warns = [e.text for e in r.events_of("warn")]
    assert any("mcp:time/no_such_tool: the server offers no tool of that name" in w for w in warns)


# --- failures are tool errors ---


def test_a_server_that_cannot_start_is_a_tool_error_and_a_log_line(
    home: Path, ollama: FakeOllama, tmp_path: Path
) -> None:
    broken = tmp_path / "bin" / "broken-server"
    broken.parent.mkdir()
    broken.write_text("#!/bin/sh\necho 'no config found' >&2\nexit 3\n")
    broken.chmod(0o755)
    ollama.add(O.tool_calls(("mcp__broken__anything", {})), O.text("It failed."))
    toml = mcp_toml(
        ("mcp:broken/anything",), f'\n[[agent.mcp]]\nname = "broken"\ncommand = ["{broken}"]\n'
    )
    r = run_worker(make_job(home, toml, ollama_url=ollama.url))
    assert r.result.status == "ok", r.stderr
    log = [ln for ln in r.stderr.splitlines() if "MCP server broken" in ln]
    assert log and "no config found" in log[0], r.stderr
    answer = json.loads(ollama.chats[1].body["messages"][-1]["content"])
    assert "could not start" in answer["error"] and "exit status 3" in answer["error"]
    assert "no config found" in answer["error"]


def test_a_server_that_hangs_on_initialize_is_a_tool_error_after_its_timeout(
    home: Path, ollama: FakeOllama, tmp_path: Path, marker: str
) -> None:
    hung = tmp_path / "bin" / "hung-server"
    hung.parent.mkdir()
    hung.write_text("#!/bin/sh\nexec sleep 600\n")
    hung.chmod(0o755)
    ollama.add(O.tool_calls(("mcp__hung__anything", {})), O.text("It hung."))
    server = f'\n[[agent.mcp]]\nname = "hung"\ncommand = ["{hung}"]\ntimeout_sec = 2\n'
    r = run_worker(make_job(home, mcp_toml(("mcp:hung/anything",), server), ollama_url=ollama.url))
    assert r.result.status == "ok", r.stderr
    assert any("no answer to initialize within 2 s" in ln for ln in r.stderr.splitlines())
    assert (
        "no answer to initialize"
        in json.loads(ollama.chats[1].body["messages"][-1]["content"])["error"]
    )
    assert marked_processes(marker) == []


# --- the filesystem server (npm): its home only, killed mid-call ---


def _fs_toml(fs_server: Path, allowed: Path, tools: tuple[str, ...]) -> str:
    server = (
        f'\n[[agent.mcp]]\nname = "files"\ncommand = ["{fs_server}", "~/{allowed.name}"]\n'
        f'home = ["~/{allowed.name}"]\n'
    )
    return mcp_toml(tools, server)


@pytest.fixture
def user_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A HOME of the test's own, so `~/notes` is a folder the test makes."""
    h = tmp_path / "user-home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    yield h


@pytest.mark.slow
def test_the_filesystem_server_sees_its_home_and_nothing_else(
    home: Path, ollama: FakeOllama, fs_server: Path, user_home: Path, marker: str
) -> None:
    notes = user_home / "notes"
    notes.mkdir()
    (notes / "today.md").write_text("buy bread\n")
    secret = user_home / "private"
    secret.mkdir()
    (secret / "diary.md").write_text("dear diary\n")
    ollama.add(
        O.tool_calls(
            ("mcp__files__read_text_file", {"path": str(notes / "today.md")}),
            ("mcp__files__read_text_file", {"path": str(secret / "diary.md")}),
        ),
        O.text("Read."),
    )
    toml = _fs_toml(fs_server, notes, ("mcp:files/read_text_file",))
    env = dict(os.environ, HOME=str(user_home))
    r = run_worker(make_job(home, toml, ollama_url=ollama.url), env=env)
    assert r.result.status == "ok", r.stderr
    inside, outside = ollama.chats[1].body["messages"][-2:]
    assert "buy bread" in json.loads(inside["content"])["content"]
    assert "dear diary" not in outside["content"]
    assert json.loads(outside["content"]).get("error")
    assert marked_processes(marker) == []


@pytest.mark.slow
def test_a_server_killed_mid_call_is_a_tool_error_then_restarted_at_the_next_call(
    home: Path, ollama: FakeOllama, fs_server: Path, user_home: Path, marker: str
) -> None:
    notes = user_home / "notes"
    notes.mkdir()
    (notes / "today.md").write_text("buy bread\n")
    fifo = notes / "pipe.md"
    os.mkfifo(fifo)  # reading it blocks until a writer opens it: a call that does not end
    killed: list[int] = []

    def kill_when_reading() -> None:
        # Opening for writing returns once the server has opened the FIFO to read it.
        fd = os.open(fifo, os.O_WRONLY)
        try:
            for pid in marked_processes(marker, also="node"):
                # A process of the server may end with one killed before it: gone is fine.
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
            time.sleep(0.5)
        finally:
            os.close(fd)

    killer = threading.Thread(target=kill_when_reading, daemon=True)
    killer.start()
    ollama.add(
        O.tool_calls(("mcp__files__read_text_file", {"path": str(fifo)})),
        O.tool_calls(("mcp__files__read_text_file", {"path": str(notes / "today.md")})),
        O.text("The server died, then answered."),
    )
    toml = _fs_toml(fs_server, notes, ("mcp:files/read_text_file",))
    env = dict(os.environ, HOME=str(user_home))
    r = run_worker(make_job(home, toml, ollama_url=ollama.url), env=env)
    killer.join(timeout=30)
    assert killed, "the server never opened the FIFO"
    assert r.result.status == "ok", r.stderr
    first = json.loads(ollama.chats[1].body["messages"][-1]["content"])
    assert "failed" in first["error"] and "gone" in first["error"], first
    # The next call starts it again (worker/mcptools.py, may_restart) and is answered.
    again = json.loads(ollama.chats[2].body["messages"][-1]["content"])
    assert "buy bread" in again["content"], again
    warns = [e.text for e in r.events_of("warn")]
    assert any("it starts again at its next call" in w for w in warns), warns
    assert any(w.startswith("MCP server files: restarted (1 of 2)") for w in warns), warns
    assert [e.text for e in r.events_of("log") if "started" in e.text] == [
        "MCP server files: started",
        "MCP server files: started",
    ]
    assert r.result.tool_calls == 2
    assert marked_processes(marker) == []


# --- git (PyPI) and the import rule ---


@pytest.mark.slow
def test_the_git_server_reads_its_declared_repository(
    home: Path, ollama: FakeOllama, user_home: Path
) -> None:
    # On the Ollama route: the model's side does not matter here, and the Anthropic one's is
    # test_anthropic_is_offered_only_the_whitelisted_tool_with_the_servers_schema.
    repo = user_home / "site"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "index.md").write_text("hello\n")
    git = ["git", "-C", str(repo), "-c", "user.name=T", "-c", "user.email=t@example.org"]
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "first page"], check=True)
    ollama.add(
        O.tool_calls(("mcp__git__git_log", {"repo_path": str(repo)})),
        O.text("One commit."),
    )
    server = (
        f'\n[[agent.mcp]]\nname = "git"\ncommand = ["{GIT}", "--repository", "~/site"]\n'
        'home = ["~/site"]\n'
    )
    toml = mcp_toml(("mcp:git/git_log",), server)
    job = make_job(home, toml, ollama_url=ollama.url)
    r = run_worker(job, env=worker_env(HOME=str(user_home)))
    assert r.result.status == "ok", r.stderr
    answered = ollama.chats[1].body["messages"][-1]
    assert answered["role"] == "tool" and "first page" in answered["content"], answered


def test_a_run_without_mcp_never_imports_the_sdk(home: Path, ollama: FakeOllama) -> None:
    ollama.add(O.tool_calls(("run_shell", {"command": "true"})), O.text("Done."))
    toml = routine_toml(tools=("shell:true",))
    # The worker's own main(), then its sys.modules (python -m worker ends with os._exit).
    probe = (
        "import sys\n"
        "from worker.main import main\n"
        "code = main()\n"
        "sys.stderr.write('MODULES ' + ' '.join(sorted(m for m in sys.modules "
        "if m == 'mcp' or m.startswith(('mcp.', 'mcp_types')))) + '\\n')\n"
        "sys.exit(code)\n"
    )
    from ipc import Hello, encode

    def modules(toml: str) -> list[str]:
        job = make_job(home, toml, ollama_url=ollama.url)
        proc = subprocess.run(
            [sys.executable, "-c", probe],
            input=encode(Hello()) + encode(job),
            check=False,
            capture_output=True,
            cwd=Path(__file__).resolve().parents[2],
            timeout=60,
        )
        err = proc.stderr.decode()
        line = next((ln for ln in err.splitlines() if ln.startswith("MODULES")), None)
        assert line is not None, err
        return line.split()[1:]

    assert modules(toml) == []
    # The probe sees the SDK when a run does use it.
    ollama.add(O.text("Done."))
    assert "mcp" in modules(mcp_toml(("mcp:time/get_current_time",), time_server()))


# --- a command routine's one MCP call ---


def _command_toml(tool: str, arguments: str) -> str:
    return textwrap.dedent(
        f"""
        [routine]
        kind = "command"

        [schedule]
        every = "every day at 7:00"
        timezone = "UTC"

        [command]
        timeout_sec = 30
        mcp = {{ server = "time", tool = "{tool}", arguments = {arguments} }}

        [[command.mcp_servers]]
        name = "time"
        command = {json.dumps([TIME, "--local-timezone", "UTC"])}
        """
    )


def test_a_command_routine_calls_one_mcp_tool_with_fixed_arguments(home: Path, marker: str) -> None:
    toml = _command_toml("get_current_time", '{ timezone = "Europe/Paris" }')
    r = run_worker(make_job(home, toml, name="paris-time"))
    assert r.result.status == "ok", r.stderr
    assert r.result.route == "command"
    assert '"timezone": "Europe/Paris"' in r.output(), r.output()
    assert marked_processes(marker) == []


def test_a_command_routines_tool_error_fails_the_run(home: Path) -> None:
    toml = _command_toml("get_current_time", '{ timezone = "Not/AZone" }')
    r = run_worker(make_job(home, toml, name="paris-time"))
    assert r.result.status == "failed"
    assert "mcp:time/get_current_time failed" in (r.result.error or "")


def test_the_auto_router_escalates_with_the_same_server_and_tools(
    home: Path, ollama: FakeOllama, claude: FakeAnthropic, env: dict[str, str]
) -> None:
    # The local attempt calls the tool, then answers too briefly (low confidence): the
    # premium attempt is offered the same MCP tool and calls the same running server.
    ollama.add(
        O.tool_calls(("mcp__time__get_current_time", {"timezone": "UTC"})),
        O.text("Not sure."),
    )
    claude.add(
        A.tool_use(("mcp__time__get_current_time", {"timezone": "Asia/Tokyo"})),
        A.text("It is evening in Tokyo. " * 10),
    )
    toml = mcp_toml(("mcp:time/get_current_time",), time_server(), route="auto")
    r = run_worker(make_job(home, toml, ollama_url=ollama.url), env=env)
    assert r.result.status == "ok", r.stderr
    assert r.result.route == "local->premium"
    assert [t["name"] for t in claude.messages[0].body["tools"]] == [
        "mcp__time__get_current_time",
        "report_outcome",
    ]
    block = claude.messages[1].body["messages"][-1]["content"][0]
    assert '\\"timezone\\": \\"Asia/Tokyo\\"' in block["content"]
    assert r.result.tool_calls == 2
    assert [e.text for e in r.events_of("log") if "started" in e.text] == [
        "MCP server time: started"
    ]


def test_the_servers_environment_holds_no_secret(
    home: Path, claude: FakeAnthropic, env: dict[str, str], marker: str
) -> None:
    seen: dict[int, bytes] = {}

    def look(req: Recorded) -> Reply:
        # The first model call comes once the server is up (its tools were listed).
        for pid in marked_processes(marker):
            with contextlib.suppress(OSError):
                seen[pid] = Path(f"/proc/{pid}/environ").read_bytes()
        return A.text("Looked.")

    claude.add(look)
    toml = mcp_toml(("mcp:time/get_current_time",), time_server(), route="anthropic")
    r = run_worker(make_job(home, toml), env=env)
    assert r.result.status == "ok", r.stderr
    assert seen, "the server was not running at the first model call"
    names = {
        pid: sorted(v.split(b"=", 1)[0].decode() for v in environ.split(b"\0") if v)
        for pid, environ in seen.items()
    }
    assert any(n == ["HOME", "LANG", "PATH", "TERM"] for n in names.values()), names
    for environ in seen.values():
        assert API_KEY.encode() not in environ
