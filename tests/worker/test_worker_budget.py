"""Budget end to end: checked before every premium call; on_exceed = skip, degrade-to-local,
notify; a usage message after every model call; calls capped at what is left. At the end, the
verdicts and the output cap (worker/budget.py) without a process."""

from __future__ import annotations

from pathlib import Path

import pytest

from ipc import Job
from routines.spec import OnExceed
from tests.fakes import FakeAnthropic, FakeOllama
from tests.fakes import anthropic_replies as A
from tests.fakes import ollama_replies as O
from tests.worker.worker_harness import make_job, routine_toml, run_worker
from worker import budget
from worker.budget import PremiumAllowance, SpendCheck

LONG = "Everything is in order and here is the detail of it for today. " * 6
OUTCOME = ("report_outcome", {"status": "done", "summary": "brief written"})


def _job(
    home: Path,
    ollama: FakeOllama,
    on_exceed: str,
    route: str = "anthropic",
    *,
    max_tokens: int | None = None,
    dollars_left: float | None = 5.0,
) -> Job:
    toml = routine_toml(
        route=route, budget=f'max_dollars_per_day = 1.0\non_exceed = "{on_exceed}"\n'
    )
    return make_job(
        home, toml, ollama_url=ollama.url, max_tokens=max_tokens, dollars_left=dollars_left
    )


def test_skip_with_nothing_left_today_makes_no_call(
    home: Path, ollama: FakeOllama, claude: FakeAnthropic, env: dict[str, str]
) -> None:
    r = run_worker(_job(home, ollama, "skip", dollars_left=0.0), env=env)
    res = r.result
    assert (res.status, res.notify, res.output_file) == ("budget", None, None)
    assert "dollar allowance is spent" in res.summary
    assert claude.messages == [] and r.usages == []


@pytest.mark.slow
def test_skip_stops_before_the_call_that_would_pass_the_token_cap(
    home: Path, ollama: FakeOllama, claude: FakeAnthropic, env: dict[str, str]
) -> None:
    claude.add(A.tool_use(OUTCOME, input_tokens=100, output_tokens=30), A.text(LONG))
    r = run_worker(_job(home, ollama, "skip", max_tokens=120), env=env)
    assert r.result.status == "budget"
    assert "130 of its 120 premium tokens" in r.result.summary
    assert len(claude.messages) == 1
    assert claude.messages[0].body["max_tokens"] == 120  # no call may ask for more than is left
    assert len(r.usages) == 1 and (r.usages[0].input, r.usages[0].output) == (100, 30)


@pytest.mark.slow
def test_notify_stops_and_asks_for_a_notification(
    home: Path, ollama: FakeOllama, claude: FakeAnthropic, env: dict[str, str]
) -> None:
    claude.add(A.tool_use(OUTCOME, input_tokens=100, output_tokens=30))
    r = run_worker(_job(home, ollama, "notify", max_tokens=120), env=env)
    res = r.result
    assert res.status == "budget"
    assert res.notify is not None and res.notify.startswith("day-brief stopped: budget:")


@pytest.mark.slow
def test_degrade_to_local_finishes_the_run_on_ollama_at_zero_dollars(
    home: Path, ollama: FakeOllama, claude: FakeAnthropic, env: dict[str, str]
) -> None:
    claude.add(A.tool_use(OUTCOME, input_tokens=100, output_tokens=30))
    ollama.add(O.text(LONG, prompt_eval_count=500, eval_count=100))
    r = run_worker(_job(home, ollama, "degrade-to-local", max_tokens=120), env=env)
    res = r.result
    assert (res.status, res.route, res.model, res.outcome) == (
        "ok",
        "anthropic",
        "llama3.2:3b",
        "done",
    )
    assert len(claude.messages) == 1 and len(ollama.chats) == 1
    # The conversation moved over in Ollama's format, tool result included.
    roles = [m["role"] for m in ollama.chats[0].body["messages"]]
    assert roles == ["system", "user", "assistant", "tool"]
    assert (
        ollama.chats[0].body["messages"][2]["tool_calls"][0]["function"]["name"] == "report_outcome"
    )
    assert [(u.input, u.output, u.local_input, u.local_output) for u in r.usages] == [
        (100, 30, 0, 0),
        (0, 0, 500, 100),
    ]
    assert r.usages[1].dollars == 0
    assert any(
        "degrade" in str(e.data) or "continuing on the local model" in e.text
        for e in r.events_of("warn")
    )


@pytest.mark.slow
def test_the_output_cap_follows_the_dollars_left_and_a_cut_reply_is_budget(
    home: Path, ollama: FakeOllama, claude: FakeAnthropic, env: dict[str, str]
) -> None:
    claude.add(A.text("The brief is", stop_reason="max_tokens", input_tokens=10, output_tokens=66))
    r = run_worker(_job(home, ollama, "skip", dollars_left=0.001), env=env)
    assert claude.messages[0].body["max_tokens"] == 66  # $0.001 / $15 per MTok output
    assert r.result.status == "budget"
    assert "cut off where the run's allowance ran out" in r.result.summary


@pytest.mark.parametrize(
    ("on_exceed", "status", "route"),
    [("skip", "budget", "local"), ("degrade-to-local", "ok", "local")],
)
def test_an_escalation_the_budget_cannot_pay_for(
    home: Path,
    ollama: FakeOllama,
    claude: FakeAnthropic,
    env: dict[str, str],
    on_exceed: str,
    status: str,
    route: str,
) -> None:
    ollama.add(O.text("Not sure."))
    r = run_worker(_job(home, ollama, on_exceed, route="auto", dollars_left=0.0), env=env)
    assert (r.result.status, r.result.route, r.result.escalated) == (status, route, False)
    assert claude.messages == []
    assert len(r.usages) == 1 and r.usages[0].local_output == 80


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
