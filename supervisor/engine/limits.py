"""The limits on one run, as pure rules: what it may spend today (`allowance_for`), how long
it may take (`run_limit`), and how many failures in a row disable its routine (`strike`)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from routines.pricing import dollar_pair
from routines.runs import STRIKE_LIMIT, strike
from routines.spec import OnExceed, Route, Routine

__all__ = [
    "COPY_BACK_SEC",
    "STRIKE_LIMIT",
    "BudgetVerdict",
    "RunAllowance",
    "RunLimit",
    "allowance_for",
    "run_limit",
    "strike",
    "strike_reason",
    "turned_off_note",
]

# A worker enforces its run's limit itself and reports `timeout` with what it was doing (a
# command for its whole `timeout_sec`, an agent within `run_timeout_sec`); the supervisor's
# backstop waits this much longer for that report, so on a loaded machine the worker's own
# message is the one recorded, never a race against the kill
# (tests/supervisor/test_reliability_timeout.py).
REPORT_GRACE_SEC = 10.0
# What the backstop adds, once, for a worker that said it is copying a call's writes back
# (ipc EventKind.COPY_BACK) when its limit passes: a call that ended at its timeout is then
# copied back whole rather than cut with its folders half changed. A bound, not an estimate:
# the quota's 200,000 entries took ~21 s here, so ten times that and some
# (tests/supervisor/test_spawn.py::test_a_worker_copying_back_at_its_limit_gets_one_bounded_wait).
COPY_BACK_SEC = 300.0


@dataclass(frozen=True, slots=True)
class RunLimit:
    """How long the supervisor lets a worker run, and how a backstop kill names the limit."""

    seconds: float
    key: str  # the routine key the user set, as the timeout's detail names it


def run_limit(routine: Routine) -> RunLimit:
    """The supervisor's wall clock for one run of `routine` (past it: SIGTERM, SIGKILL 5 s later,
    status `timeout`; test_daemon_timeout.py::test_a_timeout_ends_the_whole_tree).

    An agent's worker ends its run within run_timeout_sec itself (worker/context.py
    Deadline); a command runs for exactly [command].timeout_sec inside the worker. Either
    way the backstop adds a grace, so that the worker, not the kill, reports the timeout;
    it ends only a worker that did not.
    """
    if routine.command is not None:
        return RunLimit(
            routine.command.timeout_sec + REPORT_GRACE_SEC,
            f"[command].timeout_sec = {routine.command.timeout_sec}, and the worker did not report",
        )
    return RunLimit(
        routine.run_timeout_sec + REPORT_GRACE_SEC,
        f"run_timeout_sec = {routine.run_timeout_sec}, and the worker did not report",
    )


class BudgetVerdict(StrEnum):
    RUN = "run"  # start the worker with the allowance
    REFUSE = "refuse"  # record status budget without starting (on_exceed skip or notify)


@dataclass(frozen=True, slots=True)
class RunAllowance:
    verdict: BudgetVerdict
    max_tokens: int | None
    dollars_left: float | None  # None: no dollar cap; 0 with degrade-to-local: local only
    detail: str = ""
    notify: bool = False


def allowance_for(routine: Routine, spent_today: float) -> RunAllowance:
    """What a run of `routine` may spend now, given the dollars it spent today."""
    budget = routine.budget
    if routine.agent is None:
        return RunAllowance(BudgetVerdict.RUN, None, None)
    cap = budget.max_dollars_per_day
    if cap is None or routine.agent.route is Route.OLLAMA:
        return RunAllowance(BudgetVerdict.RUN, budget.max_tokens_per_run, None)
    left = max(0.0, cap - spent_today)
    if left > 0 or budget.on_exceed is OnExceed.DEGRADE:
        return RunAllowance(BudgetVerdict.RUN, budget.max_tokens_per_run, left)
    spent, of = dollar_pair(spent_today, cap)
    detail = f"daily budget spent: {spent} of {of}"
    return RunAllowance(
        BudgetVerdict.REFUSE,
        budget.max_tokens_per_run,
        0.0,
        detail,
        notify=budget.on_exceed is OnExceed.NOTIFY,
    )


def strike_reason(detail: str) -> str:
    """The disabled_reason the ledger keeps for a routine the strikes turned off."""
    return f"{STRIKE_LIMIT} failed runs in a row; last: {detail}"[:500]


def turned_off_note(name: str, reason: str) -> str:
    """What `list` says of a routine the daemon turned off (`reason`: its disabled_reason),
    in place of "off by `vinos-routine disable`", which the person never ran
    (tests/cli/test_render.py::test_a_routine_turned_off_by_strikes_says_so_and_how_back)."""
    if reason.startswith(strike_reason("")):
        return (
            f"{name}: off after {STRIKE_LIMIT} failures in a row; "
            f"`vinos-routine enable {name}` after fixing"
        )
    return f"{name}: off ({reason}); `vinos-routine enable {name}` turns it back on"
