"""The worker's pure decisions and parsers, without a process: router, budget, memory
trimming, provider parsing and rendering, titles, prompts, the key lookup."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ipc import Event, Result
from routines.outputs import output_name
from routines.spec import AgentSpec, Escalation, OnExceed
from worker import budget, keys, memory, prompts, router
from worker.budget import PremiumAllowance, SpendCheck
from worker.channel import Channel
from worker.output import render_markdown, render_title
from worker.providers import ollama
from worker.providers.base import (
    AssistantTurn,
    Conversation,
    Reply,
    Stop,
    ToolCall,
    ToolResult,
    ToolResultsTurn,
    UserTurn,
)

WORDS_40 = " ".join(["word"] * 40)
ON = Escalation()


# --- router ---


@pytest.mark.parametrize(
    ("text", "fires"),
    [
        (WORDS_40, False),
        (" ".join(["word"] * 39), True),
        (WORDS_40 + " I'm NOT SURE", True),
        (WORDS_40 + " I don\u2019t know", True),
        (WORDS_40 + " unable to reach it", True),
        ("", True),
    ],
)
def test_low_confidence(text: str, fires: bool) -> None:
    assert router.low_confidence(text) is fires


@pytest.mark.parametrize(
    ("system", "fires"),
    [
        ("Prove the invariant.", True),
        ("Use chain of thought.", True),
        ("DEDUCE the cause", True),
        ("Derive totals", True),
        ("derivative reasoning", True),  # "reasoning" is a word of its own here
        ("the derivative table, proven recipes, deduced", False),
        ("a plain daily brief", False),
    ],
)
def test_reasoning_regex_is_word_bounded(system: str, fires: bool) -> None:
    assert router.reasoning_task(system, "", ()) is fires


def test_reasoning_by_tag_and_by_user_turn() -> None:
    assert router.reasoning_task("brief", "", ("reasoning",))
    assert router.reasoning_task("brief", "explain why it broke", ())
    assert not router.reasoning_task("brief", "", ("work",))


@pytest.mark.parametrize(
    ("text", "prompt", "fires"),
    [
        ("", 3687, True),
        ("", 3686, False),
        (" \n", 4096, True),
        ("x", 4096, False),
        ("", None, False),
    ],
)
def test_context_overflow_threshold(text: str, prompt: int | None, fires: bool) -> None:
    assert router.context_overflow(text, prompt, 4096) is fires  # 0.9 * 4096 = 3686.4


def test_decisions_respect_toggles_and_the_cap() -> None:
    off = Escalation(
        on_low_confidence=False,
        on_reasoning_task=False,
        on_context_overflow=False,
        on_malformed_tool_json=False,
    )
    assert router.after_reply(off, 3, "", 4000, 4096).trigger is None
    assert router.on_malformed(off, 3).trigger is None
    assert router.before_local(off, 3, "prove it", "", ()).trigger is None
    d = router.after_reply(ON, 0, "", 4000, 4096)
    assert (d.trigger, d.escalate, d.capped) == (router.RouterTrigger.CONTEXT_OVERFLOW, False, True)
    d = router.after_reply(ON, 1, "short", 10, 4096)
    assert (d.trigger, d.escalate) == (router.RouterTrigger.LOW_CONFIDENCE, True)
    assert router.on_malformed(ON, 2).escalate


def test_the_runtime_words_never_make_a_reasoning_task() -> None:
    """Only the routine's own prompt may fire reasoning_task, never our boilerplate."""
    agent = AgentSpec(system="x", tools=())
    specs = prompts.tool_specs(agent)
    for trigger in ("schedule", "catch_up", "manual"):
        task = prompts.task_text(datetime(2026, 7, 25, 6, tzinfo=UTC), trigger)
        assert not router.REASONING_RE.search(task)
    assert not router.REASONING_RE.search(prompts.runtime_notes("day-brief", specs))
    assert not router.REASONING_RE.search(json.dumps([s.description for s in specs]))


# --- budget ---


