"""`vinos-routine reply RUN_ID TEXT`: real worker runs against the fake Anthropic server, which
checks that a reply carries the parent's whole conversation; through the daemon and without
one; the ledger's trigger and parent; `history --thread`; an edited routine."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from routines import conversation
from routines.conversation import Role
from routines.spec.paths import paths
from supervisor.cli.client import DaemonError
from tests.fakes import FakeAnthropic, Recorded, Reply
from tests.fakes import anthropic_replies as A
from tests.supervisor.daemonkit import DaemonProcess, command_routine, rows, wait_for, write_routine

pytestmark = pytest.mark.slow  # real daemons and worker runs: make test-fast leaves these out

API_KEY = "sk-ant-test-0123456789"

INBOX = """[routine]
description = "drafts replies"

[schedule]
cron = "0 6 * * *"
timezone = "UTC"

[agent]
route = "anthropic"
system = "{system}"
tools = []

[budget]
max_dollars_per_day = 5.0
"""
FIRST_ANSWER = "# Drafts\n\nDear Bob, a long and winding draft."


@pytest.fixture
def claude() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as fake:
        yield fake


def daemon(tmp_path: Path, claude: FakeAnthropic) -> DaemonProcess:
    return DaemonProcess(
        tmp_path, extra_env={"ANTHROPIC_BASE_URL": claude.url, "ANTHROPIC_API_KEY": API_KEY}
    )


def expecting(turns: int, last: str, answer: str) -> Any:
    """A scripted reply that answers only when the request carries `turns` messages ending
    in the user turn `last`: the fake server itself refuses a reply without its history."""

    def check(req: Recorded) -> Reply:
        messages = req.body["messages"]
        if len(messages) != turns or messages[-1] != {"role": "user", "content": last}:
            return A.error(400, "invalid_request_error", f"unexpected thread: {messages!r}")
        return A.text(answer)

    return check


def started(run_id: str) -> str:
    [row] = [r for r in rows() if r.run_id == run_id]
    return (row.started_at or "")[:19].replace("T", " ")


def first_run(claude: FakeAnthropic, run: Any) -> str:
    """The parent run: a tool call (report_outcome), its result, then the answer."""
    claude.add(
        A.tool_use(("report_outcome", {"status": "done", "summary": "1 draft for Bob"})),
        A.text(FIRST_ANSWER),
    )
    fin = run()
    assert fin["status"] == "ok", fin
    return str(fin["run_id"])


def assert_continues(claude: FakeAnthropic, parent_request: int, text: str) -> None:
    """The reply's request is the parent's conversation, its answer, then `text`."""
    first = claude.messages[parent_request].body
    reply = claude.messages[-1].body
    assert reply["system"] == first["system"]
    sent = reply["messages"]
    assert sent[0] == first["messages"][0]  # the parent's user turn, verbatim
    assert sent[1]["role"] == "assistant"
    [call] = sent[1]["content"]
    assert (call["type"], call["name"], call["input"]) == (
        "tool_use",
        "report_outcome",
        {"status": "done", "summary": "1 draft for Bob"},
    )
    [result] = sent[2]["content"]
    assert sent[2]["role"] == "user" and result["type"] == "tool_result"
    assert result["tool_use_id"] == call["id"]
    assert sent[3] == {"role": "assistant", "content": [{"type": "text", "text": FIRST_ANSWER}]}
    assert sent[4] == {"role": "user", "content": text}


def test_reply_through_the_daemon_continues_the_conversation(
    tmp_path: Path, not_root: None, claude: FakeAnthropic
) -> None:
    write_routine("inbox", INBOX.format(system="Draft replies to my mail."))
    d = daemon(tmp_path, claude).start()
    parent = first_run(claude, lambda: d.request("run", {"name": "inbox"}))

    record = conversation.load(paths().routine_state("inbox"), parent)
    assert record is not None
    assert [t.role for t in record.turns] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
    assert record.turns[-1].text == FIRST_ANSWER and not record.shortened

    claude.add(expecting(5, "make it shorter", "# Drafts\n\nDear Bob, short."))
    out = d.cli("reply", parent, "make", "it", "shorter")
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"inbox: reply to {parent}" in out.stdout
    assert "no daemon running" not in out.stderr
    assert_continues(claude, 0, "make it shorter")

    by_id = {r.run_id: r for r in rows("inbox")}
    [child] = [r for r in by_id.values() if r.parent_run_id == parent]
    assert (child.trigger, child.status) == ("reply", "ok")
    assert by_id[parent].parent_run_id is None and by_id[parent].trigger == "manual"
    assert child.output_file and Path(child.output_file).read_text().endswith("Dear Bob, short.\n")

    # A reply to the reply carries both earlier exchanges.
    claude.add(expecting(7, "sign it Ann", "# Drafts\n\nDear Bob, short.\n\nAnn"))
    again = d.request("reply", {"run_id": child.run_id, "text": "sign it Ann"})
    assert again["status"] == "ok", again
    assert claude.messages[-1].body["messages"][4:6] == [
        {"role": "user", "content": "make it shorter"},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "# Drafts\n\nDear Bob, short."}],
        },
    ]

    thread = d.cli("history", "inbox", "--thread", again["run_id"])
    assert child.started_at is not None
    assert thread.returncode == 0, thread.stderr
    assert thread.stdout.splitlines() == [
        f"{parent}  {str(by_id[parent].started_at)[:19].replace('T', ' ')}  manual  ok · done",
        "    1 draft for Bob",
        f"  ↳ {child.run_id}  {child.started_at[:19].replace('T', ' ')}  reply  ok",
        "      you: make it shorter",
        f"      {child.detail}",
        f"    ↳ {again['run_id']}  {started(again['run_id'])}  reply  ok",
        "        you: sign it Ann",
        f"        {again['detail']}",
    ]
    as_json = [
        json.loads(x)
        for x in d.cli("history", "inbox", "--thread", parent, "--json").stdout.splitlines()
    ]
    assert [(x["run_id"], x["depth"], x["parent_run_id"]) for x in as_json] == [
        (parent, 0, None),
        (child.run_id, 1, parent),
        (again["run_id"], 2, child.run_id),
    ]
    table = d.cli("history", "inbox").stdout
    assert f"↩ {parent}" in table and "RUN" in table.splitlines()[0]
    assert d.stop() == 0


def test_reply_without_a_daemon_runs_in_process(
    tmp_path: Path, not_root: None, claude: FakeAnthropic
) -> None:
    write_routine("inbox", INBOX.format(system="Draft replies to my mail."))
    d = daemon(tmp_path, claude)  # never started: the CLI runs the reply itself
    parent = first_run(claude, lambda: json.loads(d.cli("run", "inbox", "--json").stdout))
    claude.add(expecting(5, "shorter please", "# Drafts\n\nDear Bob, short."))
    out = d.cli("reply", parent, "shorter please")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "no daemon running: running inbox in this process" in out.stderr
    assert_continues(claude, 0, "shorter please")
    [child] = [r for r in rows("inbox") if r.trigger == "reply"]
    assert (child.parent_run_id, child.status) == (parent, "ok")
    assert f"reply run: {child.run_id}" in out.stdout


def test_a_reply_to_an_edited_routine_runs_the_new_file_and_says_so(
    tmp_path: Path, not_root: None, claude: FakeAnthropic
) -> None:
    path = write_routine("inbox", INBOX.format(system="Draft replies to my mail."))
    d = daemon(tmp_path, claude).start()
    parent = first_run(claude, lambda: d.request("run", {"name": "inbox"}))
    path.write_text(INBOX.format(system="Draft replies to my mail, in French."))
    d.request("reload")
    claude.add(expecting(5, "again", "# Brouillons"))
    out = d.cli("reply", parent, "again")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "the routine was edited since that run: this reply runs the current file" in out.stdout
    system = claude.messages[-1].body["system"]
    assert "in French" in (system if isinstance(system, str) else json.dumps(system))
    [child] = [r for r in rows("inbox") if r.trigger == "reply"]
    log = paths().run_log("inbox", str(child.run_id)).read_text()
    assert "edited since that run" in log
    assert d.stop() == 0


def test_replies_that_cannot_run_say_why_and_record_nothing(
    tmp_path: Path, not_root: None, claude: FakeAnthropic
) -> None:
    write_routine("inbox", INBOX.format(system="Draft replies to my mail."))
    write_routine("cmd", command_routine("echo hi", enabled=False))
    d = daemon(tmp_path, claude).start()
    cmd_run = d.request("run", {"name": "cmd"})["run_id"]
    parent = first_run(claude, lambda: d.request("run", {"name": "inbox"}))
    before = len(rows())
    cases = {
        ("20260101T000000-inbox-000000", "x"): "no run 20260101T000000-inbox-000000 in the ledger",
        ("../../etc/passwd", "x"): "is not a run id",
        (cmd_run, "x"): "cmd is a command routine: there is no conversation to reply to",
        (parent, "   "): "the reply is empty",
    }
    for (run_id, text), message in cases.items():
        out = d.cli("reply", run_id, text)
        assert out.returncode == 1, (run_id, out.stdout)
        assert message in out.stderr, out.stderr
    # The daemon checks again itself (the CLI's check is only the early word).
    paths().conversation("inbox", parent).unlink()
    with pytest.raises(DaemonError) as refused:
        d.request("reply", {"run_id": parent, "text": "x"})
    assert refused.value.code == "reply_refused"
    assert "kept no conversation to continue" in str(refused.value)
    assert len(rows()) == before
    assert len(claude.messages) == 2
    assert d.stop() == 0


def test_a_reply_while_the_routine_runs_is_refused_like_a_run(
    tmp_path: Path, not_root: None, claude: FakeAnthropic
) -> None:
    write_routine("inbox", INBOX.format(system="Draft replies to my mail."))
    d = daemon(tmp_path, claude).start()
    parent = first_run(claude, lambda: d.request("run", {"name": "inbox"}))
    held = threading.Event()
    release = threading.Event()

    def hold(req: Recorded) -> Reply:
        held.set()
        release.wait(60)
        return A.text("# Later")

    claude.add(hold)
    queued = d.request("run", {"name": "inbox", "detach": True})
    try:
        assert held.wait(60), "the second run never reached the model"
        with pytest.raises(DaemonError) as refused:
            d.request("reply", {"run_id": parent, "text": "x"})
        assert refused.value.code == "busy"
        assert "inbox is already running" in str(refused.value)
    finally:
        release.set()
    wait_for(lambda: all(r.status != "running" for r in rows("inbox")), what="the held run")
    assert [r.run_id for r in rows("inbox") if r.trigger == "reply"] == []
    assert queued["run_id"] in {r.run_id for r in rows("inbox")}
    assert d.stop() == 0
