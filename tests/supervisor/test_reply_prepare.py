"""supervisor.engine.reply.prepare_reply on a real ledger and real conversation files: what a reply
runs, and every refusal (no daemon, no worker)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path

import pytest

from routines.conversation import Record, Role, StoredTurn, save
from routines.ledger import Ledger
from routines.runs import RunStatus, Trigger
from routines.spec import Routine
from routines.spec.loader import load_file
from routines.spec.paths import Paths, paths
from supervisor.engine.reply import MAX_REPLY_TEXT, ReplyRefused, ReplyTo, prepare_reply
from tests.helpers import AGENT, COMMAND, write

NOW = datetime(2026, 12, 3, 7, tzinfo=UTC)
RUN = "20261203T070000-brief-3f9a1c"


@pytest.fixture
def p(vinos_env: Path) -> Paths:
    return paths()


def setup(p: Paths, text: str = AGENT, *, big: bool = False) -> Routine:
    routine = load_file(write(p.routines_dir, "brief", text))
    with Ledger(p.ledger) as ledger:
        ledger.record_run("brief", run_id=RUN, trigger=Trigger.MANUAL, status=RunStatus.OK, now=NOW)
    turns = [
        StoredTurn(Role.USER, "do it"),
        StoredTurn(Role.ASSISTANT, "x" * (300_000 if big else 5)),
    ]
    digest = hashlib.sha256(routine.text.encode()).hexdigest()
    save(p.routine_state("brief"), Record(RUN, "brief", digest, "sys", tuple(turns)))
    return routine


def prepare(p: Paths, run_id: object = RUN, text: object = "shorter") -> tuple[Routine, ReplyTo]:
    def routine_of(name: str) -> Routine:
        return load_file(p.routines_dir / f"{name}.toml")

    with Ledger(p.ledger) as ledger:
        return prepare_reply(ledger, p, routine_of, run_id, text)


def test_a_reply_names_its_parent_and_what_changed(p: Paths) -> None:
    setup(p)
    routine, reply = prepare(p)
    assert routine.name == "brief"
    assert reply.detail() == f"reply to {RUN}"
    (p.routines_dir / "brief.toml").write_text(AGENT.replace("Write the brief.", "Shorter."))
    routine, reply = prepare(p)
    assert routine.agent is not None and routine.agent.system == "Shorter."
    assert reply.detail() == (
        f"reply to {RUN}; the routine was edited since that run: this reply runs the current file"
    )


def test_a_shortened_parent_says_so(p: Paths) -> None:
    setup(p, big=True)
    _, reply = prepare(p)
    assert "conversation was shortened to fit 256 KB" in reply.detail()


@pytest.mark.parametrize(
    ("run_id", "text", "message"),
    [
        (RUN, "", "the reply is empty"),
        (RUN, "x" * (MAX_REPLY_TEXT + 1), "at most 16,384 (16 KB)"),
        ("../../../etc/passwd", "x", "is not a run id"),
        (7, "x", "is not a run id"),
        ("20261203T070000-brief-000000", "x", "no run 20261203T070000-brief-000000 in the ledger"),
    ],
)
def test_refusals(p: Paths, run_id: object, text: object, message: str) -> None:
    setup(p)
    with pytest.raises(ReplyRefused, match=message.replace("(", r"\(").replace(")", r"\)")):
        prepare(p, run_id, text)


def test_no_conversation_or_a_command_routine_is_refused(p: Paths) -> None:
    setup(p)
    (p.routine_state("brief") / "runs" / f"{RUN}.conversation.json").unlink()
    with pytest.raises(ReplyRefused, match="kept no conversation to continue"):
        prepare(p)
    (p.routine_state("brief") / "runs" / f"{RUN}.conversation.json").write_text("[]")
    with pytest.raises(ReplyRefused, match="conversation cannot be used: not a version 1"):
        prepare(p)
    write(p.routines_dir, "brief", COMMAND)
    with pytest.raises(ReplyRefused, match="brief is a command routine"):
        prepare(p)
