"""Proposed actions through a real daemon: the worker's `proposal` messages become ledger rows and
one desktop notification, and a decision reaches the next run's prompt (the fake Ollama server on
127.0.0.1 sees it)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from fakes import FakeOllama, Recorded, Reply
from fakes import ollama_replies as O

from routines import proposals
from routines.ledger import Ledger
from routines.spec.paths import paths
from tests.supervisor.daemonkit import (
    DaemonProcess,
    fake_notify_send,
    notifications,
    wait_for,
    write_routine,
)

pytestmark = pytest.mark.slow  # real daemons: make test-fast leaves these out

ROUTINE = """[routine]
description = "drafts replies"

[schedule]
cron = "0 6 * * *"
timezone = "UTC"

[agent]
route = "ollama"
system = "You draft replies to my mail."

[[agent.actions]]
name = "send-reply"
run = "cat"
"""


def propose(summary: str) -> Reply:
    return O.tool_calls(
        ("propose_action", {"action": "send-reply", "input": "Hi Bob\n", "summary": summary})
    )


def test_the_daemon_records_proposals_notifies_and_tells_the_next_run(
    tmp_path: Path, not_root: None
) -> None:
    told: list[str] = []

    def second(req: Recorded) -> Reply:
        told.append(req.body["messages"][1]["content"])
        return O.text("# Second run")

    bin_dir, record = fake_notify_send(tmp_path)
    with FakeOllama([propose("Reply to Bob"), O.text("# Drafted"), second]) as ollama:
        write_routine("drafter", ROUTINE)
        env = {"OLLAMA_HOST": ollama.url, "PATH": f"{bin_dir}:/usr/bin:/bin"}
        d = DaemonProcess(tmp_path, extra_env=env).start()
        fin = d.request("run", {"name": "drafter"})
        assert (fin["status"], fin["outcome"]) == ("ok", "needs-attention")
        assert fin["detail"] == "1 action waits for you"
        with Ledger(paths().ledger) as led:
            [p] = proposals.waiting(led)
            assert (p.action, p.input, p.summary, p.run_id) == (
                "send-reply",
                "Hi Bob\n",
                "Reply to Bob",
                fin["run_id"],
            )
            proposals.deny(led, p.id, why="wrong tone", now=datetime.now(UTC))
        # Sent after the run's answer: waited for.
        [note] = wait_for(
            lambda: [n for n in notifications(record) if "drafter proposes an action" in n],
            what="the proposal's notification",
        )
        assert f"vinos-routine approve {p.id}" in "\n".join(note)

        again = d.request("run", {"name": "drafter"})
        assert again["status"] == "ok", again
        assert d.stop() == 0
        chats = [c.body["messages"][-1]["content"][:80] for c in ollama.chats]
    assert len(told) == 1, (again, chats, d.log())
    [user] = told
    assert f'- #{p.id} send-reply "Reply to Bob": denied; why: wrong tone' in user
