"""Budget verdicts, checked before every premium model call (pure functions).

The allowance (sent in the job) covers what costs money: the premium model's tokens
(`max_tokens_per_run`, input + output) and dollars (what is left of today's
`max_dollars_per_day`). Local Ollama calls cost $0 and are never refused by the budget.

Invariant: no premium call starts once the allowance is used up. A single call can still
end above it (its output is unknown until it returns), so each call's `max_tokens` is also
capped at what the allowance can still pay for; the supervisor's backstop should therefore
act on a premium call that starts after the allowance was reached, not on the total alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from routines.spec import OnExceed

__all__ = ["PremiumAllowance", "SpendCheck", "Spent", "check", "exceeded", "output_cap"]


class SpendCheck(StrEnum):
    PROCEED = "proceed"  # make the premium call
    DEGRADE = "degrade"  # carry on with the local model ($0) instead
    STOP = "stop"  # end the run with status budget (and a notification for on_exceed=notify)


@dataclass(frozen=True, slots=True)
class PremiumAllowance:
    max_tokens: int | None  # premium tokens for this run; None: no cap
    dollars_left: float | None  # today's dollars left when the run started; None: no cap


@dataclass(frozen=True, slots=True)
class Spent:
    tokens: int = 0  # premium input + output so far in this run
    dollars: float = 0.0


def exceeded(allowance: PremiumAllowance, spent: Spent) -> str | None:
    """Why no further premium call is allowed, or None when one is."""
    if allowance.max_tokens is not None and spent.tokens >= allowance.max_tokens:
        return (
            f"the run used {spent.tokens:,} of its {allowance.max_tokens:,} premium tokens "
            "(max_tokens_per_run)"
        )
    if allowance.dollars_left is not None and spent.dollars >= allowance.dollars_left - 1e-9:
        left = max(allowance.dollars_left, 0.0)
        return (
            f"today's dollar allowance is spent (${left:.4f} was left, this run used "
            f"${spent.dollars:.4f}; max_dollars_per_day)"
        )
    return None


def check(
    allowance: PremiumAllowance, spent: Spent, on_exceed: OnExceed
) -> tuple[SpendCheck, str | None]:
    """The verdict before a premium call, with the reason when it is not PROCEED."""
    reason = exceeded(allowance, spent)
    if reason is None:
        return SpendCheck.PROCEED, None
    if on_exceed is OnExceed.DEGRADE:
        return SpendCheck.DEGRADE, reason
    return SpendCheck.STOP, reason


def output_cap(
    allowance: PremiumAllowance, spent: Spent, default: int, dollars_per_output_token: float
) -> tuple[int, bool]:
    """`max_tokens` for the next premium call, and whether the allowance (not the default)
    set it. Never below 1: a call is only made when `check` said PROCEED."""
    cap = default
    if allowance.max_tokens is not None:
        cap = min(cap, allowance.max_tokens - spent.tokens)
    if allowance.dollars_left is not None and dollars_per_output_token > 0:
        affordable = (allowance.dollars_left - spent.dollars) / dollars_per_output_token
        cap = min(cap, math.floor(affordable))
    cap = max(cap, 1)
    return cap, cap < default
