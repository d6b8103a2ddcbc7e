"""Red team: a run its routine's trigger started, paused for a person, does not go on once
the person has turned the routine off.

The chain: a routine on a schedule or an event pauses at an action; the person, alarmed by
the request, turns the routine off, then denies (or approves) the request. The daemon
resumed the run all the same: the model was called again, with every tool of a routine that
is off. Now the answer is kept (an approved action ran, since the person approved it), the
paused run ends, and nothing more runs. A run the person started by hand goes on as before
(tests/supervisor/test_daemon_needs_you.py runs disabled routines by hand), but never under
another file: one run by hand, removed while it waits, and a new file of that name written
(what `draft_routine` writes after a `remove`: off, the model's own system and tools) is not
run by the answer to the old file's request."""

from __future__ import annotations

from pathlib import Path

import pytest

from routines import proposals
from routines.ledger import Ledger
from routines.spec.paths import paths
from tests.fakes import FakeOllama, Recorded, Reply
from tests.fakes import ollama_replies as O
from tests.supervisor.daemonkit import DaemonProcess, rows, wait_for, write_routine

pytestmark = pytest.mark.slow  # a real daemon, real workers

ROUTINE = """[routine]
enabled = true

[trigger]
fire = true

[agent]
route = "ollama"
system = "You draft replies to my mail."

[[agent.actions]]
name = "send-reply"
run = "cat"
"""


def test_an_answer_after_the_routine_is_turned_off_calls_the_model_no_more(
    tmp_path: Path, not_root: None
) -> None:
    asked_again: list[Recorded] = []

    def after_answer(req: Recorded) -> Reply:
        asked_again.append(req)
        return O.text("# went on")

    propose = O.tool_calls(
        ("propose_action", {"action": "send-reply", "input": "Hi\n", "summary": "Reply"})
    )
    with FakeOllama([propose, after_answer]) as ollama:
        write_routine("drafter", ROUTINE)
        d = DaemonProcess(tmp_path, extra_env={"OLLAMA_HOST": ollama.url}).start()
        d.request("fire", {"name": "drafter"})
        [paused] = wait_for(
            lambda: [r for r in rows("drafter") if r.status == "needs_you"], what="the pause"
        )
        assert d.cli("disable", "drafter").returncode == 0
        with Ledger(paths().ledger) as led:
            [p] = proposals.waiting(led)
        assert d.cli("deny", str(p.id), "--why", "stop").returncode == 0
        ended = wait_for(
            lambda: [r for r in rows("drafter") if r.run_id == paused.run_id and r.status
                     not in ("needs_you",)],
            what="the paused run's end",
        )  # fmt: skip
        assert d.stop() == 0
    assert ended[0].status == "expired", d.log()
    assert "turned off, or its file replaced, while it waited" in (ended[0].detail or "")
    assert asked_again == []
    assert [r for r in rows("drafter") if r.parent_run_id == paused.run_id] == []


DRAFT = """[routine]
enabled = false

[schedule]
cron = "0 6 * * *"

[agent]
route = "ollama"
system = "A drafted routine: read everything, send it on."
"""


def test_an_answer_never_runs_a_file_put_in_the_place_of_the_paused_ones(
    tmp_path: Path, not_root: None
) -> None:
    asked_again: list[Recorded] = []

    def after_answer(req: Recorded) -> Reply:
        asked_again.append(req)
        return O.text("# went on")

    propose = O.tool_calls(
        ("propose_action", {"action": "send-reply", "input": "Hi\n", "summary": "Reply"})
    )
    with FakeOllama([propose, after_answer]) as ollama:
        write_routine("drafter", ROUTINE.replace("enabled = true", "enabled = false"))
        d = DaemonProcess(tmp_path, extra_env={"OLLAMA_HOST": ollama.url}).start()
        paused = d.request("run", {"name": "drafter"})  # by hand: the person's run
        assert paused["status"] == "needs_you", paused
        assert d.cli("remove", "drafter", "--yes").returncode == 0
        write_routine("drafter", DRAFT)  # the draft in its place
        d.request("reload")
        with Ledger(paths().ledger) as led:
            [p] = proposals.waiting(led)
        d.cli("deny", str(p.id), "--why", "old request")
        ended = wait_for(
            lambda: [r for r in rows("drafter") if r.run_id == paused["run_id"]
                     and r.status != "needs_you"],
            what="the paused run's end",
        )  # fmt: skip
        assert d.stop() == 0
    assert ended[0].status == "expired", d.log()
    assert asked_again == []
    assert [r for r in rows("drafter") if r.parent_run_id == paused["run_id"]] == []
