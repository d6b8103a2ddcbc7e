"""Providers end to end: every failure ends the run `failed` with a readable message (never
ok), the SDK's retries on 429/529, the spend limit not retried, Anthropic's stop reasons,
Ollama's tool-call forms and tool-less models, and the API key's sources. At the end, parsing
and rendering (worker/providers/, the loop's stop messages, the Ollama URL) without a process."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from ipc import Job
from tests.fakes import FakeAnthropic, FakeOllama, Reply
from tests.fakes import anthropic_replies as A
from tests.fakes import ollama_replies as O
from tests.worker.worker_harness import (
    API_KEY,
    WorkerRun,
    make_job,
    routine_toml,
    run_worker,
    worker_env,
)
from worker.providers import ollama
from worker.providers.base import (
    AssistantTurn,
    Conversation,
    Stop,
    ToolCall,
    ToolResult,
    ToolResultsTurn,
    UserTurn,
)
from worker.providers.base import Reply as ModelReply

LONG = "All quiet today: nothing needs you, and here is the detail of it. " * 6


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when this returns: connection refused


def _anthropic_job(home: Path, ollama: FakeOllama, extra_agent: str = "") -> Job:
    toml = routine_toml(route="anthropic", extra_agent=extra_agent)
    return make_job(home, toml, ollama_url=ollama.url)


def _assert_failed(r: WorkerRun, *needles: str, status: str = "failed") -> None:
    res = r.result
    assert res.status == status, res
    assert res.output_file is None
    for n in needles:
        assert n in (res.error or ""), res.error
    assert r.returncode == 0, r.stderr
    assert API_KEY not in r.stderr and all(API_KEY not in str(m) for m in r.messages)


# --- Anthropic ---


def test_429_and_529_are_retried_by_the_sdk_then_succeed(
    home: Path, ollama: FakeOllama, claude: FakeAnthropic, env: dict[str, str]
) -> None:
    claude.add(A.rate_limited(), A.overloaded(), A.text(LONG))
    r = run_worker(_anthropic_job(home, ollama), env=env)
    assert r.result.status == "ok"
    assert len(claude.messages) == 3
    assert [m.headers["x-stainless-retry-count"] for m in claude.messages] == ["0", "1", "2"]
    assert claude.messages[0].headers["authorization"] == f"Bearer {API_KEY}"
    assert len(r.usages) == 1  # one model call, however many HTTP attempts


def test_overloaded_after_the_retries_fails(
    home: Path, ollama: FakeOllama, claude: FakeAnthropic, env: dict[str, str]
) -> None:
    claude.add(A.overloaded(), A.overloaded(), A.overloaded())
    r = run_worker(_anthropic_job(home, ollama), env=env)
    _assert_failed(r, "overloaded", "after 2 retries")
    assert len(claude.messages) == 3


def test_a_spend_limit_429_is_not_retried(
    home: Path, ollama: FakeOllama, claude: FakeAnthropic, env: dict[str, str]
) -> None:
    claude.add(A.spend_limit(), A.text(LONG))
    r = run_worker(_anthropic_job(home, ollama), env=env)
    _assert_failed(r, "spend limit", "2026-08-01")
    assert len(claude.messages) == 1


def test_a_bad_key_fails_without_showing_the_key(
    home: Path, ollama: FakeOllama, claude: FakeAnthropic, env: dict[str, str]
) -> None:
    claude.add(A.bad_key())
    r = run_worker(_anthropic_job(home, ollama), env=env)
    _assert_failed(r, "rejected the API key", "401")
    assert len(claude.messages) == 1


def test_a_missing_key_fails_before_any_call(
    home: Path, ollama: FakeOllama, claude: FakeAnthropic
) -> None:
    env = worker_env(ANTHROPIC_BASE_URL=claude.url)
    r = run_worker(_anthropic_job(home, ollama), env=env)
    _assert_failed(r, "no Anthropic API key", "ANTHROPIC_API_KEY")
    assert claude.messages == []


@pytest.mark.slow
def test_the_key_file_is_used_and_a_readable_one_warns(
    home: Path, ollama: FakeOllama, claude: FakeAnthropic
) -> None:
    key_file = home / "secrets" / "anthropic-key"
    key_file.parent.mkdir()
    key_file.write_text("sk-from-file\n")
    key_file.chmod(0o644)
    claude.add(A.text(LONG))
    r = run_worker(_anthropic_job(home, ollama), env=worker_env(ANTHROPIC_BASE_URL=claude.url))
    assert r.result.status == "ok"
    assert claude.messages[0].headers["authorization"] == "Bearer sk-from-file"
    warns = [e.text for e in r.events_of("warn")]
    assert any("anthropic-key" in w and "chmod 600" in w for w in warns), warns
    assert "sk-from-file" not in r.stderr and all("sk-from-file" not in str(m) for m in r.messages)


@pytest.mark.slow
def test_connection_refused_fails_after_the_retries(home: Path, ollama: FakeOllama) -> None:
    env = worker_env(ANTHROPIC_BASE_URL=f"http://127.0.0.1:{_closed_port()}", ANTHROPIC_API_KEY="k")
    r = run_worker(_anthropic_job(home, ollama), env=env)
    _assert_failed(r, "cannot reach Anthropic at http://127.0.0.1:", "after 2 retries")


@pytest.mark.slow
def test_a_dropped_connection_is_retried_by_the_sdk(
    home: Path, ollama: FakeOllama, claude: FakeAnthropic, env: dict[str, str]
) -> None:
    claude.add(Reply(drop=True), A.text(LONG))
    r = run_worker(_anthropic_job(home, ollama), env=env)
    assert r.result.status == "ok" and len(claude.messages) == 2


@pytest.mark.slow
def test_a_slow_anthropic_times_out_within_the_run(
    home: Path, ollama: FakeOllama, claude: FakeAnthropic, env: dict[str, str]
) -> None:
    claude.add(*(A.text(LONG, delay=30) for _ in range(3)))
    job = _anthropic_job(home, ollama, extra_agent="run_timeout_sec = 2")
    r = run_worker(job, env=env)
    # Out of run_timeout_sec: `timeout`, which counts as a strike like `failed`.
    _assert_failed(
        r,
        "the run reached its time limit (run_timeout_sec = 2): Anthropic did not answer within",
        status="timeout",
    )


@pytest.mark.slow
def test_an_unknown_premium_model_fails_before_any_call(
    home: Path, ollama: FakeOllama, claude: FakeAnthropic, env: dict[str, str]
) -> None:
    job = _anthropic_job(home, ollama, extra_agent='premium_model = "claude-future-9"')
    r = run_worker(job, env=env)
    _assert_failed(r, 'no price known for model "claude-future-9"', "[pricing.")
    assert claude.messages == []
    # A price from config.toml (sent in the job) makes it usable.
    claude.add(A.text(LONG, input_tokens=1000, output_tokens=1000))
    toml = routine_toml(route="anthropic", extra_agent='premium_model = "claude-future-9"')
    job = make_job(
        home, toml, ollama_url=ollama.url, run_id="r2", pricing={"claude-future-9": [1.0, 2.0]}
    )
    r = run_worker(job, env=env)
    assert r.result.status == "ok"
    assert r.total("dollars") == pytest.approx((1000 * 1.0 + 1000 * 2.0) / 1e6)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("reply", "needle"),
    [
        (A.text("The brief is", stop_reason="max_tokens"), "cut off at max_tokens"),
        (A.text("", stop_reason="refusal"), "declined"),
    ],
    ids=["max_tokens", "refusal"],
)
def test_stop_reasons_that_are_not_success(
    home: Path,
    ollama: FakeOllama,
    claude: FakeAnthropic,
    env: dict[str, str],
    reply: Reply,
    needle: str,
) -> None:
    claude.add(reply)
    r = run_worker(_anthropic_job(home, ollama), env=env)
    _assert_failed(r, needle)


def test_pause_turn_is_sent_back_and_the_turn_continues(
    home: Path, ollama: FakeOllama, claude: FakeAnthropic, env: dict[str, str]
) -> None:
    claude.add(A.text("Working on it", stop_reason="pause_turn"), A.text(LONG))
    r = run_worker(_anthropic_job(home, ollama), env=env)
    assert r.result.status == "ok"
    second = claude.messages[1].body["messages"]
    assert second[-1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "Working on it"}],
    }


# --- Ollama ---


def _ollama_job(home: Path, url: str, tools: tuple[str, ...] = (), extra_agent: str = "") -> Job:
    toml = routine_toml(route="ollama", tools=tools, extra_agent=extra_agent)
    return make_job(home, toml, ollama_url=url)


def test_ollama_not_running_fails_with_a_hint(home: Path) -> None:
    r = run_worker(_ollama_job(home, f"http://127.0.0.1:{_closed_port()}"))
    _assert_failed(r, "cannot reach Ollama", "ollama serve")


def test_an_ollama_model_that_is_not_pulled_fails_with_the_pull_command(
    home: Path, ollama: FakeOllama
) -> None:
    ollama.add(O.model_not_found("llama3.2:3b"))
    r = run_worker(_ollama_job(home, ollama.url))
    _assert_failed(r, "ollama pull llama3.2:3b")


def test_an_ollama_stream_cut_by_the_time_limit_records_what_arrived(
    home: Path, ollama: FakeOllama
) -> None:
    ollama.add(O.text("word " * 100, word_delay=0.25, eval_count=100))
    r = run_worker(_ollama_job(home, ollama.url, extra_agent="run_timeout_sec = 4"))
    res = r.result
    assert res.status == "timeout", res
    assert "stopped at its time limit while the model was still answering" in (res.error or "")
    received = sum(u.local_output for u in r.usages)
    assert 3 <= received < 100 and f"{received} tokens received" in (res.error or "")


def test_a_slow_ollama_times_out_and_a_dropped_one_fails(home: Path, ollama: FakeOllama) -> None:
    ollama.add(O.text(LONG, delay=30))
    r = run_worker(_ollama_job(home, ollama.url, extra_agent="run_timeout_sec = 2"))
    _assert_failed(
        r,
        "the run reached its time limit (run_timeout_sec = 2): ",
        "did not answer within",
        status="timeout",
    )
    ollama.add(Reply(drop=True))
    r = run_worker(_ollama_job(home, ollama.url))
    _assert_failed(r, "Ollama at")


def test_ollama_errors_and_garbage_fail(home: Path, ollama: FakeOllama) -> None:
    ollama.add(O.error(500, "llama runner process has terminated"), Reply(200, "not json"))
    r = run_worker(_ollama_job(home, ollama.url))
    _assert_failed(r, "HTTP 500", "llama runner process has terminated")
    r = run_worker(_ollama_job(home, ollama.url))
    _assert_failed(r, "not an Ollama chat response")


def test_a_model_without_tool_support_falls_back_to_a_plain_reply(
    home: Path, ollama: FakeOllama
) -> None:
    ollama.add(O.does_not_support_tools("gemma:2b"), O.text(LONG))
    job = _ollama_job(
        home, ollama.url, tools=("shell:date",), extra_agent='local_model = "gemma:2b"'
    )
    r = run_worker(job)
    assert r.result.status == "ok" and "All quiet today" in r.output()
    assert "tools" in ollama.chats[0].body and "tools" not in ollama.chats[1].body
    warns = [e.text for e in r.events_of("warn")]
    assert any("does not support tools" in w for w in warns)
    assert "does not support tools" in r.stderr


@pytest.mark.parametrize("as_string", [False, True], ids=["object", "json-string"])
def test_tool_call_arguments_as_object_or_string_both_work(
    home: Path, ollama: FakeOllama, as_string: bool
) -> None:
    call = ("report_outcome", {"status": "needs-attention", "summary": "two PRs wait"})
    ollama.add(O.tool_calls(call, arguments_as_string=as_string), O.text(LONG))
    r = run_worker(_ollama_job(home, ollama.url))
    assert (r.result.status, r.result.outcome, r.result.summary) == (
        "ok",
        "needs-attention",
        "two PRs wait",
    )
    tool_msg = ollama.chats[1].body["messages"][-1]
    assert tool_msg == {
        "role": "tool",
        "content": '{"recorded": true}',
        "tool_name": "report_outcome",
    }


def test_ollama_host_from_the_job_and_no_proxy(home: Path, ollama: FakeOllama) -> None:
    """The URL in the job is used as is; a loopback Ollama is reached directly even with a
    proxy in the environment (tests/worker/test_webclient.py has the proxied cases)."""
    ollama.add(O.text(LONG))
    env = worker_env(http_proxy=f"http://127.0.0.1:{_closed_port()}", HTTP_PROXY=None)
    r = run_worker(_ollama_job(home, ollama.url), env=env)
    assert r.result.status == "ok" and len(ollama.chats) == 1


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
    foreign = ModelReply(
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

    assert needle in stop_failure(ModelReply("x", (), stop, reason, "m", 1, 1))


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
