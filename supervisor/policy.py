"""Pure rules the supervisor applies around a run: today's allowance, strikes, final status."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ipc.messages import RunStatus
from routines.pricing import dollar_pair
from routines.spec import OnExceed, Route, Routine

__all__ = [
    "STRIKES",
    "Allowance",
    "Verdict",
    "allowance_for",
    "strike",
]

STRIKES = 3  # consecutive failures that disable a routine


class Verdict(StrEnum):
    RUN = "run"  # start the worker with the allowance
    REFUSE = "refuse"  # record status budget without starting (on_exceed skip or notify)


@dataclass(frozen=True, slots=True)
class Allowance:
    verdict: Verdict
    max_tokens: int | None
    dollars_left: float | None  # None: no dollar cap; 0 with degrade-to-local: local only
    detail: str = ""
    notify: bool = False


def allowance_for(routine: Routine, spent_today: float) -> Allowance:
    """What a run of `routine` may spend now, given the dollars it spent today."""
    budget = routine.budget
    if routine.agent is None:
        return Allowance(Verdict.RUN, None, None)
    cap = budget.max_dollars_per_day
    if cap is None or routine.agent.route is Route.OLLAMA:
        return Allowance(Verdict.RUN, budget.max_tokens_per_run, None)
    left = max(0.0, cap - spent_today)
    if left > 0 or budget.on_exceed is OnExceed.DEGRADE:
        return Allowance(Verdict.RUN, budget.max_tokens_per_run, left)
    spent, of = dollar_pair(spent_today, cap)
    detail = f"daily budget spent: {spent} of {of}"
    return Allowance(
        Verdict.REFUSE,
        budget.max_tokens_per_run,
        0.0,
        detail,
        notify=budget.on_exceed is OnExceed.NOTIFY,
    )


def strike(status: str, streak: int) -> tuple[int, bool]:
    """The failure streak after a run ended with `status`, and whether to disable now.

    failed and timeout count; ok resets; everything else (skipped, missed, budget,
    interrupted) leaves the streak as it was.
    """
    if status in (RunStatus.FAILED, RunStatus.TIMEOUT):
        streak += 1
        return streak, streak >= STRIKES
    if status == RunStatus.OK:
        return 0, False
    return streak, False
