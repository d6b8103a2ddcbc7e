"""Proposed actions through a real daemon: the worker's `proposal` message becomes a ledger row
and one desktop notification (the paused run's resume: test_daemon_needs_you.py)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from routines import proposals
from routines.ledger import Ledger
from routines.spec.paths import paths
from tests.fakes import FakeOllama, Reply
from tests.fakes import ollama_replies as O
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


def test_the_daemon_records_the_paused_runs_request_and_notifies(
    tmp_path: Path, not_root: None
) -> None:
    bin_dir, record = fake_notify_send(tmp_path)
    with FakeOllama([propose("Reply to Bob")]) as ollama:
        write_routine("drafter", ROUTINE)
        env = {"OLLAMA_HOST": ollama.url, "PATH": f"{bin_dir}:/usr/bin:/bin"}
        d = DaemonProcess(tmp_path, extra_env=env).start()
        fin = d.request("run", {"name": "drafter"})
        assert (fin["status"], fin["outcome"]) == ("needs_you", None)
        assert fin["detail"] == "waiting for you: send-reply"
        with Ledger(paths().ledger) as led:
            [p] = proposals.waiting(led)
            assert (p.action, p.input, p.summary, p.run_id) == (
                "send-reply",
                "Hi Bob\n",
                "Reply to Bob",
                fin["run_id"],
            )
            # A paused run's request waits needs_you_timeout (24 h by default), not 7 days.
            waited = datetime.fromisoformat(p.expires_at) - datetime.fromisoformat(p.created_at)
            assert waited.total_seconds() == 24 * 3600
        # Sent after the run's answer: waited for.
        [note] = wait_for(
            lambda: [n for n in notifications(record) if "drafter needs you" in n],
            what="the pause's notification",
        )
        assert f"vinos-routine approve {p.id}" in "\n".join(note)
        assert d.stop() == 0
    assert len(ollama.chats) == 1
