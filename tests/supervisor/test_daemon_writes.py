"""Writes to a routine's `write = [...]` folders through a real daemon, real workers, real
bwrap and the fake Ollama server: under "ask" the folder is read-only to the shell and a
write_file call pauses the run with the exact request, which approve writes (the resumed
model gets the tool's real result) and deny leaves unwritten (the model gets the refusal);
under "files" both the shell and write_file write at once, and an action still pauses; a
path outside the folders, or through a link out of them, is refused."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.fakes import FakeOllama, Recorded, Reply
from tests.fakes import ollama_replies as O
from tests.fakes.server import Script
from tests.supervisor.daemonkit import DaemonProcess, wait_for, write_routine
from tests.supervisor.test_daemon_needs_you import (
    child_of,
    last_tool_message,
    propose,
    routine,
    waiting_one,
)

pytestmark = pytest.mark.slow  # real daemons: make test-fast leaves these out

SHELL = "echo from-the-shell > ~/notes/shell.txt"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The person's home: a notes folder the routine may write, a folder it may not."""
    home = tmp_path / "home"
    (home / "notes").mkdir(parents=True)
    (home / "secret").mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home


def writer(permissions: str) -> str:
    """The drafter routine with `write = ["~/notes"]` and a shell command writing there."""
    text = routine(f'permissions = "{permissions}"', tools=json.dumps([f"shell:{SHELL}"]))
    return text.replace('tools = ["shell:', 'write = ["~/notes"]\ntools = ["shell:', 1)


def write_file(path: str, content: str) -> Reply:
    return O.tool_calls(("write_file", {"path": path, "content": content}))


def tool_messages(req: Recorded) -> list[dict[str, Any]]:
    """Every tool result the request carries, parsed, in order."""
    return [json.loads(m["content"]) for m in req.body["messages"] if m["role"] == "tool"]


def test_ask_pauses_at_a_write_and_approve_writes_it_with_the_real_result(
    tmp_path: Path, home: Path, not_root: None
) -> None:
    seen: list[dict[str, Any]] = []
    shell_said: list[dict[str, Any]] = []

    def after_approval(req: Recorded) -> Reply:
        seen.append(last_tool_message(req))
        shell_said.append(tool_messages(req)[0])
        return O.text("# Wrote the note")

    shell = O.tool_calls(("run_shell", {"command": SHELL}))
    replies: list[Script] = [
        shell,
        write_file("~/notes/today.md", "# Today\n\x1b[31mred\n"),
        after_approval,
    ]
    with FakeOllama(replies) as ollama:
        write_routine("drafter", writer("ask"))
        d = DaemonProcess(tmp_path, extra_env={"OLLAMA_HOST": ollama.url}).start()
        fin = d.request("run", {"name": "drafter"})
        paused = fin["run_id"]
        assert (fin["status"], fin["detail"]) == ("needs_you", "waiting for you: write_file"), fin
        target = home / "notes/today.md"
        assert not target.exists()  # nothing is written before the person answers
        p = waiting_one()
        assert (p.action, p.command, p.input) == (
            "write_file",
            str(target),
            "# Today\n\x1b[31mred\n",
        )
        shown = d.cli("pending").stdout
        assert f"write {len(p.input.encode())} bytes to {target}" in shown, shown
        assert "\x1b" not in shown and "\\x1b[31mred" in shown  # escaped, never sent raw
        approved = d.cli("approve", str(p.id), "--yes")
        assert approved.returncode == 0, approved.stderr
        assert f"write:   {target}" in approved.stdout and "\x1b" not in approved.stdout
        child = wait_for(lambda: child_of(paused), what="the resumed run")
        assert d.stop() == 0
    # Under "ask" the folder is read-only to the shell: its write failed, nothing was made.
    assert not (home / "notes/shell.txt").exists()
    assert "Read-only file system" in json.dumps(shell_said), shell_said
    assert target.read_text() == "# Today\n\x1b[31mred\n"
    assert child.status == "ok", d.log()
    result = {"written": str(target), "bytes": len(p.input.encode()), "replaced": False}
    assert seen == [
        {"approved_by": "cli", "ran": True, "exit_status": 0, "output": json.dumps(result)}
    ]


def test_deny_reaches_the_model_and_the_file_is_untouched(
    tmp_path: Path, home: Path, not_root: None
) -> None:
    seen: list[dict[str, Any]] = []

    def after_denial(req: Recorded) -> Reply:
        seen.append(last_tool_message(req))
        return O.text("# Not written")

    target = home / "notes/today.md"
    target.write_text("the person's own words\n")
    with FakeOllama([write_file("~/notes/today.md", "overwritten\n"), after_denial]) as ollama:
        write_routine("drafter", writer("ask"))
        d = DaemonProcess(tmp_path, extra_env={"OLLAMA_HOST": ollama.url}).start()
        paused = d.request("run", {"name": "drafter"})["run_id"]
        denied = d.cli("deny", str(waiting_one().id), "--why", "keep my words")
        assert denied.returncode == 0, denied.stderr
        child = wait_for(lambda: child_of(paused), what="the resumed run")
        assert d.stop() == 0
    assert child.status == "ok", d.log()
    assert seen == [{"error": "refused: the person denied it: keep my words", "ran": False}]
    assert target.read_text() == "the person's own words\n"


