"""routines.conversation: the 256 KB cap (shortened, never refused), strict reading of an
untrusted file, no link followed; the ledger's reply step from a v5 file; pruning."""

from __future__ import annotations

import os
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest

from routines import conversation as conv
from routines.conversation import (
    MAX_CONVERSATION,
    ConversationInvalid,
    Record,
    Role,
    StoredCall,
    StoredResult,
    StoredTurn,
)
from routines.ledger import Ledger
from routines.ledger.migrate_sqlite import LEDGER_VERSION, STEPS, V1
from routines.runs import RunStatus, Trigger
from supervisor.engine.retention import cutoffs, prune_routine

RUN = "20261203T070000-inbox-3f9a1c"


def exchange(n: int, output: str) -> tuple[StoredTurn, StoredTurn]:
    call = StoredCall(f"toolu_{n}", "run_shell", {"command": "cat mail"})
    return (
        StoredTurn(Role.ASSISTANT, f"step {n}", (call,)),
        StoredTurn(Role.TOOL, results=(StoredResult(f"toolu_{n}", "run_shell", output),)),
    )


def record(*turns: StoredTurn, system: str = "Draft replies.") -> Record:
    return Record(RUN, "inbox", "ab" * 32, system, (StoredTurn(Role.USER, "do it"), *turns))


def well_formed(rec: Record) -> None:
    """What a provider needs: a user turn first, tool results right after their call."""
    assert rec.turns[0].role is Role.USER
    for n, t in enumerate(rec.turns):
        if t.role is Role.TOOL:
            before = rec.turns[n - 1]
            assert before.role is Role.ASSISTANT
            assert {r.id for r in t.results} == {c.id for c in before.tool_calls}


def test_a_small_record_round_trips_unchanged() -> None:
    rec = record(*exchange(1, "3 new mails"), StoredTurn(Role.ASSISTANT, "# Drafts"))
    data = conv.fit(rec)
    assert conv.parse(data) == rec
    assert orjson.loads(data)["shortened"] is False


def test_a_lone_surrogate_from_a_model_is_written_as_a_replacement_character() -> None:
    call = StoredCall("toolu_1", "run_shell", {"command": "echo \ud800"})
    rec = record(StoredTurn(Role.ASSISTANT, "bad \udfff", (call,)))
    back = conv.parse(conv.fit(rec))
    assert back.turns[1].text == "bad \ufffd"
    assert back.turns[1].tool_calls[0].arguments == {"command": "echo \ufffd"}


def test_long_tool_output_is_cut_to_fit_and_says_so() -> None:
    huge = "x" * (400 * 1024)
    rec = record(*exchange(1, huge), StoredTurn(Role.ASSISTANT, "# Drafts"))
    data = conv.fit(rec)
    assert len(data) <= MAX_CONVERSATION
    back = conv.parse(data)
    assert back.shortened
    well_formed(back)
    kept = back.turns[2].results[0].content
    assert kept.startswith("x" * 1000) and "more characters cut" in kept
    assert back.turns[-1].text == "# Drafts"  # short texts are kept whole


def test_many_turns_drop_the_oldest_exchanges_in_pairs() -> None:
    turns = [t for n in range(400) for t in exchange(n, "y" * 2000)]
    rec = record(*turns, StoredTurn(Role.ASSISTANT, "the answer"))
    data = conv.fit(rec)
    assert len(data) <= MAX_CONVERSATION
    back = conv.parse(data)
    well_formed(back)
    assert back.shortened and back.turns[0].text == "do it"
    assert back.turns[-1].text == "the answer"
    assert back.turns[1].text != "step 0"  # the oldest went first
    assert len(back.turns) < len(rec.turns)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (b"not json", "not JSON"),
        (b'{"version": 2}', "not a version 1 conversation record"),
        (b'{"version": 1, "turns": []}', "turns: expected a non-empty list"),
        (
            b'{"version": 1, "turns": [{"role": "system", "text": "x"}]}',
            "turns[0].role: expected user, assistant or tool",
        ),
        (
            b'{"version": 1, "turns": [{"role": "user", "text": "a"}, {"role": "tool", '
            b'"results": [{"id": "1", "name": "x", "content": "", "is_error": false}]}]}',
            "turns[1]: tool results must follow an assistant turn",
        ),
        (
            b'{"version": 1, "turns": [{"role": "user", "text": 5}]}',
            "turns[0].text: expected a string, found int",
        ),
        (
            b'{"version": 1, "run_id": "../x", "routine": "inbox", "routine_sha256": "",'
            b' "system": "", "turns": [{"role": "user", "text": "a"}]}',
            "is not a run id",
        ),
        (b" " * (MAX_CONVERSATION + 1), "over the 262,144 cap"),
    ],
)
def test_parse_refuses_what_is_not_a_record(doc: bytes, message: str) -> None:
    with pytest.raises(ConversationInvalid, match=message.replace("[", r"\[").replace("]", r"\]")):
        conv.parse(doc)


