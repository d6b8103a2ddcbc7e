"""What a run of an agent routine will cost at least, and roughly at most, before it starts.

The one estimate both `run --dry-run` prints and the pool checks before dispatch: a run whose
minimum cannot fit the routine's remaining budget (its dollars left today, its tokens per run)
is skipped with that reason before any model call (`refusal`). Pure: a routine, its route's
prices and the prompt's extra text in, numbers out (tests/routines/test_estimate.py).

The minimum is the first request: the prompt (the routine's system prompt, the runtime's notes,
each tool's schema, memory and what an event hands it, at CHARS_PER_TOKEN) and one output token,
at the premium leg's prices when the route starts there; $0 when it starts on a local leg (it
may never escalate). The maximum is a rough ceiling for the dry run only: TYPICAL_TURNS
requests of a growing prompt and TYPICAL_OUTPUT tokens, capped by max_tokens_per_run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from routines import pricing
from routines.spec.providers import Leg, ProviderSettings, RouteInvalid, plan_route
from routines.spec.routine import Routine

__all__ = ["CHARS_PER_TOKEN", "Estimate", "estimate", "refusal"]

# A low count of characters per token (English runs ~4), so the minimum stays a minimum.
CHARS_PER_TOKEN = 4
RUNTIME_CHARS = 600  # the runtime's notes and the task line the worker adds to every prompt
TOOL_CHARS = 250  # one tool's name, description and schema, at least
TYPICAL_TURNS = 8
TYPICAL_OUTPUT = 4000


@dataclass(frozen=True, slots=True)
class Estimate:
    route: str  # the route's label: "local", "anthropic", a provider's name
    model: str  # the model the first request goes to
    paid_first: bool  # the first request is on a paid (premium) leg
    prompt_tokens: int  # the first request's prompt, estimated low
    low: float  # dollars: the first request and one output token ($0 on a local leg)
    high: float | None  # dollars, a rough ceiling; None when the paid model has no price
    note: str = ""  # why the range is what it is

    def as_json(self) -> dict[str, object]:
        return {
            "route": self.route,
            "model": self.model,
            "paid_first": self.paid_first,
            "prompt_tokens": self.prompt_tokens,
            "low": round(self.low, 6),
            "high": round(self.high, 6) if self.high is not None else None,
            "note": self.note,
        }


def estimate(
    routine: Routine,
    providers: Mapping[str, ProviderSettings],
    overrides: Mapping[str, tuple[float, float] | list[float]],
    extra_chars: int = 0,
) -> Estimate | None:
    """The cost range of one run; None for a command routine (no model) or an invalid route."""
    agent = routine.agent
    if agent is None:
        return None
    try:
        plan = plan_route(agent, providers)
    except RouteInvalid:
        return None  # the worker fails it with the reason; nothing to estimate
    chars = len(agent.system) + RUNTIME_CHARS + extra_chars
    chars += TOOL_CHARS * (1 + len(agent.tools) + len(agent.actions))
    prompt = chars // CHARS_PER_TOKEN
    premium = plan.premium
    settings = premium.settings
    table = overrides if settings is None else settings.prices
    pin: float | None
    pout: float | None
    try:
        pin, pout = pricing.price_of(premium.model, table, builtin=settings is None)
    except pricing.UnknownModelPrice:
        pin = pout = None
    paid_first = plan.only is Leg.PREMIUM
    first = premium if paid_first else plan.local
    ceiling_tokens = TYPICAL_TURNS * prompt + TYPICAL_OUTPUT
    if routine.budget.max_tokens_per_run is not None:
        ceiling_tokens = min(ceiling_tokens, routine.budget.max_tokens_per_run)
    if plan.only is Leg.LOCAL:
        return Estimate(plan.label, first.model, False, prompt, 0.0, 0.0, "local only: $0")
    high = None
    if pin is not None and pout is not None:
        high = (ceiling_tokens * pin + TYPICAL_OUTPUT * pout) / 1_000_000
    if not paid_first:
        note = "starts on the local model ($0); the ceiling is if it escalates"
        return Estimate(plan.label, first.model, False, prompt, 0.0, high, note)
    if pin is None or pout is None:
        return Estimate(plan.label, first.model, True, prompt, 0.0, None, "no price known")
    low = (prompt * pin + pout) / 1_000_000
    return Estimate(plan.label, first.model, True, prompt, low, high, "")


def refusal(
    est: Estimate | None,
    max_tokens: int | None,
    dollars_left: float | None,
    *,
    degrade: bool = False,
) -> str | None:
    """Why a run cannot fit its remaining budget even at its minimum, or None to go on.
    `degrade` (on_exceed = "degrade-to-local"): out of dollars it goes on locally at $0."""
    if est is None or not est.paid_first:
        return None
    if max_tokens is not None and est.prompt_tokens + 1 > max_tokens:
        return (
            f"not run: its first request alone is about {est.prompt_tokens:,} tokens, over "
            f"max_tokens_per_run ({max_tokens:,})"
        )
    if dollars_left is not None and est.low > dollars_left and not degrade:
        low, left = pricing.dollar_pair(est.low, dollars_left)
        return (
            f"not run: its first request alone costs about {low} on {est.model}, more than "
            f"the {left} left of today's budget"
        )
    return None
