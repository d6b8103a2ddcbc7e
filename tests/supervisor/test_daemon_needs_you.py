"""Runs that pause for a person ("needs you") through a real daemon, real workers, real bwrap
and the fake Ollama server on 127.0.0.1: a run pauses at an action, holds no process and no
slot, its routine's next slot is skipped with the reason, and the person's answer (the
action's real output, or the refusal) reaches the model in the resumed run's first request.
A pause nobody answers expires; a daemon restart while paused loses nothing."""

from __future__ import annotations

import json
import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from routines import proposals
from routines.conversation import file_name
from routines.ledger import Ledger, RunRow
from routines.spec.paths import paths
from tests.fakes import FakeOllama, Recorded, Reply
from tests.fakes import ollama_replies as O
from tests.supervisor.daemonkit import (
    DaemonProcess,
    fake_notify_send,
    notifications,
    rows,
    wait_for,
    write_routine,
)

pytestmark = pytest.mark.slow  # real daemons: make test-fast leaves these out

ROUTINE = """[routine]
description = "drafts replies"
{routine}
[schedule]
cron = "{cron}"
timezone = "UTC"
allow_frequent = true

[agent]
route = "ollama"
system = "You draft replies to my mail."
tools = {tools}

[[agent.actions]]
name = "send-reply"
run = "cat"
"""


def routine(extra: str = "", *, cron: str = "0 6 * * *", tools: str = "[]") -> str:
    return ROUTINE.format(routine=extra, cron=cron, tools=tools)


def propose(summary: str = "Reply to Bob", text: str = "Hi Bob\n") -> Reply:
    return O.tool_calls(
        ("propose_action", {"action": "send-reply", "input": text, "summary": summary})
    )


def last_tool_message(req: Recorded) -> dict[str, Any]:
    """The tool result the request carries last, parsed."""
    message = req.body["messages"][-1]
    assert message["role"] == "tool", req.body["messages"]
    parsed: dict[str, Any] = json.loads(message["content"])
    return parsed


def waiting_one() -> proposals.Proposal:
    with Ledger(paths().ledger) as led:
        [p] = proposals.waiting(led)
    return p


def run_row(run_id: str) -> RunRow:
    [row] = [r for r in rows() if r.run_id == run_id]
    return row


def child_of(run_id: str) -> RunRow | None:
    done = [
        r for r in rows() if r.parent_run_id == run_id and r.status not in ("queued", "running")
    ]
    return done[0] if done else None


def test_ask_pauses_at_an_action_and_resumes_on_approve_with_the_real_output(
    tmp_path: Path, not_root: None
) -> None:
    seen: list[dict[str, Any]] = []

    def after_approval(req: Recorded) -> Reply:
        seen.append(last_tool_message(req))
        return O.text("# Sent the reply")

    # A notify-send that takes actions; the person dismisses the notification (a click on
    # "Open the dashboard" would start one: tests/supervisor/test_notify_actions.py).
    bin_dir, record = fake_notify_send(tmp_path, choose="dismissed")
    with FakeOllama([propose(), after_approval]) as ollama:
        write_routine("drafter", routine())  # no permissions key: "ask" is the default
        env = {"OLLAMA_HOST": ollama.url, "PATH": f"{bin_dir}:/usr/bin:/bin"}
        d = DaemonProcess(tmp_path, extra_env=env).start()
        fin = d.request("run", {"name": "drafter"})
        assert (fin["status"], fin["detail"]) == ("needs_you", "waiting for you: send-reply")
        paused = fin["run_id"]
        # The pause holds no process: the worker is gone, and the ledger row says why.
        assert d.workers() == []
        p = waiting_one()
        assert (p.run_id, p.action, p.input) == (paused, "send-reply", "Hi Bob\n")
        # The notification names the routine and the commands, never the request's content.
        [note] = wait_for(
            lambda: [n for n in notifications(record) if "drafter needs you" in n],
            what="the pause's notification",
        )
        assert "Hi Bob" not in "\n".join(note)
        assert "--action=open=Open the dashboard" in note and "--wait" in note, note
        shown = d.cli("pending")
        assert f"needs you: run {paused} is paused" in shown.stdout, shown
        # waybar and list count it (the daemon answers both from the same rows).
        bar = json.loads(d.cli("status", "--waybar").stdout)
        assert " · 1 needs you · " in bar["text"] and bar["class"] == "attention", bar
        brief = d.cli("brief").stdout
        assert brief.startswith("Needs you: 1 paused run\n"), brief
        assert f"#{p.id} drafter · send-reply: Reply to Bob (its run is paused)" in brief
        listed = d.cli("list").stdout
        assert "needs you" in listed and f"run {paused} waits" in listed, listed
        approved = d.cli("approve", str(p.id), "--yes")
        assert approved.returncode == 0, approved.stderr
        assert f"drafter's paused run {paused} goes on with this answer" in approved.stdout
        child = wait_for(lambda: child_of(paused), what="the resumed run")
        history = d.cli("history", "drafter").stdout
        assert d.stop() == 0
    # history: the paused run "resumed" (who answered), and the run that went on from it.
    assert f"↩ {paused} Sent the reply" in history, history
    assert "resumed" in history and "waiting for you: send-reply; approved by cli at" in history
    assert (child.status, child.trigger) == ("ok", "resume"), d.log()
    # The model's next request carries the action's real output where the paused call was.
    assert seen == [{"approved_by": "cli", "ran": True, "exit_status": 0, "output": "Hi Bob\n"}]
    row = run_row(paused)
    assert row.status == "resumed"
    assert f"approved by cli at {p.decided_at or ''}"[:30] in (row.detail or ""), row.detail