def test_save_and_load_beneath_the_state_dir(tmp_path: Path) -> None:
    state = tmp_path / "state" / "inbox"
    rec = record(StoredTurn(Role.ASSISTANT, "hi"))
    size, shortened = conv.save(state, rec)
    path = state / "runs" / f"{RUN}.conversation.json"
    assert path.stat().st_size == size and not shortened
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert conv.load(state, RUN) == rec
    assert conv.load(state, "20261203T070000-inbox-000000") is None
    with pytest.raises(ConversationInvalid, match="is not a run id"):
        conv.load(state, "../../secrets")


def test_load_follows_no_link_and_checks_whose_record_it_is(tmp_path: Path) -> None:
    state = tmp_path / "state" / "inbox"
    conv.save(state, record())
    elsewhere = tmp_path / "elsewhere.json"
    path = state / "runs" / f"{RUN}.conversation.json"
    path.rename(elsewhere)
    path.symlink_to(elsewhere)
    with pytest.raises(ConversationInvalid, match="not a regular file"):
        conv.load(state, RUN)
    path.unlink()
    # A record copied under another run's name is not that run's.
    other = "20261203T080000-inbox-aaaaaa"
    os.link(elsewhere, state / "runs" / f"{other}.conversation.json")
    with pytest.raises(ConversationInvalid, match=f"holds run {RUN}, not {other}"):
        conv.load(state, other)
    # A runs/ that is a link: refused, not followed.
    (state / "runs").rename(tmp_path / "runs-real")
    (state / "runs").symlink_to(tmp_path / "runs-real")
    with pytest.raises(ConversationInvalid):
        conv.load(state, other)


def test_conversations_are_pruned_with_the_run_logs(tmp_path: Path) -> None:
    now = datetime(2026, 12, 3, 12, tzinfo=UTC)
    runs = tmp_path / "state" / "inbox" / "runs"
    runs.mkdir(parents=True)
    old = (now - timedelta(days=100)).strftime("%Y%m%dT%H%M%S") + "-inbox-aaaaaa"
    older = (now - timedelta(days=120)).strftime("%Y%m%dT%H%M%S") + "-inbox-bbbbbb"
    new = (now - timedelta(days=1)).strftime("%Y%m%dT%H%M%S") + "-inbox-cccccc"
    for run_id in (old, older, new):
        (runs / f"{run_id}.jsonl").write_text("{}\n")
        (runs / f"{run_id}.conversation.json").write_text("{}")
    assert prune_routine(str(tmp_path / "state"), "inbox", cutoffs(now, 90)) == 4
    assert sorted(p.name for p in runs.iterdir()) == [
        f"{new}.conversation.json",
        f"{new}.jsonl",
    ]


def build_v5(path: Path) -> None:
    """A v5 ledger (the schema before replies), with plain sqlite3 from the migration steps
    that made it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    db.execute(V1)
    for step in range(2, 6):
        columns, statements = STEPS[step]
        for column in columns:
            db.execute(f"ALTER TABLE runs ADD COLUMN {column}")
        for statement in statements:
            db.execute(statement)
    db.execute(
        "INSERT INTO runs (run_id, routine, trigger, status, started_at, finished_at, dollars) "
        "VALUES (?, 'inbox', 'manual', 'ok', '2026-12-01T07:00:00.000000Z', "
        "'2026-12-01T07:01:00.000000Z', 0.5)",
        (RUN,),
    )
    db.execute("PRAGMA user_version = 5")
    db.commit()
    db.close()


def test_a_v5_ledger_gains_parent_run_ids_and_threads(tmp_path: Path) -> None:
    path = tmp_path / "state" / "ledger.db"
    build_v5(path)
    now = datetime(2026, 12, 3, 12, tzinfo=UTC)
    with Ledger(path) as ledger:
        assert ledger.version == LEDGER_VERSION
        old = ledger.run(RUN)
        assert old is not None and old.parent_run_id is None and old.dollars == 0.5
        child = "20261203T120000-inbox-cccccc"
        grandchild = "20261203T120500-inbox-dddddd"
        ledger.record_run(
            "inbox",
            run_id=child,
            trigger=Trigger.REPLY,
            status=RunStatus.OK,
            now=now,
            parent_run_id=RUN,
        )
        ledger.record_run(
            "inbox",
            run_id=grandchild,
            trigger=Trigger.REPLY,
            status=RunStatus.OK,
            now=now + timedelta(minutes=5),
            parent_run_id=child,
        )
        ledger.record_run(
            "inbox", run_id="other", trigger=Trigger.MANUAL, status=RunStatus.OK, now=now
        )
        assert [r.run_id for r in ledger.thread(grandchild)] == [RUN, child, grandchild]
        assert [r.run_id for r in ledger.thread(RUN)] == [RUN, child, grandchild]
        assert [r.run_id for r in ledger.thread("other")] == ["other"]
        assert ledger.thread("nope") == []
        [reply] = ledger.replies_to([RUN])
        assert (reply.run_id, reply.trigger, reply.parent_run_id) == (child, "reply", RUN)
    db = sqlite3.connect(path)
    indexes = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    assert "runs_parent" in indexes
    db.close()
