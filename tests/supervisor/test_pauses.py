"""supervisor/engine/pauses.py's decision for a paused run, from its request's state (pure)."""

from __future__ import annotations

import pytest

from ipc import Answer
from routines.proposals import Proposal, ProposalState
from supervisor.engine.pauses import Verb, answer_of, step, waiting_reason

NOW = "2026-12-07T15:00:00+00:00"


def request(state: ProposalState, **fields: object) -> Proposal:
    base: dict[str, object] = {
        "id": 7,
        "routine": "drafter",
        "run_id": "20261207T140000-drafter-3f9a1c",
        "action": "send-reply",
        "command": "cat",
        "input": "Hi Bob\n",
        "summary": "Reply to Bob",
        "fingerprint": "f",
        "created_at": "2026-12-07T14:00:00+00:00",
        "expires_at": "2026-12-08T14:00:00+00:00",
        "state": state,
    }
    return Proposal(**{**base, **fields})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("state", "verb"),
    [
        (ProposalState.WAITING, Verb.WAIT),
        (ProposalState.RUNNING, Verb.WAIT),  # approved: its action still runs
        (ProposalState.DONE, Verb.RESUME),
        (ProposalState.DENIED, Verb.RESUME),
        (ProposalState.INVALIDATED, Verb.RESUME),
        (ProposalState.EXPIRED, Verb.EXPIRE),
    ],
)
def test_each_state_of_the_request_decides_the_runs_next_step(
    state: ProposalState, verb: Verb
) -> None:
    assert step(request(state), NOW).verb is verb


def test_a_waiting_request_past_its_time_expires_the_run() -> None:
    late = request(ProposalState.WAITING, expires_at="2026-12-07T14:59:59+00:00")
    decided = step(late, NOW)
    assert (decided.verb, decided.note) == (
        Verb.EXPIRE,
        "; nobody answered by 2026-12-07T14:59:59+00:00: expired",
    )


def test_a_run_without_its_request_here_waits_for_the_machine_that_has_it() -> None:
    assert step(None, NOW).verb is Verb.WAIT


def test_the_answer_says_who_decided_when_and_what_ran() -> None:
    done = request(
        ProposalState.DONE,
        decided_by="cli",
        decided_at="2026-12-07T14:30:00+00:00",
        exit_status=0,
        output="sent\n",
    )
    assert step(done, NOW).note == (
        "; approved by cli at 2026-12-07T14:30:00+00:00 (#7 ran, exit status 0): resumed"
    )
    assert answer_of(done) == Answer(
        proposal=7,
        action="send-reply",
        state="done",
        decided_by="cli",
        decided_at="2026-12-07T14:30:00+00:00",
        why=None,
        exit_status=0,
        output="sent\n",
    )
    assert waiting_reason({"drafter": "R1"}, "drafter") == "waiting for you on R1"
    assert waiting_reason({"drafter": "R1"}, "other") is None
