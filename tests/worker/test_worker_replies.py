"""worker.replies: a stored conversation back to provider turns, rendered for each provider."""

from __future__ import annotations

from routines.conversation import Record, Role, StoredCall, StoredResult, StoredTurn
from worker.providers import anthropic, ollama
from worker.providers.base import Conversation, UserTurn
from worker.replies import to_turns


def ollama_record() -> Record:
    """Two tool rounds as Ollama reports them: the same id `call_0` each time, and an id
    with characters Anthropic refuses."""
    turns = [StoredTurn(Role.USER, "do it")]
    for n, raw in enumerate(("call_0", "call_0", "weird id/1")):
        turns.append(StoredTurn(Role.ASSISTANT, "", (StoredCall(raw, "run_shell", {"n": n}),)))
        turns.append(StoredTurn(Role.TOOL, results=(StoredResult(raw, "run_shell", f"out {n}"),)))
    turns.append(StoredTurn(Role.ASSISTANT, "done"))
    return Record("20261203T070000-inbox-3f9a1c", "inbox", "", "sys", tuple(turns))


def test_a_local_models_conversation_renders_for_anthropic_with_unique_paired_ids() -> None:
    conv = Conversation("sys", [*to_turns(ollama_record()), UserTurn("shorter")])
    messages = anthropic.render(conv)
    assert [m["role"] for m in messages] == ["user", *["assistant", "user"] * 4]
    uses = [b["id"] for m in messages[1:7:2] for b in m["content"]]
    results = [b["tool_use_id"] for m in messages[2:8:2] for b in m["content"]]
    assert uses == results and len(set(uses)) == 3
    assert all(i.replace("_", "").isalnum() for i in uses)
    assert messages[7] == {"role": "assistant", "content": [{"type": "text", "text": "done"}]}
    assert messages[8] == {"role": "user", "content": "shorter"}


def test_the_same_conversation_renders_for_ollama() -> None:
    conv = Conversation("sys", [*to_turns(ollama_record()), UserTurn("shorter")])
    messages = ollama.render(conv)
    assert messages[0] == {"role": "system", "content": "sys"}
    assert [m["role"] for m in messages[1:]] == [
        "user",
        *["assistant", "tool"] * 3,
        "assistant",
        "user",
    ]
    assert messages[2]["tool_calls"] == [{"function": {"name": "run_shell", "arguments": {"n": 0}}}]
    assert messages[3] == {"role": "tool", "content": "out 0", "tool_name": "run_shell"}