def test_deny_reaches_the_model_in_the_resumed_run(tmp_path: Path, not_root: None) -> None:
    seen: list[dict[str, Any]] = []
    told: list[str] = []

    def after_denial(req: Recorded) -> Reply:
        seen.append(last_tool_message(req))
        return O.text("# Not sent")

    def next_run(req: Recorded) -> Reply:
        told.append(req.body["messages"][1]["content"])
        return O.text("# Second run")

    with FakeOllama([propose(), after_denial, next_run]) as ollama:
        write_routine("drafter", routine())
        d = DaemonProcess(tmp_path, extra_env={"OLLAMA_HOST": ollama.url}).start()
        paused = d.request("run", {"name": "drafter"})["run_id"]
        p = waiting_one()
        denied = d.cli("deny", str(p.id), "--why", "wrong tone")
        assert denied.returncode == 0, denied.stderr
        assert "its paused run goes on" in denied.stdout
        child = wait_for(lambda: child_of(paused), what="the resumed run")
        again = d.request("run", {"name": "drafter"})
        assert d.stop() == 0
    assert child.status == "ok", d.log()
    assert seen == [{"error": "refused: the person denied it: wrong tone", "ran": False}]
    assert (child.detail or "").endswith("1 tool call refused")  # the person's no, counted
    assert again["status"] == "ok"
    # The resumed run heard the answer: the next run is not told it again as news.
    assert "wrong tone" not in told[0]


def test_files_writes_without_pausing_and_pauses_at_an_action(
    tmp_path: Path, not_root: None
) -> None:
    made = paths().workspace("drafter") / "draft.txt"
    command = f"echo draft > {made}"
    with FakeOllama([O.tool_calls(("run_shell", {"command": command})), propose()]) as ollama:
        write_routine(
            "drafter",
            routine('permissions = "files"', tools=json.dumps([f"shell:{command}"])),
        )
        d = DaemonProcess(tmp_path, extra_env={"OLLAMA_HOST": ollama.url}).start()
        fin = d.request("run", {"name": "drafter"})
        assert d.stop() == 0
    assert made.read_text() == "draft\n", d.log()
    assert fin["status"] == "needs_you", fin
    assert waiting_one().action == "send-reply"


def test_everything_unsigned_is_refused_with_file_key_and_fix(
    tmp_path: Path, not_root: None
) -> None:
    path = write_routine("drafter", routine('permissions = "everything"'))
    d = DaemonProcess(tmp_path).start()
    shown = d.cli("run", "drafter")
    assert d.stop() == 0
    assert shown.returncode != 0
    assert str(path) in shown.stderr and "[routine].permissions" in shown.stderr, shown.stderr
    assert "vinos-routine sign drafter" in shown.stderr


def test_a_paused_run_frees_its_slot_and_its_next_slot_is_skipped_with_the_reason(
    tmp_path: Path, not_root: None
) -> None:
    config = paths().config_file
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("max_concurrent = 1\n")
    other = (
        '[routine]\nkind = "command"\n[schedule]\ncron = "0 6 * * *"\n[command]\nrun = "echo hi"\n'
    )
    with FakeOllama([propose()]) as ollama:
        write_routine("drafter", routine("enabled = true", cron="* * * * *"))
        write_routine("other", other)
        d = DaemonProcess(tmp_path, extra_env={"OLLAMA_HOST": ollama.url}).start()
        d.to_slot()
        first = wait_for(
            lambda: [r for r in rows("drafter") if r.status == "needs_you"], what="the pause"
        )[0]
        # One worker at most, and the paused run holds none: another routine runs now.
        assert d.request("run", {"name": "other"})["status"] == "ok"
        refused = d.cli("run", "drafter")
        d.to_slot()
        skipped = wait_for(
            lambda: [r for r in rows("drafter") if r.status == "skipped"], what="the skip"
        )
        assert d.stop() == 0
    assert [r.detail for r in skipped] == [f"waiting for you on {first.run_id}"]
    assert refused.returncode != 0 and f"waiting for you on {first.run_id}" in refused.stderr
    assert len(ollama.chats) == 1  # nothing ran beside the paused run