def test_budget_verdicts() -> None:
    none = PremiumAllowance(None, None)
    assert budget.check(none, budget.Spent(10**9, 10**6), OnExceed.SKIP)[0] is SpendCheck.PROCEED
    tokens = PremiumAllowance(100, None)
    assert budget.check(tokens, budget.Spent(99, 0), OnExceed.SKIP)[0] is SpendCheck.PROCEED
    for mode, verdict in (
        (OnExceed.SKIP, SpendCheck.STOP),
        (OnExceed.NOTIFY, SpendCheck.STOP),
        (OnExceed.DEGRADE, SpendCheck.DEGRADE),
    ):
        got, reason = budget.check(tokens, budget.Spent(100, 0), mode)
        assert got is verdict and reason and "100 of its 100" in reason
    dollars = PremiumAllowance(None, 0.5)
    assert budget.check(dollars, budget.Spent(0, 0.49), OnExceed.SKIP)[0] is SpendCheck.PROCEED
    assert budget.check(dollars, budget.Spent(0, 0.5), OnExceed.SKIP)[0] is SpendCheck.STOP
    assert (
        budget.check(PremiumAllowance(None, 0.0), budget.Spent(), OnExceed.SKIP)[0]
        is SpendCheck.STOP
    )
    assert (
        budget.check(PremiumAllowance(None, -1.0), budget.Spent(), OnExceed.SKIP)[0]
        is SpendCheck.STOP
    )


def test_output_cap() -> None:
    per_token = 15.0 / 1e6
    assert budget.output_cap(PremiumAllowance(None, None), budget.Spent(), 4096, per_token) == (
        4096,
        False,
    )
    assert budget.output_cap(PremiumAllowance(1000, None), budget.Spent(900), 4096, per_token) == (
        100,
        True,
    )
    assert budget.output_cap(PremiumAllowance(None, 0.001), budget.Spent(), 4096, per_token) == (
        66,
        True,
    )
    assert budget.output_cap(PremiumAllowance(None, 1.0), budget.Spent(), 4096, per_token) == (
        4096,
        False,
    )
    assert budget.output_cap(PremiumAllowance(10, None), budget.Spent(10), 4096, per_token)[0] == 1


# --- memory ---


@given(st.lists(st.text(alphabet="ab \n", max_size=300), max_size=40))
def test_trim_fits_the_cap_and_keeps_the_newest_text(chunks: list[str]) -> None:
    text = "".join(chunks)
    out = memory.trim(text, cap=1000, step=100)
    assert len(out) <= 1000
    assert text.endswith(out)
    if len(text) <= 1000:
        assert out == text


def test_trim_cuts_about_500_characters_to_the_next_newline() -> None:
    lines = [f"{i:04d} " + "z" * 94 + "\n" for i in range(41)]  # 41 lines of 100 chars
    out = memory.trim("".join(lines))
    assert out == "".join(lines[6:])  # ~500 chars, realigned: lines 0-5 go (the 6th ends at 600)
    assert memory.trim("a" * 5000, cap=4096) == "a" * 4000  # no newline at all: 500 at a time


def test_for_prompt_keeps_the_newest_whole_lines() -> None:
    text = "".join(f"line {i}\n" for i in range(1000))
    out = memory.for_prompt(text, cap=100)
    assert len(out) <= 100 and out.endswith("line 999") and out.startswith("line ")
    assert memory.for_prompt("\nshort\n") == "short"


def test_entry_and_append(tmp_path: Path) -> None:
    started = datetime(2026, 7, 25, 6, 0, tzinfo=timezone(timedelta(hours=-4)))
    e = memory.entry("day-brief", started, "One.\n  Two.")
    assert e == "## 2026-07-25 06:00 · day-brief\nOne. Two.\n"
    path = tmp_path / "deep" / "memory.md"
    memory.append(path, e)
    memory.append(path, e)
    assert path.read_text() == e + "\n" + e
    assert (path.stat().st_mode & 0o777) == 0o600


# --- Ollama parsing ---


def _chat(message: dict[str, object], **extra: object) -> dict[str, object]:
    return {"model": "m", "message": message, "done": True, **extra}


def test_parse_chat_tool_call_forms() -> None:
    names = {"run_shell", "report_outcome"}
    obj = ollama.parse_chat(
        _chat(
            {
                "content": "",
                "tool_calls": [
                    {"function": {"name": "run_shell", "arguments": {"command": "date"}}}
                ],
            }
        ),
        model="m",
        tool_names=names,
    )
    assert obj.tool_calls[0].arguments == {"command": "date"} and obj.malformed is None
    assert obj.stop is Stop.TOOL_USE and obj.input_tokens is None  # no count: unknown
    text = ollama.parse_chat(
        _chat(
            {
                "content": "",
                "tool_calls": [
                    {"function": {"name": "run_shell", "arguments": '{"command": "date"}'}}
                ],
            }
        ),
        model="m",
        tool_names=names,
    )
    assert text.tool_calls[0].arguments == {"command": "date"} and text.malformed is None
    bad = ollama.parse_chat(
        _chat(
            {"content": "", "tool_calls": [{"function": {"name": "run_shell", "arguments": "[1,"}}]}
        ),
        model="m",
        tool_names=names,
    )
    assert bad.tool_calls[0].arguments is None and bad.malformed and "json.loads" in bad.malformed


