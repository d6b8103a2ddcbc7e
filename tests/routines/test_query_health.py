"""The routines' health (routines.query.health) as data: rows in, a verdict with its reasons
out, worst first; the bar shows it (tests/cli/test_cli_waybar.py)."""

from __future__ import annotations

from typing import Any

from routines.query import RoutineRow
from routines.query.health import HealthState, budget_share, routines_health


def row(**kw: Any) -> RoutineRow:
    base: dict[str, Any] = dict(
        name="news", kind="agent", origin="user", enabled=True, valid=True,
        schedule="every day at 06:00", expression="0 6 * * *", next_run=None,
        last_status="ok", last_outcome="done", last_finished=None, today_dollars=0.0,
        disabled_reason=None, errors=(),
    )  # fmt: skip
    base.update(kw)
    return RoutineRow(**base)


def test_all_well_is_ok_with_no_reasons() -> None:
    h = routines_health([row(), row(name="mail", max_dollars_per_day=1.0, today_dollars=0.5)])
    assert (h.state, h.reasons, h.needs_you, h.budget_share) == (HealthState.OK, (), (), 0.5)


def test_a_failed_last_run_or_a_routine_turned_off_is_critical_before_the_warnings() -> None:
    h = routines_health(
        [
            row(name="spent", max_dollars_per_day=0.2, today_dollars=0.16),  # 80%, in floats
            row(name="broke", last_status="failed"),
            row(name="off", enabled=False, disabled_reason="3 failures in a row"),
        ]
    )
    assert h.state is HealthState.CRITICAL
    assert h.reasons == (
        "broke: last run failed",
        "off was turned off: 3 failures in a row",
        "spent: 80% of its daily budget spent",
    )


def test_warnings_need_the_routine_on_except_an_invalid_file() -> None:
    h = routines_health(
        [
            row(name="asks", last_outcome="needs-attention"),
            row(name="bad", kind="?", enabled=False, valid=False, errors=("no [schedule]",)),
            row(name="idle", enabled=False, last_status="failed", today_dollars=9.0,
                max_dollars_per_day=1.0),
        ]
    )  # fmt: skip
    assert h.state is HealthState.WARNING
    assert h.reasons == ("asks: needs your attention", "bad: file invalid (1 error(s))")
    assert h.budget_share == 0.0  # an idle routine's spending does not fill the bar


def test_the_runs_waiting_for_a_person_are_named_and_a_budget_share_needs_a_budget() -> None:
    h = routines_health([row(name="ask", needs_you="r1"), row()])
    assert h.needs_you == ("ask",) and h.state is HealthState.OK
    assert budget_share(row(max_dollars_per_day=None, today_dollars=1.0)) is None
    assert budget_share(row(max_dollars_per_day=0.0, today_dollars=1.0)) is None
    assert budget_share(row(max_dollars_per_day=2.0, today_dollars=1.0)) == 0.5
