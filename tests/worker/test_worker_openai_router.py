"""The auto-router with an OpenAI-compatible local leg (llama.cpp / LM Studio, as config.toml
declares it): each of the four triggers escalates to the premium leg, both to Anthropic (the
real SDK against FakeAnthropic) and to a paid OpenAI-compatible provider (OpenRouter, a second
FakeOpenAI), through the real worker process."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.fakes import FakeAnthropic, FakeOpenAI
from tests.fakes import anthropic_replies as A
from tests.fakes import openai_replies as OA
from tests.worker.worker_harness import (
    API_KEY,
    WorkerRun,
    make_job,
    routine_toml,
    run_worker,
    worker_env,
)

CONFIDENT = "Three meetings today, two pull requests need review, inbox is quiet. " * 6
PREMIUM = "Premium brief: " + "everything is in order and here is the detail. " * 6
LOCAL_MODEL = OA.DEFAULT_MODEL
OPENROUTER_MODEL = "anthropic/claude-sonnet-4"
KEY = "sk-or-v1-router-test-0001"


@pytest.fixture
def local() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
def openrouter() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(models=(OPENROUTER_MODEL,)) as fake:
        yield fake


@dataclasses.dataclass
class Premium:
    """The premium leg under test: how to script it, count its calls, and name it."""

    kind: str
    claude: FakeAnthropic
    openrouter: FakeOpenAI

    def answer(self, text: str) -> None:
        if self.kind == "anthropic":
            self.claude.add(A.text(text, input_tokens=500, output_tokens=200))
        else:
            self.openrouter.add(
                OA.text(text, model=OPENROUTER_MODEL, prompt_tokens=500, completion_tokens=200)
            )

    def calls(self) -> int:
        return len(self.claude.messages if self.kind == "anthropic" else self.openrouter.chats)

    @property
    def model(self) -> str:
        return "claude-sonnet-4-6" if self.kind == "anthropic" else OPENROUTER_MODEL


@pytest.fixture(params=["anthropic", "openrouter"])
def premium(request: Any, claude: FakeAnthropic, openrouter: FakeOpenAI) -> Premium:
    return Premium(request.param, claude, openrouter)


def _run(
    home: Path,
    local: FakeOpenAI,
    premium: Premium,
    env: dict[str, str],
    *,
    system: str = "You write the user's morning brief.",
) -> WorkerRun:
    agent = (
        f'local_provider = "lmstudio"\nlocal_model = "{LOCAL_MODEL}"\nlocal_context_tokens = 4096'
    )
    providers: dict[str, Any] = {
        "lmstudio": {
            "kind": "openai",
            "base_url": local.base_url,
            "local": True,
            "key_file": None,
            "prices": {},
        }
    }
    if premium.kind == "openrouter":
        key = home / "secrets" / "openrouter-key"
        key.parent.mkdir(exist_ok=True)
        key.write_text(KEY)
        key.chmod(0o600)
        agent += f'\npremium_provider = "openrouter"\npremium_model = "{OPENROUTER_MODEL}"'
        providers["openrouter"] = {
            "kind": "openai",
            "base_url": premium.openrouter.base_url,
            "local": False,
            "key_file": str(key),
            "prices": {OPENROUTER_MODEL: [3.0, 15.0]},
        }
    toml = routine_toml(route="auto", system=system, extra_agent=agent)
    job = msgspec.structs.replace(make_job(home, toml), providers=providers)
    return run_worker(job, env=env)


def _escalated(r: WorkerRun, premium: Premium, trigger: str) -> None:
    res = r.result
    assert (res.status, res.route, res.escalated, res.escalated_reason) == (
        "ok",
        "local->premium",
        True,
        trigger,
    ), res
    assert res.model == premium.model
    assert "Premium brief" in r.output()
    assert premium.calls() == 1
    if premium.kind == "openrouter":
        assert premium.openrouter.chats[0].headers["authorization"] == f"Bearer {KEY}"
        assert premium.openrouter.chats[0].body["model"] == OPENROUTER_MODEL
    assert [e.data["reason"] for e in r.events_of("escalated")] == [trigger]
    assert (r.total("input"), r.total("output")) == (500, 200)
    assert r.total("dollars") == pytest.approx((500 * 3.0 + 200 * 15.0) / 1e6)


def test_confident_local_reply_stays_local(
    home: Path, local: FakeOpenAI, premium: Premium, env: dict[str, str]
) -> None:
    local.add(OA.text(CONFIDENT, prompt_tokens=300, completion_tokens=90))
    r = _run(home, local, premium, env)
    assert (r.result.status, r.result.route, r.result.escalated) == ("ok", "local", False)
    assert r.result.model == LOCAL_MODEL and premium.calls() == 0
    assert (r.total("local_input"), r.total("local_output"), r.total("dollars")) == (300, 90, 0)


def test_low_confidence_escalates(
    home: Path, local: FakeOpenAI, premium: Premium, env: dict[str, str]
) -> None:
    local.add(OA.text("I'm not sure what is on your calendar today. " * 8))
    premium.answer(PREMIUM)
    r = _run(home, local, premium, env)
    _escalated(r, premium, "low_confidence")
    assert len(local.chats) == 1 and r.total("local_input") == 200


def test_reasoning_task_escalates_before_the_local_call(
    home: Path, local: FakeOpenAI, premium: Premium, env: dict[str, str]
) -> None:
    premium.answer(PREMIUM)
    r = _run(home, local, premium, env, system="Explain why the build broke, step by step.")
    _escalated(r, premium, "reasoning_task")
    assert local.chats == []


@pytest.mark.parametrize("how", ["refused", "empty"])
def test_context_overflow_escalates(
    home: Path, local: FakeOpenAI, premium: Premium, env: dict[str, str], how: str
) -> None:
    # llama.cpp and LM Studio refuse a prompt past their context with a 400; a server that
    # cuts it instead answers nothing after a prompt that filled the context.
    if how == "refused":
        local.add(OA.context_exceeded(4096))
    else:
        local.add(OA.text("", prompt_tokens=4000, completion_tokens=0))
    premium.answer(PREMIUM)
    r = _run(home, local, premium, env)
    _escalated(r, premium, "context_overflow")
    assert len(local.chats) == 1


def test_malformed_tool_json_escalates(
    home: Path, local: FakeOpenAI, premium: Premium, env: dict[str, str]
) -> None:
    local.add(OA.tool_calls(("report_outcome", '{"status": "done", "summary": ')))
    premium.answer(PREMIUM)
    r = _run(home, local, premium, env)
    _escalated(r, premium, "malformed_tool_json")
    assert len(local.chats) == 1
    assert any("malformed tool JSON" in e.text for e in r.events_of("log"))


LOCAL_HEDGE = "I'm not sure what is on your calendar today, but here is what I found."


@pytest.mark.parametrize("how", ["no key", "down"])
def test_an_escalation_without_a_premium_key_keeps_the_local_answer(
    home: Path, local: FakeOpenAI, claude: FakeAnthropic, how: str
) -> None:
    """`auto` whose premium leg cannot be had: the local answer (18 words, so low_confidence
    fires) is kept as the output, the run needs attention saying why, and it is not a
    failure (a strike). The result names the model that answered, not the one it tried."""
    local.add(OA.text(LOCAL_HEDGE, prompt_tokens=120, completion_tokens=18))
    if how == "no key":
        env = worker_env(ANTHROPIC_BASE_URL=claude.url)  # no ANTHROPIC_API_KEY, no key file
        why = "no premium key"
    else:
        claude.close()  # a refused connection: the premium leg is down
        env = worker_env(ANTHROPIC_BASE_URL=claude.url, ANTHROPIC_API_KEY=API_KEY)
        why = "the premium leg failed: "
    premium = Premium("anthropic", claude, local)
    r = _run(home, local, premium, env)
    res = r.result
    assert (res.status, res.outcome) == ("ok", "needs-attention"), res
    assert res.summary.startswith(f"wanted to escalate: low_confidence; {why}"), res.summary
    assert (res.route, res.model, res.escalated) == ("local", LOCAL_MODEL, False)
    assert (res.escalated_reason, res.tried_model) == ("low_confidence", "claude-sonnet-4-6")
    assert "here is what I found" in r.output()
    assert (r.total("local_input"), r.total("local_output"), r.total("dollars")) == (120, 18, 0)


def test_a_reasoning_task_without_a_premium_key_is_answered_locally(
    home: Path, local: FakeOpenAI, claude: FakeAnthropic
) -> None:
    local.add(OA.text(CONFIDENT))
    env = worker_env(ANTHROPIC_BASE_URL=claude.url)
    r = _run(
        home, local, Premium("anthropic", claude, local), env, system="Explain why, step by step."
    )
    res = r.result
    assert (res.status, res.outcome, res.model) == ("ok", "needs-attention", LOCAL_MODEL), res
    assert res.summary == "wanted to escalate: reasoning_task; no premium key"
    assert len(local.chats) == 1 and claude.messages == []