def test_files_writes_without_pausing_and_still_pauses_at_an_action(
    tmp_path: Path, home: Path, not_root: None
) -> None:
    seen: list[list[dict[str, Any]]] = []

    def then_propose(req: Recorded) -> Reply:
        seen.append(tool_messages(req))
        return propose()

    replies: list[Script] = [
        O.tool_calls(("run_shell", {"command": SHELL})),
        write_file("~/notes/2026/today.md", "tool\n"),
        then_propose,
    ]
    with FakeOllama(replies) as ollama:
        write_routine("drafter", writer("files"))
        d = DaemonProcess(tmp_path, extra_env={"OLLAMA_HOST": ollama.url}).start()
        fin = d.request("run", {"name": "drafter"})
        assert d.stop() == 0
    assert (home / "notes/shell.txt").read_text() == "from-the-shell\n", d.log()
    made = home / "notes/2026/today.md"
    assert made.read_text() == "tool\n"
    assert seen[0][-1] == {"written": str(made), "bytes": 5, "replaced": False}
    assert (fin["status"], fin["detail"]) == ("needs_you", "waiting for you: send-reply"), fin
    assert waiting_one().action == "send-reply"


def run_to_the_end(
    tmp_path: Path, permissions: str, writes: Sequence[Reply]
) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
    """`drafter` run once through a real daemon, its model asking for `writes` and then
    done: the run's end, the tool results of the model's last request, and the daemon's log."""
    seen: list[list[dict[str, Any]]] = []

    def last(req: Recorded) -> Reply:
        seen.append(tool_messages(req))
        return O.text("# Done")

    with FakeOllama([*writes, last]) as ollama:
        write_routine("drafter", writer(permissions))
        d = DaemonProcess(tmp_path, extra_env={"OLLAMA_HOST": ollama.url}).start()
        fin = d.request("run", {"name": "drafter"})
        assert d.stop() == 0
    [said] = seen
    return fin, said, d.log()


def test_a_write_outside_the_folders_or_through_a_link_out_is_refused(
    tmp_path: Path, home: Path, not_root: None
) -> None:
    (home / "notes/out").symlink_to(home / "secret")
    writes = [
        write_file("~/secret/x.md", "a"),
        write_file("~/notes/out/x.md", "b"),
        write_file("~/notes/../secret/x.md", "c"),
        write_file("~/notes/.env", "d"),
    ]
    fin, said, log = run_to_the_end(tmp_path, "files", writes)
    assert fin["status"] == "ok", log
    assert list((home / "secret").iterdir()) == [] and not (home / "notes/.env").exists()
    errors = [m["error"] for m in said]
    assert len(errors) == 4, errors
    assert "outside this routine's write folders" in errors[0]
    assert f"(it resolves to {home}/secret/x.md)" in errors[1]
    assert "outside this routine's write folders" in errors[2]
    assert "credential-named" in errors[3]


def test_a_link_planted_while_the_write_waits_is_refused_at_approval(
    tmp_path: Path, home: Path, not_root: None
) -> None:
    """The path is checked again when the person approves, links resolved then: a folder
    swapped for a link out while the run waited sends nothing out, and the model is told."""
    seen: list[dict[str, Any]] = []

    def after_approval(req: Recorded) -> Reply:
        seen.append(last_tool_message(req))
        return O.text("# Not written")

    (home / "notes/sub").mkdir()
    with FakeOllama([write_file("~/notes/sub/x.md", "x\n"), after_approval]) as ollama:
        write_routine("drafter", writer("ask"))
        d = DaemonProcess(tmp_path, extra_env={"OLLAMA_HOST": ollama.url}).start()
        paused = d.request("run", {"name": "drafter"})["run_id"]
        p = waiting_one()
        (home / "notes/sub").rmdir()
        (home / "notes/sub").symlink_to(home / "secret")
        approved = d.cli("approve", str(p.id), "--yes")
        assert approved.returncode == 1, approved.stdout
        child = wait_for(lambda: child_of(paused), what="the resumed run")
        assert d.stop() == 0
    assert list((home / "secret").iterdir()) == []
    assert child.status == "ok", d.log()
    [said] = seen
    assert (said["ran"], said["exit_status"]) == (False, None), said
    assert f"(it resolves to {home}/secret/x.md)" in said["output"], said
