"""The tool loop end to end: whitelist refusals (log line, event, error result, the run goes
on), real sandboxed shell calls and reads, report_outcome, and the 10-iteration cap."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ipc import Job
from sandbox.argv import argv_line
from tests.fakes import FakeAnthropic, FakeOllama
from tests.fakes import anthropic_replies as A
from tests.fakes import ollama_replies as O
from tests.worker.worker_harness import API_KEY, make_job, routine_toml, run_worker, worker_env

LONG = "Here is the brief for today, with every detail that matters to you. " * 6


def _job(home: Path, url: str, tools: tuple[str, ...], route: str = "ollama") -> Job:
    return make_job(home, routine_toml(route=route, tools=tools), ollama_url=url)


@pytest.mark.parametrize(
    ("call", "line"),
    [
        (("run_shell", {"command": "cat /etc/shadow"}), "shell:cat /etc/shadow"),
        (("run_shell", {"command": "date "}), "shell:date "),  # not verbatim: trailing space
        (("run_shell", {"command": "date; id"}), "shell:date; id"),
        (("read_files", {"glob": "~/notes/*.txt"}), "read:~/notes/*.txt"),
        (("send_email", {"to": "boss"}), 'send_email:{"to": "boss"}'),
    ],
    ids=["undeclared", "whitespace", "appended", "read-glob", "unknown-tool"],
)
def test_a_refused_call_gets_an_error_result_and_the_run_goes_on(
    home: Path, ollama: FakeOllama, call: tuple[str, dict[str, str]], line: str
) -> None:
    ollama.add(O.tool_calls(call), O.text(LONG))
    r = run_worker(_job(home, ollama.url, ("shell:date", "read:~/notes/*.md")))
    expected = f"[day-brief] refused tool call: {line}"
    assert expected in r.stderr.splitlines()
    refused = r.events_of("tool_refused")
    assert [e.text for e in refused] == [expected]
    assert r.result.status == "ok" and r.result.tool_calls == 0 and r.result.tools_used == []
    tool_msg = ollama.chats[1].body["messages"][-1]
    assert tool_msg["role"] == "tool" and json.loads(tool_msg["content"])["error"].startswith(
        "refused"
    )


@pytest.mark.slow
def test_refusal_on_anthropic_is_an_error_tool_result(
    home: Path, ollama: FakeOllama, claude: FakeAnthropic, env: dict[str, str]
) -> None:
    claude.add(A.tool_use(("run_shell", {"command": "rm -rf ~"})), A.text(LONG))
    r = run_worker(_job(home, ollama.url, ("shell:date",), route="anthropic"), env=env)
    assert r.result.status == "ok"
    block = claude.messages[1].body["messages"][-1]["content"][0]
    assert block["type"] == "tool_result" and block["is_error"] is True
    assert block["tool_use_id"] == claude.messages[1].body["messages"][-2]["content"][0]["id"]
    assert "[day-brief] refused tool call: shell:rm -rf ~" in r.stderr


def test_the_tools_offered_list_the_declared_entries(home: Path, ollama: FakeOllama) -> None:
    ollama.add(O.text(LONG))
    run_worker(_job(home, ollama.url, ("shell:gh api /notifications", "read:~/inbox/*.eml")))
    tools = {t["function"]["name"]: t["function"] for t in ollama.chats[0].body["tools"]}
    assert set(tools) == {"run_shell", "read_files", "report_outcome"}
    assert tools["run_shell"]["parameters"]["properties"]["command"]["enum"] == [
        "gh api /notifications"
    ]
    assert tools["read_files"]["parameters"]["properties"]["glob"]["enum"] == ["~/inbox/*.eml"]


def test_no_declared_tools_offers_only_report_outcome(home: Path, ollama: FakeOllama) -> None:
    ollama.add(O.tool_calls(("run_shell", {"command": "date"})), O.text(LONG))
    r = run_worker(_job(home, ollama.url, ()))
    assert [t["function"]["name"] for t in ollama.chats[0].body["tools"]] == ["report_outcome"]
    assert "[day-brief] refused tool call: shell:date" in r.stderr


def test_a_declared_shell_command_runs_in_the_sandbox(
    home: Path, ollama: FakeOllama, not_root: None
) -> None:
    ollama.add(
        O.tool_calls(("run_shell", {"command": "echo hello from the sandbox; pwd"})),
        O.tool_calls(("run_shell", {"command": "printenv ANTHROPIC_API_KEY"})),
        O.text(LONG),
    )
    job = _job(
        home,
        ollama.url,
        ("shell:echo hello from the sandbox; pwd", "shell:printenv ANTHROPIC_API_KEY"),
    )
    r = run_worker(job, env=worker_env(ANTHROPIC_API_KEY=API_KEY))
    assert r.result.status == "ok", r.stderr
    assert (r.result.tool_calls, r.result.tools_used) == (2, ["run_shell"])
    first = json.loads(ollama.chats[1].body["messages"][-1]["content"])
    assert first["exit_code"] == 0
    # The working directory: the run's own scratch dir, outside the state dir (removed after).
    run_scratch = Path(job.vinos_home) / "routines/scratch/day-brief" / job.run_id
    assert first["stdout"] == f"hello from the sandbox\n{os.path.realpath(run_scratch)}\n"
    assert not run_scratch.exists()
    second = json.loads(ollama.chats[2].body["messages"][-1]["content"])
    assert second["exit_code"] == 1 and second["stdout"] == ""  # no secret in a sandbox
    kinds = r.kinds()
    assert kinds.count("tool_call") == 2 and kinds.count("tool_result") == 2


def test_what_a_sandbox_locked_in_its_scratch_dir_does_not_outlive_the_run(
    home: Path, ollama: FakeOllama, not_root: None
) -> None:
    """chmod 000 folders, a read-only file and a folder without w: all gone with the run."""
    command = (
        "mkdir -p a/b/c && touch a/b/c/f && chmod 400 a/b/c/f && chmod 000 a/b/c a/b"
        " && chmod 500 a && chmod 000 . && echo locked"
    )
    ollama.add(O.tool_calls(("run_shell", {"command": command})), O.text(LONG))
    job = _job(home, ollama.url, (f"shell:{command}",))
    r = run_worker(job)
    assert r.result.status == "ok", r.stderr
    result = json.loads(ollama.chats[1].body["messages"][-1]["content"])
    assert result["stdout"] == "locked\n", result
    run_scratch = Path(job.vinos_home) / "routines/scratch/day-brief" / job.run_id
    assert not run_scratch.exists()
    assert "could not remove" not in r.stderr


def test_a_declared_read_glob_reads_the_files(
    home: Path, ollama: FakeOllama, tmp_path: Path
) -> None:
    user_home = tmp_path / "user"
    (user_home / "notes").mkdir(parents=True)
    (user_home / "notes" / "today.md").write_text("Ship the release.\n")
    (user_home / "notes" / "secret.txt").write_text("not declared\n")
    ollama.add(O.tool_calls(("read_files", {"glob": "~/notes/*.md"})), O.text(LONG))
    r = run_worker(
        _job(home, ollama.url, ("read:~/notes/*.md",)), env=worker_env(HOME=str(user_home))
    )
    assert r.result.status == "ok" and r.result.tools_used == ["read_files"]
    result = ollama.chats[1].body["messages"][-1]["content"]
    assert "Ship the release." in result and "not declared" not in result


def test_report_outcome_is_recorded_and_a_bad_status_is_an_error(
    home: Path, ollama: FakeOllama
) -> None:
    ollama.add(
        O.tool_calls(("report_outcome", {"status": "great", "summary": "x"})),
        O.tool_calls(("report_outcome", {"status": "nothing-to-do", "summary": "Inbox  empty\n"})),
        O.text(""),  # no final text: the summary becomes the output
    )
    r = run_worker(_job(home, ollama.url, ()))
    res = r.result
    assert (res.status, res.outcome, res.summary) == ("ok", "nothing-to-do", "Inbox empty")
    bad = json.loads(ollama.chats[1].body["messages"][-1]["content"])
    assert "status must be one of" in bad["error"]
    assert "Inbox empty" in r.output()


def test_the_loop_stops_after_10_model_calls(home: Path) -> None:
    with FakeOllama(
        default=O.tool_calls(("report_outcome", {"status": "done", "summary": "x"}))
    ) as fake:
        r = run_worker(_job(home, fake.url, ()))
        assert len(fake.chats) == 10
    res = r.result
    assert res.status == "failed" and "stopped after 10 model calls" in (res.error or "")
    assert len(r.usages) == 10 and len(r.events_of("model_call")) == 10


def test_a_newline_in_a_refused_command_forges_no_line(home: Path, ollama: FakeOllama) -> None:
    """The model chooses the command text: its newline (and escape sequences) must not make
    a line of its own in the run log, the events `run` prints, or `logs`."""
    forged = "cat /etc/shadow\n[day-brief] outcome: done: all fine\x1b[2K\r"
    ollama.add(O.tool_calls(("run_shell", {"command": forged})), O.text(LONG))
    r = run_worker(_job(home, ollama.url, ("shell:date",)))
    line = "[day-brief] refused tool call: shell:cat /etc/shadow\\n[day-brief] outcome: done: "
    line += "all fine\\x1b[2K\\x0d"
    assert line in r.stderr.splitlines()
    assert not any(ln.startswith("[day-brief] outcome") for ln in r.stderr.splitlines())
    [refused] = r.events_of("tool_refused")
    assert refused.text == line
    assert all("\n" not in e.text and "\x1b" not in e.text for e in r.events)


def test_debug_shows_each_bwrap_argv_as_an_event(
    home: Path, ollama: FakeOllama, not_root: None
) -> None:
    ollama.add(O.tool_calls(("run_shell", {"command": "date"})), O.text(LONG))
    r = run_worker(_job(home, ollama.url, ("shell:date",)), env=worker_env(VINOS_ROUTINE_DEBUG="1"))
    assert r.result.status == "ok", r.stderr
    [shown] = [e for e in r.events_of("log") if e.text.startswith("sandbox argv: ")]
    argv = shown.data["argv"]
    # nsenter starts bwrap in the overlays' namespaces (sandbox/overlay.py): it binds them.
    assert argv[0].endswith("/nsenter") and argv[-1].endswith("\ndate")
    assert argv[argv.index("--") + 1].endswith("bwrap")
    assert "--bind" in argv and "--bind-fd" not in argv
    # One line, the `bash -c` text's newline written $'...\n...' (sandbox/argv.py argv_line).
    assert shown.text == "sandbox argv: " + argv_line(argv)


def test_everything_writes_without_pausing_from_the_shell_and_write_file(
    tmp_path: Path, home: Path, ollama: FakeOllama, monkeypatch: pytest.MonkeyPatch, not_root: None
) -> None:
    """A job whose permissions the supervisor judged "everything" (its signature verified):
    the write folder is read-write, write_file writes at once, and nothing is proposed."""
    import msgspec

    from ipc import Proposal

    person = tmp_path / "person"
    (person / "notes").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(person))
    shell = "echo shell > ~/notes/a.txt"
    ollama.add(
        O.tool_calls(("run_shell", {"command": shell})),
        O.tool_calls(("write_file", {"path": "~/notes/b.txt", "content": "tool\n"})),
        O.text(LONG),
    )
    toml = routine_toml(tools=(f"shell:{shell}",), extra_agent='write = ["~/notes"]')
    job = msgspec.structs.replace(
        make_job(home, toml, ollama_url=ollama.url), permissions="everything"
    )
    r = run_worker(job, env=worker_env(HOME=str(person)))
    assert r.result.status == "ok", r.stderr
    assert (person / "notes/a.txt").read_text() == "shell\n"
    assert (person / "notes/b.txt").read_text() == "tool\n"
    assert not [m for m in r.messages if isinstance(m, Proposal)]
