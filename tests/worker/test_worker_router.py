"""The auto-router end to end: each trigger firing and not, each toggle, the escalation cap,
the route labels and the token accounting (premium in input/output, local in local_*). At the
end, its pure decisions (worker/router.py) without a process."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from routines.runs import Trigger
from routines.spec import AgentSpec, Escalation
from tests.fakes import FakeAnthropic, FakeOllama, Reply
from tests.fakes import anthropic_replies as A
from tests.fakes import ollama_replies as O
from tests.worker.worker_harness import WorkerRun, make_job, routine_toml, run_worker
from worker import prompts, router

CONFIDENT = "Three meetings today, two pull requests need review, inbox is quiet. " * 6
PREMIUM = "Premium brief: " + "everything is in order and here is the detail. " * 6
ALL_OFF = """
on_low_confidence = false
on_reasoning_task = false
on_context_overflow = false
on_malformed_tool_json = false
"""


def _escalation(**toggles: bool | int) -> str:
    return "".join(f"{k} = {str(v).lower()}\n" for k, v in toggles.items())


def _run(
    home: Path,
    ollama: FakeOllama,
    env: dict[str, str],
    *,
    escalation: str = "",
    system: str = "You write the user's morning brief.",
    tags: tuple[str, ...] = (),
    tools: tuple[str, ...] = (),
    extra_agent: str = "",
) -> WorkerRun:
    toml = routine_toml(
        route="auto",
        system=system,
        escalation=escalation,
        tags=tags,
        tools=tools,
        extra_agent=extra_agent,
    )
    return run_worker(make_job(home, toml, ollama_url=ollama.url), env=env)


def test_confident_local_reply_stays_local(
    home: Path, ollama: FakeOllama, claude: FakeAnthropic, env: dict[str, str]
) -> None:
    ollama.add(O.text(CONFIDENT, prompt_eval_count=300, eval_count=90))
    r = _run(home, ollama, env)
    res = r.result
    assert (res.status, res.route, res.escalated, res.escalated_reason) == (
        "ok",
        "local",
        False,
        "",
    )
    assert res.model == "llama3.2:3b"
    assert claude.messages == []
    assert (r.total("local_input"), r.total("local_output")) == (300, 90)
    assert (r.total("input"), r.total("output"), r.total("dollars")) == (0, 0, 0)
    assert "Three meetings today" in r.output()


@pytest.mark.parametrize(
    "local_reply",
    [
        "I'm not sure what is on your calendar today. " * 8,  # a hedge, long enough
        "Inbox quiet.",  # under 40 words
    ],
    ids=["not-sure", "short"],
)
def test_low_confidence_escalates_the_same_turn_to_premium(
    home: Path, ollama: FakeOllama, claude: FakeAnthropic, env: dict[str, str], local_reply: str
) -> None:
    ollama.add(O.text(local_reply, prompt_eval_count=250, eval_count=40))
    claude.add(A.text(PREMIUM, input_tokens=400, output_tokens=120))
    r = _run(home, ollama, env)
    res = r.result
    assert (res.status, res.route, res.escalated) == ("ok", "local->premium", True)
    assert res.escalated_reason == "low_confidence"
    assert res.model == "claude-sonnet-4-6"
    assert "Premium brief" in r.output() and local_reply[:20] not in r.output()
    # The premium attempt is the same turn from the start: system prompt and user turn only.
    sent = claude.messages[0].body
    assert [m["role"] for m in sent["messages"]] == ["user"]
    assert sent["messages"][0]["content"] == ollama.chats[0].body["messages"][1]["content"]
    assert (r.total("input"), r.total("output")) == (400, 120)
    assert (r.total("local_input"), r.total("local_output")) == (250, 40)
    assert r.total("dollars") == pytest.approx((400 * 3.0 + 120 * 15.0) / 1e6)
    assert r.events_of("escalated")[0].data["reason"] == "low_confidence"


def test_low_confidence_toggle_off_keeps_a_hedged_reply(
    home: Path, ollama: FakeOllama, claude: FakeAnthropic, env: dict[str, str]
) -> None:
    ollama.add(O.text("Inbox quiet, not sure about the calendar."))
    r = _run(home, ollama, env, escalation=_escalation(on_low_confidence=False))
    assert (r.result.status, r.result.route, r.result.escalated) == ("ok", "local", False)
    assert claude.messages == []


@pytest.mark.slow
@pytest.mark.parametrize(
    ("system", "tags"),
    [
        ("Go through the inbox step by step and draft replies.", ()),
        ("Summarise the day.", ("reasoning",)),
    ],
    ids=["step-by-step", "tag"],
)
def test_reasoning_task_goes_to_premium_without_a_wasted_local_call(
    home: Path,
    ollama: FakeOllama,
    claude: FakeAnthropic,
    env: dict[str, str],
    system: str,
    tags: tuple[str, ...],
) -> None:
    claude.add(A.text(PREMIUM))
    r = _run(home, ollama, env, system=system, tags=tags)
    res = r.result
    assert (res.status, res.route, res.escalated_reason) == (
        "ok",
        "local->premium",
        "reasoning_task",
    )
    assert ollama.chats == []
    assert r.total("local_input") == 0 and r.total("input") == 100


def test_reasoning_words_inside_other_words_do_not_fire(
    home: Path, ollama: FakeOllama, claude: FakeAnthropic, env: dict[str, str]
) -> None:
    ollama.add(O.text(CONFIDENT))
    r = _run(home, ollama, env, system="Improve the derivative table; list proven recipes.")
    assert (r.result.route, r.result.escalated) == ("local", False)
    assert claude.messages == []


def test_reasoning_task_toggle_off(
    home: Path, ollama: FakeOllama, claude: FakeAnthropic, env: dict[str, str]
) -> None:
    ollama.add(O.text(CONFIDENT))
    r = _run(
        home,
        ollama,
        env,
        system="Explain why the build failed.",
        tags=("reasoning",),
        escalation=_escalation(on_reasoning_task=False),
    )
    assert (r.result.route, r.result.escalated) == ("local", False)
    assert claude.messages == []


@pytest.mark.slow
def test_context_overflow_fires_on_an_empty_reply_at_90_percent(
    home: Path, ollama: FakeOllama, claude: FakeAnthropic, env: dict[str, str]
) -> None:
    ollama.add(O.text("", prompt_eval_count=3700, eval_count=0))  # 3700 >= 0.9 * 4096
    claude.add(A.text(PREMIUM))
    r = _run(home, ollama, env)
    assert (r.result.route, r.result.escalated_reason) == ("local->premium", "context_overflow")
    assert ollama.chats[0].body["options"]["num_ctx"] == 4096


@pytest.mark.slow
def test_an_empty_reply_below_90_percent_is_not_context_overflow(
    home: Path, ollama: FakeOllama, claude: FakeAnthropic, env: dict[str, str]
) -> None:
    ollama.add(O.text("", prompt_eval_count=3000, eval_count=0))
    claude.add(A.text(PREMIUM))
    r = _run(home, ollama, env)
    # Still short, so low_confidence catches it: the reason says which trigger fired.
    assert (r.result.route, r.result.escalated_reason) == ("local->premium", "low_confidence")


@pytest.mark.slow
def test_a_missing_prompt_eval_count_is_estimated_not_zero(
    home: Path, ollama: FakeOllama, claude: FakeAnthropic, env: dict[str, str]
) -> None:
    """No prompt_eval_count (Ollama's prompt cache): the estimate still sees the overflow."""
    big_prompt = "Read all of this context carefully. " * 300  # ~2,700 estimated tokens
    ollama.add(O.text("", prompt_eval_count=None, eval_count=None))
    claude.add(A.text(PREMIUM))
    r = _run(home, ollama, env, system=big_prompt, extra_agent="local_context_tokens = 2048")
    assert (r.result.route, r.result.escalated_reason) == ("local->premium", "context_overflow")
    assert r.usages[0].local_input > 2000


def test_context_overflow_toggle_off_and_low_confidence_off_fail_the_empty_reply(
    home: Path, ollama: FakeOllama, claude: FakeAnthropic, env: dict[str, str]
) -> None:
    ollama.add(O.text("", prompt_eval_count=4000, eval_count=0))
    r = _run(
        home,
        ollama,
        env,
        escalation=_escalation(on_context_overflow=False, on_low_confidence=False),
    )
    assert (r.result.status, r.result.route, r.result.escalated) == ("failed", "local", False)
    assert "empty reply" in (r.result.error or "")
    assert claude.messages == []


@pytest.mark.slow
@pytest.mark.parametrize(
    "bad_reply",
    [
        O.tool_calls(("run_shell", '{"command": "date"')),  # arguments string cut short
        O.content_tool_call("run_shell", {"command": "date"}, fenced=True),  # llama3.2:3b
        O.tool_call_parse_error(),  # Ollama itself could not parse it: HTTP 500
    ],
    ids=["bad-arguments", "json-in-content", "ollama-500"],
)
def test_malformed_tool_json_escalates(
    home: Path,
    ollama: FakeOllama,
    claude: FakeAnthropic,
    env: dict[str, str],
    bad_reply: Reply,
) -> None:
    ollama.add(bad_reply)
    claude.add(A.tool_use(("report_outcome", {"status": "done", "summary": "all fine"})))
    claude.add(A.text(PREMIUM))
    r = _run(home, ollama, env, tools=("shell:date",))
    res = r.result
    assert (res.status, res.route, res.escalated_reason) == (
        "ok",
        "local->premium",
        "malformed_tool_json",
    )
    assert (res.outcome, res.summary) == ("done", "all fine")
    assert len(ollama.chats) == 1 and len(claude.messages) == 2
    # The premium attempt saw the report_outcome result in Anthropic's tool_result format.
    second = claude.messages[1].body["messages"]
    assert second[-1]["content"][0]["type"] == "tool_result"


def test_malformed_toggle_off_returns_an_error_result_and_the_local_run_goes_on(
    home: Path, ollama: FakeOllama, claude: FakeAnthropic, env: dict[str, str]
) -> None:
    ollama.add(O.tool_calls(("report_outcome", "{not json")))
    ollama.add(O.text(CONFIDENT))
    r = _run(home, ollama, env, escalation=_escalation(on_malformed_tool_json=False))
    assert (r.result.status, r.result.route, r.result.escalated) == ("ok", "local", False)
    tool_msg = ollama.chats[1].body["messages"][-1]
    assert tool_msg["role"] == "tool" and "not a valid JSON object" in tool_msg["content"]
    assert claude.messages == []


def test_a_json_tool_call_in_content_runs_as_a_call_when_not_escalating(
    home: Path, ollama: FakeOllama, claude: FakeAnthropic, env: dict[str, str]
) -> None:
    ollama.add(O.content_tool_call("report_outcome", {"status": "done", "summary": "ok"}))
    ollama.add(O.text(CONFIDENT))
    r = _run(home, ollama, env, escalation=ALL_OFF)
    assert (r.result.status, r.result.outcome, r.result.route) == ("ok", "done", "local")


def test_valid_tool_calls_do_not_fire_malformed(
    home: Path, ollama: FakeOllama, claude: FakeAnthropic, env: dict[str, str]
) -> None:
    ollama.add(O.tool_calls(("report_outcome", {"status": "done", "summary": "fine"})))
    ollama.add(
        O.tool_calls(
            ("report_outcome", {"status": "done", "summary": "fine"}), arguments_as_string=True
        )
    )
    ollama.add(O.text(CONFIDENT))
    r = _run(home, ollama, env)
    assert (r.result.route, r.result.escalated, r.result.outcome) == ("local", False, "done")
    assert claude.messages == []


def test_the_escalation_cap_keeps_the_local_reply(
    home: Path, ollama: FakeOllama, claude: FakeAnthropic, env: dict[str, str]
) -> None:
    ollama.add(O.text("Not sure. Inbox unreadable."))
    r = _run(home, ollama, env, escalation=_escalation(max_escalations_per_run=0))
    assert (r.result.status, r.result.route, r.result.escalated) == ("ok", "local", False)
    capped = [e for e in r.events_of("log") if e.data.get("capped")]
    assert capped and capped[0].data["trigger"] == "low_confidence"
    assert claude.messages == []


@pytest.mark.slow
def test_the_cap_of_one_allows_one_escalation(
    home: Path, ollama: FakeOllama, claude: FakeAnthropic, env: dict[str, str]
) -> None:
    ollama.add(O.text("Not sure."))
    claude.add(A.text("Also short."))  # premium's reply is never re-routed
    r = _run(home, ollama, env, escalation=_escalation(max_escalations_per_run=1))
    assert (r.result.status, r.result.route) == ("ok", "local->premium")
    assert len(claude.messages) == 1 and len(r.events_of("escalated")) == 1


@pytest.mark.slow
def test_hard_picked_routes_are_labelled_and_never_escalate(
    home: Path, ollama: FakeOllama, claude: FakeAnthropic, env: dict[str, str]
) -> None:
    ollama.add(O.text("Not sure."))
    toml = routine_toml(route="ollama", system="Explain why the sky is blue.")
    r = run_worker(make_job(home, toml, ollama_url=ollama.url), env=env)
    assert (r.result.status, r.result.route, r.result.escalated) == ("ok", "ollama", False)
    assert r.total("local_output") == 80 and r.total("output") == 0

    claude.add(A.text("Not sure.", input_tokens=10, output_tokens=3))
    toml = routine_toml(route="anthropic", system="Explain why the sky is blue.")
    r = run_worker(make_job(home, toml, ollama_url=ollama.url, run_id="r2"), env=env)
    assert (r.result.status, r.result.route, r.result.escalated) == ("ok", "anthropic", False)
    assert (r.total("input"), r.total("output"), r.total("local_input")) == (10, 3, 0)


WORDS_40 = " ".join(["word"] * 40)


ON = Escalation()


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
    for trigger in (Trigger.SCHEDULE, Trigger.CATCH_UP, Trigger.MANUAL):
        task = prompts.task_text(datetime(2026, 7, 25, 6, tzinfo=UTC), trigger)
        assert not router.REASONING_RE.search(task)
    assert not router.REASONING_RE.search(prompts.runtime_notes("day-brief", specs))
    assert not router.REASONING_RE.search(json.dumps([s.description for s in specs]))