@pytest.mark.parametrize(
    ("content", "found"),
    [
        ('{"name": "run_shell", "parameters": {"command": "date"}}', True),
        ('<|python_tag|>{"name": "run_shell", "parameters": {"command": "date"}}', True),
        ('```json\n{"name": "run_shell", "arguments": {"command": "date"}}\n```', True),
        ('{"type": "function", "function": {"name": "run_shell", "parameters": {}}}', True),
        ('{"name": "weather", "parameters": {}}', False),  # not a tool we offered
        ('Run this: {"name": "run_shell", "parameters": {}}', False),  # prose around it
        ('{"summary": "all good"}', False),
        ("plain text", False),
    ],
)
def test_a_tool_call_written_as_json_in_content(content: str, found: bool) -> None:
    call = ollama.tool_call_in_content(content, {"run_shell"})
    assert (call is not None) is found
    if call is not None:
        assert call.name == "run_shell"


def test_ollama_render_uses_role_tool_and_keeps_native_messages() -> None:
    call = ToolCall("c1", "run_shell", {"command": "date"})
    foreign = Reply(
        "",
        (call,),
        Stop.TOOL_USE,
        "tool_use",
        "claude",
        1,
        1,
        provider="anthropic",
        native=[{"x": 1}],
    )
    conv = Conversation(
        "sys",
        [UserTurn("hi"), AssistantTurn(foreign), ToolResultsTurn((ToolResult(call, "out"),))],
    )
    assert ollama.render(conv) == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "run_shell", "arguments": {"command": "date"}}}],
        },
        {"role": "tool", "content": "out", "tool_name": "run_shell"},
    ]


def test_anthropic_parse_and_render() -> None:
    from worker.providers import anthropic as anth

    msg = {
        "model": "claude-sonnet-4-6",
        "content": [
            {"type": "text", "text": "Let me look."},
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "run_shell",
                "input": {"command": "date"},
            },
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 3},
    }
    reply = anth.parse_message(msg, model="claude-sonnet-4-6")
    assert (reply.text, reply.stop, reply.input_tokens, reply.output_tokens) == (
        "Let me look.",
        Stop.TOOL_USE,
        13,
        5,
    )
    assert reply.tool_calls == (ToolCall("toolu_1", "run_shell", {"command": "date"}),)
    conv = Conversation(
        "sys",
        [
            UserTurn("go"),
            AssistantTurn(reply),
            ToolResultsTurn((ToolResult(reply.tool_calls[0], "{}", True),)),
        ],
    )
    assert anth.render(conv) == [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": msg["content"]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "{}", "is_error": True}
            ],
        },
    ]
    assert anth.parse_message({"stop_reason": "weird", "content": []}, model="m").stop is Stop.OTHER


# --- outputs and prompts ---


