"""worker.replies: the person's answer put where a paused call's result was (pure parts)."""

from __future__ import annotations

import json
from typing import Any

from ipc import Answer
from worker.replies import NOT_RUN_RESULT, PAUSED_RESULT, answer_result


def _answer(state: str, **fields: Any) -> Answer:
    return Answer(7, "send-reply", state, **fields)


def test_an_approved_action_gives_the_model_its_real_output_and_exit_status() -> None:
    content, is_error = answer_result(
        _answer("done", decided_by="cli", exit_status=0, output="sent\n")
    )
    assert json.loads(content) == {
        "approved_by": "cli",
        "ran": True,
        "exit_status": 0,
        "output": "sent\n",
    }
    assert not is_error
    _, failed = answer_result(_answer("done", exit_status=3, output=""))
    assert failed  # the action ran and failed: the model sees an error result
    # Approved, but refused when it was to run (a write's path resolves out of its folder
    # now): no exit status, and the model is not told it ran.
    said, failed = answer_result(_answer("done", output="[error] refused: outside"))
    assert failed and json.loads(said)["ran"] is False


def test_a_refusal_is_an_error_result_with_the_reason() -> None:
    denied = answer_result(_answer("denied", why="wrong tone"))
    assert denied == (
        json.dumps({"error": "refused: the person denied it: wrong tone", "ran": False}),
        True,
    )
    expired, _ = answer_result(_answer("expired"))
    assert json.loads(expired)["error"] == "refused: nobody answered in time"
    edited, _ = answer_result(_answer("invalidated"))
    assert "edited since" in json.loads(edited)["error"]


def test_the_placeholders_are_json_the_model_can_read() -> None:
    assert json.loads(PAUSED_RESULT)["needs_you"] is True
    assert "not run" in json.loads(NOT_RUN_RESULT)["error"]