def test_a_pause_nobody_answers_expires(tmp_path: Path, not_root: None) -> None:
    bin_dir, record = fake_notify_send(tmp_path)
    with FakeOllama([propose()]) as ollama:
        write_routine("drafter", routine('needs_you_timeout = "30m"'))
        env = {"OLLAMA_HOST": ollama.url, "PATH": f"{bin_dir}:/usr/bin:/bin"}
        d = DaemonProcess(tmp_path, extra_env=env).start()
        paused = d.request("run", {"name": "drafter"})["run_id"]
        d.step(timedelta(minutes=31))
        wait_for(lambda: run_row(paused).status == "expired", what="the expiry")
        wait_for(
            lambda: [n for n in notifications(record) if "drafter: nobody answered" in n],
            what="the expiry's notification",
        )
        assert d.stop() == 0
    assert "nobody answered" in (run_row(paused).detail or "")
    assert child_of(paused) is None and len(ollama.chats) == 1  # nothing ran late
    with Ledger(paths().ledger) as led:
        assert proposals.waiting(led) == []


def test_a_daemon_restart_while_paused_loses_nothing(tmp_path: Path, not_root: None) -> None:
    seen: list[dict[str, Any]] = []

    def after(req: Recorded) -> Reply:
        seen.append(last_tool_message(req))
        return O.text("# Sent")

    with FakeOllama([propose(), after]) as ollama:
        write_routine("drafter", routine())
        d = DaemonProcess(tmp_path, extra_env={"OLLAMA_HOST": ollama.url}).start()
        paused = d.request("run", {"name": "drafter"})["run_id"]
        assert d.stop() == 0
        # Answered while no daemon runs: the action runs now, the run resumes at the next start.
        approved = d.cli("approve", str(waiting_one().id), "--yes")
        assert approved.returncode == 0, approved.stderr
        assert run_row(paused).status == "needs_you"
        d2 = DaemonProcess(tmp_path, extra_env={"OLLAMA_HOST": ollama.url}).start()
        child = wait_for(lambda: child_of(paused), what="the resumed run")
        assert d2.stop() == 0
    assert child.status == "ok", d2.log()
    assert seen[0]["output"] == "Hi Bob\n"


def test_an_upgrade_keeps_a_paused_runs_conversation_and_request(
    tmp_path: Path, not_root: None
) -> None:
    """A run paused under a version that kept its conversation only in the state dir: the
    next daemon start copies it into the ledger, which the resume then reads (the file is gone
    by then), so the answer still reaches the model."""
    seen: list[dict[str, Any]] = []

    def after(req: Recorded) -> Reply:
        seen.append(last_tool_message(req))
        return O.text("# Sent")

    with FakeOllama([propose(), after]) as ollama:
        write_routine("drafter", routine())
        d = DaemonProcess(tmp_path, extra_env={"OLLAMA_HOST": ollama.url}).start()
        paused = d.request("run", {"name": "drafter"})["run_id"]
        assert d.stop() == 0
        with Ledger(paths().ledger) as led:
            kept = led.conversation(paused)
        assert kept is not None and "Hi Bob" in kept  # the pause put it in the ledger
        # As the version before left it: the conversation in its file only.
        db = sqlite3.connect(paths().ledger)
        with db:
            db.execute("DELETE FROM conversations")
        db.close()
        on_disk = paths().routine_state("drafter") / "runs" / file_name(paused)
        assert on_disk.read_bytes() == kept.encode()  # the same record, nothing added
        d2 = DaemonProcess(tmp_path, extra_env={"OLLAMA_HOST": ollama.url}).start()

        def imported() -> str | None:
            with Ledger(paths().ledger) as led:
                return led.conversation(paused)

        assert wait_for(imported, what="the imported conversation") == kept
        on_disk.unlink()  # from here on only the ledger has it
        approved = d2.cli("approve", str(waiting_one().id), "--yes")
        assert approved.returncode == 0, approved.stderr
        child = wait_for(lambda: child_of(paused), what="the resumed run")
        assert d2.stop() == 0
    assert child.status == "ok", d2.log()
    assert seen == [{"approved_by": "cli", "ran": True, "exit_status": 0, "output": "Hi Bob\n"}]


def test_an_event_waits_while_a_run_of_its_routine_waits_for_a_person(
    tmp_path: Path, not_root: None
) -> None:
    """The pause fences events as it fences slots: a fire call while a run of the routine waits
    for its person is held (coalesced into one run once answered), never run beside it."""
    with FakeOllama([propose(), O.text("# Sent"), O.text("# The fired run")]) as ollama:
        write_routine("drafter", routine("enabled = true") + "\n[trigger]\nfire = true\n")
        d = DaemonProcess(tmp_path, extra_env={"OLLAMA_HOST": ollama.url}).start()
        fin = d.request("run", {"name": "drafter"})
        assert fin["status"] == "needs_you"
        paused = fin["run_id"]
        # The daemon decides on the event in the call itself (it ticks): held, not started.
        fired = d.request("fire", {"name": "drafter", "input": "the notes"})
        assert fired["state"] == "held", fired
        assert [r.run_id for r in rows()] == [paused], [(r.run_id, r.status) for r in rows()]
        assert d.cli("approve", "--yes", str(waiting_one().id)).returncode == 0
        wait_for(lambda: child_of(paused), what="the resumed run")
        ran = wait_for(
            lambda: [r for r in rows() if r.trigger == "fire" and r.status == "ok"],
            what="the held fire event's run, once the pause was answered",
        )
        assert len(ran) == 1
        assert d.stop() == 0