def test_titles_and_file_names() -> None:
    started = datetime(2026, 1, 2, 3, 4, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    assert render_title(
        "Today · {{date}} {{time}} {{name}} {{other}}", name="n", started=started
    ) == ("Today · 2026-01-02 03:04 n {{other}}")
    assert output_name(started) == "2026-01-02-0304.md"
    assert render_markdown("A  title\n", "\n\nbody\n\n") == "# A title\n\nbody\n"


def test_user_turn_puts_memory_first() -> None:
    assert prompts.user_turn("Do it.", "") == "Do it."
    assert (
        prompts.user_turn("Do it.", "old\n")
        == "Prior context from earlier runs:\n\nold\n\n---\nDo it."
    )


# --- key, channel ---


def test_api_key_precedence_and_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    warnings: list[str] = []
    key_file = tmp_path / "anthropic-key"
    assert keys.find_api_key(key_file, warnings.append) is None
    key_file.write_text("  file-key \n")
    key_file.chmod(0o600)
    assert keys.find_api_key(key_file, warnings.append) == "file-key" and warnings == []
    key_file.chmod(0o640)
    assert keys.find_api_key(key_file, warnings.append) == "file-key"
    assert len(warnings) == 1 and "0640" in warnings[0] and "file-key" not in warnings[0]
    monkeypatch.setenv("ANTHROPIC_API_KEY", "env-key")
    assert keys.find_api_key(key_file, warnings.append) == "env-key"


def test_the_channel_sends_one_result_only() -> None:
    out, err = io.BytesIO(), io.StringIO()
    ch = Channel(out, "x", err)
    ch.result(Result(status="ok"))
    with pytest.raises(RuntimeError):
        ch.result(Result(status="ok"))
    assert out.getvalue().count(b"\n") == 1


@pytest.mark.parametrize(
    ("stop", "reason", "needle"),
    [
        (Stop.MAX_TOKENS, "max_tokens", "cut off at max_tokens"),
        (Stop.REFUSAL, "refusal", "declined"),
        (Stop.CONTEXT, "model_context_window_exceeded", "context window"),
        (Stop.OTHER, "some_new_reason", "some_new_reason"),
    ],
)
def test_each_unsuccessful_stop_reason_has_its_own_message(
    stop: Stop, reason: str, needle: str
) -> None:
    from worker.loop import stop_failure

    assert needle in stop_failure(Reply("x", (), stop, reason, "m", 1, 1))


@pytest.mark.parametrize(
    ("job_url", "env", "expected"),
    [
        ("http://10.0.0.5:11434", "ignored:1", "http://10.0.0.5:11434"),
        ("", None, "http://127.0.0.1:11434"),
        ("", "0.0.0.0", "http://0.0.0.0:11434"),
        ("", "gpu-box:8080", "http://gpu-box:8080"),
        ("", "[::1]:11434", "http://[::1]:11434"),
        ("", "[::1]", "http://[::1]:11434"),
        ("", "https://ollama.example/", "https://ollama.example"),
    ],
)
def test_ollama_url_falls_back_to_ollama_host(
    job_url: str, env: str | None, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from worker.context import ollama_url

    if env is None:
        monkeypatch.delenv("OLLAMA_HOST", raising=False)
    else:
        monkeypatch.setenv("OLLAMA_HOST", env)
    assert ollama_url(job_url) == expected


# --- Ollama's stream ---


def test_merge_chunks_joins_the_content_and_gathers_the_tool_calls() -> None:
    call = {"function": {"name": "run_shell", "arguments": {"command": "date"}}}
    chunks = [
        {"model": "m", "message": {"role": "assistant", "content": "Hel"}, "done": False},
        {"model": "m", "message": {"role": "assistant", "content": "lo"}, "done": False},
        {"model": "m", "message": {"role": "assistant", "content": "", "tool_calls": [call]}},
        {"model": "m", "message": {"role": "assistant", "content": ""}, "done": True,
         "done_reason": "stop", "eval_count": 7},
    ]  # fmt: skip
    merged = ollama.merge_chunks(chunks)
    assert merged["message"] == {"role": "assistant", "content": "Hello", "tool_calls": [call]}
    assert (merged["done"], merged["done_reason"], merged["eval_count"]) == (True, "stop", 7)
    reply = ollama.parse_chat(merged, model="m", tool_names={"run_shell"})
    assert reply.stop is Stop.TOOL_USE and reply.output_tokens == 7


def test_merge_chunks_keeps_an_error_line_and_gives_up_on_garbage() -> None:
    partial = {"message": {"role": "assistant", "content": "a"}, "done": False}
    assert ollama.merge_chunks([partial, {"error": "runner died"}])["error"] == "runner died"
    assert ollama.merge_chunks([]) is None
    assert ollama.merge_chunks([partial, b"not json"]) is None
    assert ollama.merge_chunks([b"not json"]) == b"not json"


def test_text_lines_sends_whole_lines_then_long_pieces_then_the_rest() -> None:
    sent: list[str] = []
    lines = ollama.TextLines(sent.append, flush_chars=10)
    for piece in ["The ", "news", ":\nfirst", " line\n", "\n", "abcdefghijkl", "mn"]:
        lines.feed(piece)
    assert sent == ["The news:", "first line", "abcdefghijkl"]
    lines.end()
    assert sent[-1] == "mn"
    quiet = ollama.TextLines(None)
    quiet.feed("x\n")
    quiet.end()


def test_a_lone_surrogate_from_a_model_never_breaks_the_pipe() -> None:
    from ipc import EventKind, decode
    from worker.providers import anthropic as anth

    out = io.BytesIO()
    Channel(out, "x", io.StringIO()).event(EventKind.LOG, "bad \ud800 text", reply="\udfff")
    sent = decode(out.getvalue())
    assert isinstance(sent, Event)
    assert sent.text.startswith("bad \ufffd") and sent.text.endswith(" text")
    assert set(sent.data["reply"]) == {"\ufffd"}
    reply = anth.parse_message({"content": [{"type": "text", "text": "a\ud800b"}]}, model="m")
    assert reply.text.startswith("a\ufffd") and reply.text.endswith("b")
    reply.text.encode("utf-8")
