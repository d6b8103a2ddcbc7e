"""routines/estimate.py: a run's minimum cost from its prompt and its route's prices, and the
refusal before dispatch when even that cannot fit what is left of its budget."""

from __future__ import annotations

from pathlib import Path

from routines.estimate import CHARS_PER_TOKEN, estimate, refusal
from routines.spec.loader import load_text

AGENT = """[routine]
enabled = true
[schedule]
cron = "0 6 * * *"
[agent]
route = "{route}"
system = "{system}"
{budget}
"""


def routine(route: str = "anthropic", system: str = "Report.", budget: str = "") -> object:
    return load_text(AGENT.format(route=route, system=system, budget=budget), Path("/r/x.toml"))


def test_a_premium_route_costs_its_first_request_at_least() -> None:
    est = estimate(routine(system="x" * 40_000), {}, {})  # type: ignore[arg-type]
    assert est is not None and est.paid_first and est.model == "claude-sonnet-4-6"
    assert est.prompt_tokens >= 40_000 // CHARS_PER_TOKEN
    # claude-sonnet-4-6: $3 / MTok in, $15 out: the prompt and one output token
    assert est.low == (est.prompt_tokens * 3.0 + 15.0) / 1_000_000
    assert est.high is not None and est.high > est.low


def test_a_route_that_starts_local_costs_nothing_at_least() -> None:
    auto = estimate(routine("auto"), {}, {})  # type: ignore[arg-type]
    assert auto is not None and auto.low == 0.0 and not auto.paid_first and auto.high
    local = estimate(routine("ollama"), {}, {})  # type: ignore[arg-type]
    assert local is not None and (local.low, local.high) == (0.0, 0.0)
    assert refusal(auto, 1, 0.0) is None


def test_config_prices_win_and_an_unpriced_model_is_never_refused() -> None:
    est = estimate(routine(), {}, {"claude-sonnet-4-6": (30.0, 150.0)})  # type: ignore[arg-type]
    assert est is not None and est.low == (est.prompt_tokens * 30.0 + 150.0) / 1_000_000


def test_refusal_names_the_budget_it_cannot_fit() -> None:
    est = estimate(routine(system="x" * 4000), {}, {})  # type: ignore[arg-type]
    assert est is not None
    assert refusal(est, None, 1.0) is None
    why = refusal(est, None, 0.000001)
    assert why is not None and why.startswith("not run: its first request alone costs about $")
    assert why.endswith("on claude-sonnet-4-6, more than the $0.000 left of today's budget")
    assert refusal(est, None, 0.000001, degrade=True) is None  # goes on locally at $0
    why = refusal(est, 100, None)
    assert why is not None and "over max_tokens_per_run (100)" in why
