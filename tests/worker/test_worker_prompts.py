"""The prompt's parts for proposed actions (worker/prompts.py): the propose_action tool only
for a routine that declares actions, and the user's decisions on earlier proposals."""

from __future__ import annotations

from ipc import Decision
from routines.spec import Action, AgentSpec
from worker import prompts


def test_propose_action_is_offered_only_when_the_routine_declares_actions() -> None:
    assert "propose_action" not in {s.name for s in prompts.tool_specs(AgentSpec(system="x"))}
    agent = AgentSpec(system="x", actions=(Action("send-reply", "msmtp -t", "Send it"),))
    [spec] = [s for s in prompts.tool_specs(agent) if s.name == "propose_action"]
    assert spec.parameters["properties"]["action"]["enum"] == ["send-reply"]
    assert "send-reply (Send it; runs `msmtp -t` with input on stdin)" in spec.description
    assert "propose_action asks the user" in prompts.runtime_notes("inbox", [spec])
    # "ask" and "files": the run waits for the answer, which the call returns.
    assert "the run waits for their answer" in prompts.runtime_notes("inbox", [spec])
    # "everything" (signed): the action runs alone; a later run hears of it.
    alone = prompts.runtime_notes("inbox", [spec], pauses=False)
    assert "a later run is told what they decided" in alone and "waits" not in alone


def test_the_decisions_on_earlier_proposals_come_before_the_task() -> None:
    decided = prompts.decisions_text(
        [
            Decision(3, "send-reply", "To Bob", "done", decided_by="cli", exit_status=0),
            Decision(4, "send-reply", "To Eve\x1b[2J", "denied", "cli", "too curt\nreally"),
            Decision(5, "send-reply", "To Al", "expired", decided_by="runtime"),
        ]
    )
    assert decided.splitlines() == [
        "What the user decided on your earlier proposals since your last run:",
        '- #3 send-reply "To Bob": approved; it ran, exit status 0',
        '- #4 send-reply "To Eve\\x1b[2J": denied; why: too curt\\nreally',
        '- #5 send-reply "To Al": expired: nobody decided in time; it did not run',
    ]
    assert prompts.decisions_text([]) == ""
    turn = prompts.user_turn("It is Monday. Do your task now.", "", decided)
    assert turn.startswith("What the user decided") and turn.endswith("Do your task now.")
